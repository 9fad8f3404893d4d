package io.omnitable.spark.procedures

import java.io.File
import java.sql.DriverManager
import java.util.UUID

import scala.collection.mutable

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.catalog.{CatalogAddress, Secret}
import io.omnitable.spark.source.OmniTableCatalog
import org.apache.spark.sql.{AnalysisException, Row}
import org.scalatest.funsuite.AnyFunSuite

/**
 * `CALL <catalog>.system.<name>(...)`: the branch and tag procedures write exactly the `refs`
 * rows the Python API writes, arguments bind by position and by name, and every bad call fails
 * clearly and changes nothing. On a scratch copy of the SQLite test warehouse (catalog `omt`)
 * and, when the PostgreSQL fixture exists, on its warehouse (catalog `omt_pg`: there the suite
 * only creates and deletes refs of its own, which other suites do not read).
 */
class OmniTableProceduresSuite extends AnyFunSuite with SharedSparkSession {

  private lazy val sqliteCopy: File = TestWarehouses.copyOfWarehouse()
  private lazy val pg: Option[String] = Option(TestWarehouses.manifest.get("postgres")).map(_.get("warehouse").asText())

  override protected def sparkConf: Map[String, String] = Map(
    "spark.sql.catalog.omt" -> classOf[OmniTableCatalog].getName,
    "spark.sql.catalog.omt.warehouse" -> sqliteCopy.getPath) ++ pg.toSeq.flatMap { w =>
    Seq("spark.sql.catalog.omt_pg" -> classOf[OmniTableCatalog].getName, "spark.sql.catalog.omt_pg.warehouse" -> w)
  }

  private def v(key: String): Long = TestWarehouses.version("refs", key)

  /** The `refs` rows of table `refs` by name: (kind, version, parent, fork_version, max_age_s). */
  private def refRows(catalog: String): Map[String, (String, Long, Option[String], Option[Long], Option[Long])] = {
    val out = mutable.Map.empty[String, (String, Long, Option[String], Option[Long], Option[Long])]
    withJdbc(catalog) { conn =>
      val rs = conn.createStatement().executeQuery(
        "SELECT r.name, r.kind, r.version, r.parent_branch, r.fork_version, r.max_age_s FROM refs r " +
          "JOIN tables t ON t.table_id = r.table_id WHERE t.name = 'refs'")
      while (rs.next()) {
        def opt(i: Int) = { val x = rs.getLong(i); if (rs.wasNull()) None else Some(x) }
        out(rs.getString(1)) = (rs.getString(2), rs.getLong(3), Option(rs.getString(4)), opt(5), opt(6))
      }
    }
    out.toMap
  }

  private def withJdbc[T](catalog: String)(body: java.sql.Connection => T): T = {
    val conn = if (catalog == "omt") DriverManager.getConnection(s"jdbc:sqlite:${sqliteCopy.getPath}/catalog.db")
    else {
      val a = CatalogAddress.parse(pg.get).asInstanceOf[io.omnitable.spark.catalog.PostgresAddress]
      val props = new java.util.Properties()
      a.user.foreach(props.setProperty("user", _))
      a.password.foreach {
        case Secret.FromEnv(name) => props.setProperty("password", sys.env(name))
        case Secret.Literal(pw) => props.setProperty("password", pw)
      }
      new org.postgresql.Driver().connect(a.jdbcUrl, props)
    }
    try body(conn)
    finally conn.close()
  }

  private def catalogs: Seq[String] = "omt" +: pg.map(_ => "omt_pg").toSeq

  private def fresh(prefix: String): String = s"${prefix}_${UUID.randomUUID().toString.take(8)}"

  private def call(sql: String): Row = {
    val rows = spark.sql(sql).collect()
    assert(rows.length == 1)
    rows.head
  }

  private def count(sql: String): Long = spark.sql(sql).collect().head.getLong(0)

  /** Asserts `sql` fails with a message containing every one of `parts`, and that no ref changed. */
  private def refused(catalog: String, sql: String, parts: String*): String = {
    val before = refRows(catalog)
    val e = intercept[Exception](spark.sql(sql).collect()) // analysis errors, and casts that fail in the call
    parts.foreach(p => assert(e.getMessage.contains(p), s"'$p' not in: ${e.getMessage}"))
    assert(refRows(catalog) == before, s"$sql changed the refs")
    e.getMessage
  }

