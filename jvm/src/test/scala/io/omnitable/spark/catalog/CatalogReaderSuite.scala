package io.omnitable.spark.catalog

import java.io.File
import java.util.Properties

import io.omnitable.spark.TestWarehouses
import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

class CatalogReaderSuite extends AnyFunSuite with BeforeAndAfterAll {

  private lazy val reader = new CatalogReader(TestWarehouses.warehouse)
  private val hand = new HandMadeCatalog

  override protected def beforeAll(): Unit = {
    // main: 0 1 2 . . 5 ; b1 forks main@2: 3 4 ; b2 forks b1@4: 6 ; tag t pins b1@3
    Seq(0 -> "main", 1 -> "main", 2 -> "main", 3 -> "b1", 4 -> "b1", 5 -> "main", 6 -> "b2").foreach {
      case (v, b) => hand.commit(v.toLong, b, f"2026-01-0${v + 1}T00:00:00.000000Z")
    }
    hand.ref("main", "branch", 5, None, None)
    hand.ref("b1", "branch", 4, Some("main"), Some(2))
    hand.ref("b2", "branch", 6, Some("b1"), Some(4))
    hand.ref("t", "tag", 3, Some("b1"), None)
  }

  override protected def afterAll(): Unit = hand.close()

  private lazy val handReader = new CatalogReader(hand.dir.getPath)
  private def resolve(spec: SnapshotSpec): SnapshotId = handReader.loadTable("hand", spec).snapshot

  test("a table's properties are read from the catalog, values as text") {
    assert(handReader.loadTable("hand", SnapshotSpec.Head).table.properties.isEmpty)
    hand.exec("""UPDATE tables SET properties = '{"read.batch_size": 7, "read.on_corrupt": "skip_fragment", """ +
      """"flag": true, "meta": {"a": [1]}}' WHERE table_id = 't0'""")
    try {
      assert(handReader.loadTable("hand", SnapshotSpec.Head).table.properties == Map(
        "read.batch_size" -> "7",
        "read.on_corrupt" -> "skip_fragment",
        "flag" -> "true",
        "meta" -> """{"a":[1]}"""))
      hand.exec("UPDATE tables SET properties = '[1]' WHERE table_id = 't0'")
      val e = intercept[OmniTableAnalysisException](handReader.loadTable("hand", SnapshotSpec.Head))
      assert(e.getMessage.contains("the properties of table 'hand' are not a JSON object"))
    } finally hand.exec("UPDATE tables SET properties = '{}' WHERE table_id = 't0'")
  }

  test("branch heads resolve to their segments, parents up to the fork version") {
    assert(resolve(SnapshotSpec.Head) == SnapshotId(5, Seq(Segment("main", 5)), "branch main (version 5)"))
    assert(resolve(SnapshotSpec(branch = Some("b1"))).segments == Seq(Segment("b1", 4), Segment("main", 2)))
    assert(resolve(SnapshotSpec(branch = Some("b2"))).segments ==
      Seq(Segment("b2", 6), Segment("b1", 4), Segment("main", 2)))
  }

  test("tags and versions resolve through the branch that made them") {
    assert(resolve(SnapshotSpec(tag = Some("t"))).segments == Seq(Segment("b1", 3), Segment("main", 2)))
    assert(resolve(SnapshotSpec(ref = Some("t"))).version == 3)
    assert(resolve(SnapshotSpec(ref = Some("b2"))).version == 6)
    assert(resolve(SnapshotSpec(version = Some(1))).segments == Seq(Segment("main", 1)))
    assert(resolve(SnapshotSpec(version = Some(4))).segments == Seq(Segment("b1", 4), Segment("main", 2)))
    // a version in a branch's history, read through that branch
    assert(resolve(SnapshotSpec(branch = Some("b2"), version = Some(1))).segments == Seq(Segment("main", 1)))
  }

  test("time travel by timestamp follows the branch history") {
    val micros = (iso: String) => SnapshotResolver.toMicros(iso)
    assert(resolve(SnapshotSpec(asOfMicros = Some(micros("2026-01-04T12:00:00Z")))).version == 2)
    assert(resolve(SnapshotSpec(branch = Some("b1"), asOfMicros = Some(micros("2026-01-04T12:00:00Z")))).version == 3)
    intercept[OmniTableAnalysisException](resolve(SnapshotSpec(asOfMicros = Some(micros("2025-01-01T00:00:00Z")))))
  }

  test("bad refs and versions are clear errors") {
    def msg(spec: SnapshotSpec) = intercept[OmniTableAnalysisException](resolve(spec)).getMessage
    assert(msg(SnapshotSpec(branch =
      Some("x"))).contains("Cannot find branch 'x' of table 'hand' (branches: b1, b2, main)"))
    assert(msg(SnapshotSpec(branch = Some("t"))).contains("Cannot find branch 't'"))
    assert(msg(SnapshotSpec(tag = Some("b1"))).contains("Cannot find tag 'b1' of table 'hand' (tags: t)"))
    assert(msg(SnapshotSpec(version = Some(7))).contains("versions run from 0 to 6"))
    assert(msg(SnapshotSpec(branch = Some("b1"), version = Some(5))).contains("not in the history of 'b1'"))
    assert(msg(SnapshotSpec(branch = Some("main"), version = Some(3))).contains("not in the history of 'main'"))
    assert(msg(SnapshotSpec(tag = Some("t"), version = Some(3))).contains("select a snapshot"))
    // a tag pins one version: an instant on top of it is refused, not ignored
    assert(msg(SnapshotSpec(tag = Some("t"), asOfMicros = Some(0L))).contains("select a snapshot"))
  }

