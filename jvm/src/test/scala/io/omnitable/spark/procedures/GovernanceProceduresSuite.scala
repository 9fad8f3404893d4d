package io.omnitable.spark.procedures

import java.io.File
import java.nio.file.Files
import java.sql.DriverManager

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.source.OmniTableCatalog
import org.apache.spark.sql.Row
import org.scalatest.funsuite.AnyFunSuite

/**
 * The governance procedures (`compact`, `fold`, `expire_versions`, `remove_orphan_files`,
 * `maintain`; [[GovernanceProcedures]]) bind arguments by position and by name, refuse bad ones
 * with `OMNITABLE_*` errors that say what to give, and fail clearly when the Python engine is
 * missing; a refused call changes nothing. On a scratch copy of the SQLite test warehouse (its
 * catalog only: every call here is a dry run or refused). What the jobs do:
 * tests/spark/test_procedures_governance.py.
 */
class GovernanceProceduresSuite extends AnyFunSuite with SharedSparkSession {

  private lazy val copy: File = TestWarehouses.copyOfWarehouse()

  override protected def sparkConf: Map[String, String] = Map(
    "spark.sql.catalog.omt" -> classOf[OmniTableCatalog].getName,
    "spark.sql.catalog.omt.warehouse" -> copy.getPath,
    "spark.omnitable.python" -> TestWarehouses.python
  )

  private def commits(): Long = {
    val conn = DriverManager.getConnection(s"jdbc:sqlite:${copy.getPath}/catalog.db")
    try {
      val rs = conn.createStatement().executeQuery("SELECT COUNT(*) FROM commits")
      rs.next(); rs.getLong(1)
    } finally conn.close()
  }

  private def rows(sql: String): Seq[Row] = spark.sql(sql).collect().toSeq

  /** Asserts `sql` fails with a message containing every one of `parts`, and that nothing was committed. */
  private def refused(sql: String, parts: String*): Unit = {
    val before = commits()
    val e = intercept[Exception](spark.sql(sql).collect())
    parts.foreach(p => assert(e.getMessage.contains(p), s"'$p' not in: ${e.getMessage}"))
    assert(commits() == before, s"$sql committed")
  }

  test("dry runs bind by position and by name and return one row per job") {
    val before = commits()
    val Seq(c) = rows("CALL omt.system.compact('refs', 2, 100, NULL, 'main', true)")
    assert(c.getAs[String]("job") == "compact" && c.getAs[String]("status") == "dry_run")
    assert(c.getAs[String]("branch") == "main" && c.isNullAt(c.fieldIndex("version")))
    assert(c.getMap[String, String](c.fieldIndex("summary")).get("target_fragment_rows").contains("100"))
    val named = rows("CALL omt.system.maintain(dry_run => true, table => 'refs', jobs => 'compact, fold', " +
      "options => '{\"fold\": {\"min_overlay_files\": 3}}')")
    assert(named.map(_.getAs[String]("job")) == Seq("compact", "fold") &&
      named.forall(_.getAs[String]("status") == "dry_run"))
    val Seq(e) = rows("CALL omt.system.expire_versions('refs', '7 days', dry_run => true)")
    assert(e.getAs[String]("job") == "expire")
    val Seq(o) = rows("CALL omt.system.remove_orphan_files(table => 'refs', older_than => '1 hour', dry_run => true)")
    assert(o.getAs[String]("job") == "orphans")
    assert(commits() == before)
    val names = spark.sql("SHOW PROCEDURES IN omt.system").collect().map(r => r.getString(r.length - 1)).toSet
    assert(GovernanceProcedures.Jobs.map(_.procedure).toSet + "maintain" subsetOf names)
  }

  test("bad arguments are refused before anything runs") {
    val bad = "OMNITABLE_INVALID_PROCEDURE_ARGUMENT"
    refused("CALL omt.system.expire_versions('refs', '-1')", bad, "'older_than' is '-1'", "at least 0")
    refused("CALL omt.system.expire_versions('refs', 'soon')", bad, "an interval such as '7 days'")
    refused("CALL omt.system.expire_versions('refs', retain_last => 0)", bad, "'retain_last' is 0")
    refused("CALL omt.system.expire_versions('refs')", bad, "give older_than and/or retain_last")
    refused("CALL omt.system.remove_orphan_files('refs', '-2 days')", bad, "'older_than'")
    refused("CALL omt.system.compact('refs', min_fragments => 1)", bad, "min_fragments must be at least 2")
    refused("CALL omt.system.compact('refs', batches => array(1, 2))", bad, "'batches' is an array of INT")
    refused("CALL omt.system.fold('refs', min_deleted_fraction => 1.5)", bad, "min_deleted_fraction must be in (0, 1]")
    refused("CALL omt.system.maintain('refs', options => 'nope')", bad, "'options' is not JSON")
    refused("CALL omt.system.maintain('refs', options => '[1]')", bad, "'options' is not a JSON object")
    refused("CALL omt.system.maintain('refs', options => '{\"compact\": {\"bogus\": 1}}')", bad, "bogus")
    refused(
      "CALL omt.system.maintain('refs', options => '{\"fold\": {}}')",
      bad,
      "Options given for job(s) not run: fold")
    refused("CALL omt.system.maintain('refs', array('compact', 'shrink'))", bad, "Unknown maintenance job 'shrink'")
    // a NULL element of an array argument (named ARRAY<STRING>, positional ARRAY<VOID>): named, nothing run
    refused(
      "CALL omt.system.compact('refs', batches => array('b0', NULL))",
      bad,
      "procedure system.compact: argument 'batches' has a NULL element at position 2 of 2 (array('b0', NULL))",
      "drop the NULL"
    )
    refused("CALL omt.system.maintain('refs', array(NULL))", bad, "'jobs' has a NULL element at position 1 of 1")
    refused("CALL omt.system.maintain('refs', dry_run => NULL)", bad, "'dry_run' is NULL")
    refused("CALL omt.system.compact('nope')", "OMNITABLE_NOT_FOUND", "Cannot find table 'nope'")
    refused("CALL omt.system.compact('refs', branch => 'nope')", "OMNITABLE_NOT_FOUND", "nope")
    refused("CALL omt.system.compact('refs', min_age => 1)", "min_age") // Spark: no such parameter
  }

  test("a missing Python or omnitable package fails with what to set") {
    val unavailable = "OMNITABLE_PYTHON_ENGINE_UNAVAILABLE"
    withConf("spark.omnitable.python" -> "/nonexistent/python3") {
      refused(
        "CALL omt.system.compact('refs')",
        unavailable,
        "'/nonexistent/python3' cannot be started",
        "spark.omnitable.python")
    }
    val isolated = Files.createTempFile("python-without-omnitable", ".sh").toFile
    Files.writeString(isolated.toPath, s"#!/bin/sh\nexec ${TestWarehouses.python} -I -S \"$$@\"\n")
    isolated.setExecutable(true)
    withConf("spark.omnitable.python" -> isolated.getPath) {
      refused("CALL omt.system.maintain('refs')", unavailable, "has no omnitable package")
    }
    isolated.delete()
  }
}