  test("create_branch by position and by name writes the refs row Python writes") {
    catalogs.foreach { c =>
      val b1 = fresh("b")
      val r = call(s"CALL $c.system.create_branch('refs', '$b1')")
      assert(r.getAs[String]("name") == b1 && r.getAs[String]("kind") == "branch")
      assert(r.getAs[Long]("version") == v("v4") && r.getAs[String]("parent") == "main")
      assert(r.getAs[Long]("fork_version") == v("v4") && r.isNullAt(r.fieldIndex("max_age_s")))
      assert(r.getAs[String]("created_at").matches("""\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"""))
      assert(refRows(c)(b1) == (("branch", v("v4"), Some("main"), Some(v("v4")), None)))
      val b2 = fresh("b")
      call(s"CALL $c.system.create_branch(version => ${v("v1")}, branch => '$b2', table => 'refs')")
      assert(refRows(c)(b2) == (("branch", v("v1"), Some("main"), Some(v("v1")), None)))
      assert(count(s"SELECT COUNT(*) FROM $c.refs VERSION AS OF '$b2'") == 100)
      val b3 = fresh("b") // from another branch, positionally, at its head
      call(s"CALL $c.system.create_branch('refs', '$b3', 'dev')")
      assert(refRows(c)(b3) == (("branch", v("vdev"), Some("dev"), Some(v("vdev")), None)))
      assert(count(s"SELECT COUNT(*) FROM $c.refs VERSION AS OF '$b3'") == 150)
      val b4 = fresh("b") // a version of dev's history committed on main: owned by main
      call(s"CALL $c.system.create_branch('refs', '$b4', 'dev', ${v("v1")})")
      assert(refRows(c)(b4) == (("branch", v("v1"), Some("main"), Some(v("v1")), None)))
      val b5 = fresh("b") // from a tag: the tag's branch and version
      call(s"CALL $c.system.create_branch('refs', '$b5', from_ref => 't1')")
      assert(refRows(c)(b5) == (("branch", v("v1"), Some("main"), Some(v("v1")), None)))
      Seq(b1, b2, b3, b4, b5).foreach(b => call(s"CALL $c.system.delete_branch('refs', '$b')"))
      assert(Seq(b1, b2, b3, b4, b5).forall(b => !refRows(c).contains(b)))
    }
  }

  test("create_tag pins a version of a branch, with a retention in seconds or as an interval") {
    catalogs.foreach { c =>
      val t1 = fresh("t")
      val r = call(s"CALL $c.system.create_tag('refs', '$t1')")
      assert(r.getAs[String]("kind") == "tag" && r.getAs[Long]("version") == v("v4"))
      assert(r.isNullAt(r.fieldIndex("fork_version")) && r.isNullAt(r.fieldIndex("expires_at")))
      assert(refRows(c)(t1) == (("tag", v("v4"), Some("main"), None, None)))
      val t2 = fresh("t")
      val r2 = call(s"CALL $c.system.create_tag(table => 'refs', tag => '$t2', branch => 'dev', max_age => 3600.9)")
      assert(refRows(c)(t2) == (("tag", v("vdev"), Some("dev"), None, Some(3600L))))
      val created = java.time.Instant.parse(r2.getAs[String]("created_at"))
      assert(java.time.Instant.parse(r2.getAs[String]("expires_at")) == created.plusSeconds(3600))
      val t3 = fresh("t")
      call(s"CALL $c.system.create_tag('refs', '$t3', ${v("v2")}, max_age => '7 days')")
      assert(refRows(c)(t3) == (("tag", v("v2"), Some("main"), None, Some(7 * 86400L))))
      assert(count(s"SELECT COUNT(*) FROM $c.refs VERSION AS OF '$t3'") == 200)
      val t4 = fresh("t")
      call(s"CALL $c.system.create_tag('refs', '$t4', max_age => INTERVAL '2' HOUR)")
      assert(refRows(c)(t4)._5.contains(7200L))
      val t5 = fresh("t") // a version of main's history read through dev: owned by main
      call(s"CALL $c.system.create_tag('refs', '$t5', ${v("v1")}, 'dev')")
      assert(refRows(c)(t5) == (("tag", v("v1"), Some("main"), None, None)))
      val d = call(s"CALL $c.system.delete_tag(tag => '$t2', table => 'refs')")
      assert(d.getAs[String]("name") == t2 && d.getAs[Long]("max_age_s") == 3600L)
      Seq(t1, t3, t4, t5).foreach(t => call(s"CALL $c.system.delete_tag('refs', '$t')"))
      assert(Seq(t1, t2, t3, t4, t5).forall(t => !refRows(c).contains(t)))
    }
  }