  test("tables, columns and fragments of a Python-written warehouse") {
    assert(reader.listTables() == Seq("misaligned", "pruning", "refs", "types"))
    val snap = reader.loadTable("pruning", SnapshotSpec.Head)
    assert(snap.columns.map(_.name) == Seq("_ai_unique_id_", "score", "k", "name", "payload"))
    assert(snap.columns.map(_.groupName) == Seq("base", "hot", "hot", "base", "wide"))
    assert(snap.batchCount == 4 && reader.batchNames(snap) == Seq("p1", "p2", "p3", "p4"))
    // a table's directory is unique per table id: <name>-<table_id>
    assert(snap.dataRoot.startsWith("file:") && snap.tableUri.endsWith(s"/wh/pruning-${snap.table.tableId}"))
    val fragments = reader.loadFragments(snap)
    assert(fragments.size == 20 && fragments.forall(_.rowCount == 1000))
    assert(fragments.map(_.batchName).distinct == Seq("p1", "p2", "p3", "p4"), "fragments come in table order")
    val f = fragments.head
    assert(f.files.map(_.groupName).sorted == Seq("base", "hot", "wide"))
    val score = snap.columns.find(_.name == "score").get
    assert(f.fileFor(score.columnId).map(_.groupName).contains("hot"))
    assert(f.fileFor(score.columnId).get.columns(score.columnId) == FileColumnStats(Some(0), Some("0.0"), Some("9.99")))
  }

  test("a column re-added later is provided by the newest file carrying it") {
    val snap = reader.loadTable("misaligned", SnapshotSpec.Head)
    val f = snap.columns.find(_.name == "f").get
    val frags = reader.loadFragments(snap)
    assert(frags.forall(_.fileFor(f.columnId).forall(_.groupName == "feat")))
  }

  test("hand-made catalogs name raw column sets as the Python writer does") {
    val conn = new org.sqlite.JDBC().connect(
      "jdbc:sqlite:" + new File(TestWarehouses.warehouse, "catalog.db"),
      new Properties())
    try {
      val rs = conn.createStatement().executeQuery(
        "SELECT table_id, set_id, column_id FROM column_sets cs WHERE NOT EXISTS (SELECT 1 FROM column_sets d " +
          "WHERE d.table_id = cs.table_id AND d.set_id = cs.set_id AND d.feature_version IS NOT NULL) " +
          "ORDER BY table_id, set_id, position")
      val rows = Iterator.continually(rs).takeWhile(_.next())
        .map(r => ((r.getString(1), r.getString(2)), r.getInt(3))).toSeq
      assert(rows.nonEmpty)
      rows.groupMap(_._1)(_._2).foreach { case ((_, id), columns) => assert(HandMadeCatalog.setId(columns) == id) }
    } finally conn.close()
  }

  private def withCopy(sql: String)(check: String => Unit): Unit = {
    val dir = TestWarehouses.copyOfWarehouse()
    val conn = new org.sqlite.JDBC().connect("jdbc:sqlite:" + new File(dir, "catalog.db"), new Properties())
    try conn.createStatement().executeUpdate(sql)
    finally conn.close()
    check(dir.getPath)
  }

  test("a catalog of another schema version is refused, naming both versions") {
    withCopy("UPDATE omnitable_meta SET value = '99' WHERE key = 'schema_version'") { wh =>
      val e = intercept[OmniTableAnalysisException](new CatalogReader(wh).listTables())
      assert(e.getMessage.contains("schema version is 99 but this jar reads version " + SchemaFile.version))
      assert(!e.getMessage.contains("upgrade-catalog"))
    }
    withCopy("UPDATE omnitable_meta SET value = '2' WHERE key = 'schema_version'") { wh =>
      val e = intercept[OmniTableAnalysisException](new CatalogReader(wh).listTables())
      assert(e.getMessage.contains("schema version is 2 but this jar reads version " + SchemaFile.version))
      assert(e.getMessage.contains("upgrade-catalog"))
    }
    withCopy("DROP TABLE omnitable_meta") { wh =>
      val e = intercept[OmniTableAnalysisException](new CatalogReader(wh).listTables())
      assert(e.getMessage.contains("no omnitable_meta table"))
    }
  }

  test("the JVM opens SQLite catalogs read-only") {
    val conn = JdbcConnector.open(CatalogAddress.parse(TestWarehouses.warehouse))
    try {
      val e = intercept[java.sql.SQLException](conn.createStatement().executeUpdate("DELETE FROM refs"))
      assert(e.getMessage.contains("READONLY"))
    } finally conn.close()
  }

  test("a PostgreSQL catalog reads like a SQLite one") {
    val pg = Option(TestWarehouses.manifest.get("postgres"))
    if (pg.isEmpty) {
      if (sys.env.get("OMNITABLE_REQUIRE_POSTGRES").contains("1")) fail("OMNITABLE_TEST_POSTGRES_URL is not set")
      cancel("PostgreSQL tests need OMNITABLE_TEST_POSTGRES_URL (see scripts/start-postgres.sh)")
    }
    val warehouse = pg.get.get("warehouse").asText()
    assert(warehouse.contains(":env:"), "the fixture passes the password by env: reference")
    val r = new CatalogReader(warehouse)
    assert(r.listTables() == Seq("refs"))
    val dev = r.loadTable("refs", SnapshotSpec(branch = Some("dev")))
    assert(dev.batchCount == 2 && r.batchNames(dev).toSet == Set("r1", "d1"))
    assert(r.loadFragments(dev).map(_.rowCount).sum == 150)
    assert(r.loadTable("refs", SnapshotSpec(tag = Some("t1"))).snapshot.version == pg.get.get("v1").asLong())
    val noPw = new CatalogReader(warehouse, _ => None)
    assert(intercept[OmniTableAnalysisException](noPw.listTables()).getMessage.contains("environment variable"))
  }
}