  test("a branch that refs are based on is not deleted") {
    catalogs.foreach { c =>
      val child = fresh("c") // a tag of dev's own commit: based on dev (a branch forked from dev would be too)
      call(s"CALL $c.system.create_tag('refs', '$child', branch => 'dev')")
      assert(refRows(c)(child)._3.contains("dev"))
      refused(c, s"CALL $c.system.delete_branch('refs', 'dev')", s"tag '$child' are based on it")
      call(s"CALL $c.system.delete_tag('refs', '$child')")
    }
  }

  test("delete_branch moves the branch's rows aside, as Python's delete does") {
    val before = withJdbc("omt")(conn => branchRows(conn, "dev"))
    assert(before.values.sum > 0, "the fixture's branch 'dev' has commits, batches, fragments and files")
    val r = call("CALL omt.system.delete_branch('refs', 'dev')")
    assert(r.getAs[String]("name") == "dev" && r.getAs[Long]("version") == v("vdev"))
    assert(r.getAs[Long]("fork_version") == v("v1"))
    withJdbc("omt") { conn =>
      assert(branchRows(conn, "dev").values.sum == 0)
      val moved = conn.createStatement().executeQuery(
        "SELECT DISTINCT branch FROM commits WHERE branch LIKE '~deleted~dev~%'")
      assert(moved.next() && moved.getString(1).matches("~deleted~dev~[0-9a-f]{12}") && !moved.next())
      val kept = conn.createStatement().executeQuery("SELECT COUNT(*) FROM commits WHERE branch LIKE '~deleted~dev~%'")
      kept.next()
      assert(kept.getLong(1) == before("commits"))
    }
    assert(!refRows("omt").contains("dev"))
    // a new branch of the same name starts from its own fork, empty of the old one's commits
    call("CALL omt.system.create_branch('refs', 'dev', 'main', " + v("v1") + ")")
    assert(count("SELECT COUNT(*) FROM omt.refs VERSION AS OF 'dev'") == 100)
  }

  private def branchRows(conn: java.sql.Connection, branch: String): Map[String, Long] =
    Seq("commits", "columns", "batches", "fragments", "files", "deletion_vectors", "removals", "features").map { t =>
      val st = conn.prepareStatement(s"SELECT COUNT(*) FROM $t WHERE branch = ?")
      st.setString(1, branch)
      val rs = st.executeQuery()
      rs.next()
      t -> rs.getLong(1)
    }.toMap

  test("bad refs: names, taken names, versions beyond the head, main, dependents; nothing changes") {
    catalogs.foreach { c =>
      val p = s"$c.system"
      refused(c, s"CALL $p.create_branch('refs', 'a/b')", "Invalid branch name 'a/b'")
      refused(c, s"CALL $p.create_branch('refs', '123')", "Invalid branch name '123'")
      refused(c, s"CALL $p.create_tag('refs', 'x y')", "Invalid tag name 'x y'")
      refused(c, s"CALL $p.create_branch('refs', 'ok_name', 'no such')", "Invalid branch or tag name 'no such'")
      refused(c, s"CALL $p.create_branch('refs', 't1')", "Cannot create branch 't1'", "a tag of that name exists")
      refused(c, s"CALL $p.create_tag('refs', 'main')", "Cannot create tag 'main'", "a branch of that name exists")
      refused(
        c,
        s"CALL $p.create_branch('refs', 'nb', 'main', ${v("v4") + 100})",
        "Cannot create branch 'nb'",
        s"version ${v("v4") + 100}")
      refused(
        c,
        s"CALL $p.create_tag('refs', 'nt', ${v("vdev")}, 'main')",
        "Cannot create tag 'nt'",
        "not in the history of 'main'")
      refused(c, s"CALL $p.create_branch('refs', 'nb', 'nosuch')", "Cannot create branch 'nb'", "branch 'nosuch'")
      refused(c, s"CALL $p.create_branch('refs', 'nb', 't1', ${v("v1")})", "from_ref 't1' is a tag")
      refused(c, s"CALL $p.create_tag('refs', 'nt', max_age => 0.5)", "'max_age'", "at least 1 second")
      refused(c, s"CALL $p.create_tag('refs', 'nt', max_age => '1 month')", "'max_age'", "'1 month'")
      refused(c, s"CALL $p.create_tag('refs', 'nt', max_age => 'soon')", "'max_age'", "'soon'")
      refused(c, s"CALL $p.delete_branch('refs', 'main')", "Cannot delete branch 'main'")
      refused(c, s"CALL $p.delete_branch('refs', 'nosuch')", "Cannot find branch 'nosuch'", "branches: ")
      refused(c, s"CALL $p.delete_tag('refs', 'dev')", "Cannot find tag 'dev'", "tags: ")
      refused(c, s"CALL $p.delete_tag('refs', 'nosuch')", "Cannot find tag 'nosuch'", "t1")
    }
  }

  test("bad calls: unknown procedures and tables, missing, extra, mistyped and NULL arguments") {
    catalogs.foreach { c =>
      val p = s"$c.system"
      val unknown = refused(c, s"CALL $p.make_branch('refs', 'x')", "Cannot find procedure 'system.make_branch'")
      assert(Seq("create_branch", "create_tag", "delete_branch", "delete_tag", "rollback").forall(unknown.contains))
      refused(c, s"CALL $c.other.create_branch('refs', 'x')", "Cannot find procedure 'other.create_branch'")
      refused(c, s"CALL $p.create_branch('nosuch', 'x')", "Cannot find table 'nosuch'", "refs")
      refused(c, s"CALL $p.create_branch('refs')", "REQUIRED_PARAMETER_NOT_FOUND", "branch")
      refused(
        c,
        s"CALL $p.create_branch(table => 'refs', branch => 'x', colour => 'red')",
        "UNRECOGNIZED_PARAMETER_NAME",
        "colour")
      refused(c, s"CALL $p.delete_tag('refs', 't1', 'extra')", "WRONG_NUM_ARGS")
      refused(c, s"CALL $p.create_branch('refs', 'x', 'main', 'abc')")
      refused(c, s"CALL $p.create_branch('refs', NULL)", "argument 'branch' is NULL")
      refused(c, s"CALL $p.create_branch(NULL, 'x')", "argument 'table' is NULL")
    }
  }

  test("backfill and retry_errors run in the JVM (SQL features) and check their arguments") {
    catalogs.foreach { c =>
      // tests/spark/test_procedures_backfill.py, test_procedures_backfill_errors.py run them on data
      refused(c, s"CALL $c.system.backfill('refs', 'nope')", "no registered feature", "registered features: none")
      refused(c, s"CALL $c.system.retry_errors('refs', 'nope')", "no registered feature", "registered features: none")
      refused(c, s"CALL $c.system.retry_errors('refs')", "REQUIRED_PARAMETER_NOT_FOUND", "features")
      // features and batches as arrays (bound as ARRAY<STRING>); another element type is refused at binding
      refused(c, s"CALL $c.system.backfill('refs', array('nope'))", "no registered feature")
      refused(
        c,
        s"CALL $c.system.retry_errors(table => 'refs', features => array('nope'), batches => array('b'))",
        "Cannot find batch(es) 'b'")
      refused(c, s"CALL $c.system.backfill('refs', array(1, 2))", "argument 'features' is an array of INT")
      refused(
        c,
        s"CALL $c.system.backfill('refs', 'a', 'main', array(1.5))",
        "argument 'batches' is an array of DECIMAL")
      refused(c, s"CALL $c.system.retry_errors('refs', array())", "argument 'features' is array(): give feature names")
      refused(
        c,
        s"CALL $c.system.backfill('refs', array('a', NULL, 'b'))",
        "procedure system.backfill: argument 'features' has a NULL element at position 2 of 3",
        "give feature names as non-NULL strings"
      )
    }
  }

  test("SHOW PROCEDURES lists the system namespace") {
    val names = spark.sql("SHOW PROCEDURES IN omt.system").collect().map(r => r.getString(r.length - 1)).toSet
    assert(Set("create_branch", "create_tag", "delete_branch", "delete_tag", "rollback").subsetOf(names), names)
    val described = spark.sql("DESCRIBE PROCEDURE omt.system.create_tag").collect().mkString("\n")
    assert(described.contains("Table.create_tag") && described.contains("branch => 'main', max_age => NULL"), described)
  }

  test("a catalog of an unknown schema version is refused and left unchanged") {
    val copy = TestWarehouses.copyOfWarehouse()
    val db = s"jdbc:sqlite:${copy.getPath}/catalog.db"
    val conn = DriverManager.getConnection(db)
    try conn.createStatement().executeUpdate("UPDATE omnitable_meta SET value = '999' WHERE key = 'schema_version'")
    finally conn.close()
    withConf(
      "spark.sql.catalog.omt_old" -> classOf[OmniTableCatalog].getName,
      "spark.sql.catalog.omt_old.warehouse" -> copy.getPath) {
      val e = intercept[AnalysisException](spark.sql("CALL omt_old.system.create_tag('refs', 'x')").collect())
      assert(e.getMessage.contains("schema version is 999"))
    }
    val check = DriverManager.getConnection(db)
    try {
      val rs = check.createStatement().executeQuery("SELECT COUNT(*) FROM refs WHERE name = 'x'")
      rs.next()
      assert(rs.getLong(1) == 0)
    } finally check.close()
  }
}
