package io.omnitable.spark.metadata

import java.time.Instant

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.catalog.RunRow
import io.omnitable.spark.source.OmniTableCatalog
import org.apache.spark.sql.AnalysisException
import org.scalatest.funsuite.AnyFunSuite

/**
 * Resolution and schemas of the metadata tables (`omnitable.<table>.<name>`) on the Python-built
 * test warehouse; tests/spark/test_metadata_tables.py checks their rows against the Python API.
 */
class MetadataTablesSuite extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map(
    "spark.sql.catalog.omnitable" -> classOf[OmniTableCatalog].getName,
    "spark.sql.catalog.omnitable.warehouse" -> TestWarehouses.warehouse)

  private def v(key: String) = TestWarehouses.version("refs", key)

  private def longs(sql: String): Seq[Long] = spark.sql(sql).collect().map(_.getLong(0)).toSeq

  test("every metadata table resolves with its documented schema") {
    assert(MetadataTables.Names == Seq(
      "history",
      "batches",
      "fragments",
      "files",
      "features",
      "lineage",
      "status",
      "errors",
      "runs",
      "refs"))
    MetadataTables.Schemas.foreach { case (name, schema) =>
      assert(spark.table(s"omnitable.refs.$name").schema == schema, name)
      assert(spark.catalog.tableExists(s"omnitable.refs.$name"), name)
    }
    assert(!spark.catalog.tableExists("omnitable.nope.history"))
  }

  test("history lists the commits of the snapshot's history, newest first") {
    val head = longs("SELECT version FROM omnitable.refs.history")
    assert(head == head.sorted.reverse && head.contains(v("v1")) && head.contains(v("v3")))
    assert(longs(s"SELECT version FROM omnitable.refs.history VERSION AS OF ${v("v1")}") == head.filter(_ <= v("v1")))
    val dev = spark.sql("SELECT version, branch FROM omnitable.refs.history VERSION AS OF 'dev'").collect()
    assert(dev.exists(_.getString(1) == "dev") && dev.exists(_.getString(1) == "main"))
    assert(!head.exists(dev.filter(_.getString(1) == "dev").map(_.getLong(0)).contains), "dev's commits are not main's")
  }

  test("TIMESTAMP AS OF picks the snapshot of a metadata table too") {
    val head = longs("SELECT version FROM omnitable.refs.history")
    assert(longs("SELECT version FROM omnitable.refs.history TIMESTAMP AS OF '2999-01-01 00:00:00'") == head)
    val e = intercept[AnalysisException](
      spark.sql("SELECT * FROM omnitable.refs.history TIMESTAMP AS OF '2000-01-01'").collect())
    assert(e.getMessage.contains("has no version committed at or before"))
  }

  test("batches, fragments and files add up to the table's rows at each snapshot") {
    for (snapshot <- Seq("", s"VERSION AS OF ${v("v1")}", "VERSION AS OF 't1'", "VERSION AS OF 'dev'")) {
      val rows = longs(s"SELECT count(*) FROM omnitable.refs $snapshot").head
      assert(longs(s"SELECT sum(rows) FROM omnitable.refs.batches $snapshot").head == rows, snapshot)
      assert(longs(s"SELECT sum(live_rows) FROM omnitable.refs.fragments $snapshot").head == rows, snapshot)
      val fragments = longs(s"SELECT count(*) FROM omnitable.refs.fragments $snapshot").head
      val withFiles = longs(s"SELECT count(DISTINCT fragment_id) FROM omnitable.refs.files $snapshot").head
      assert(withFiles == fragments, snapshot)
    }
  }

  test("refs lists branches then tags; runs, features, lineage and status read without Delta") {
    val refs =
      spark.sql("SELECT name, kind FROM omnitable.refs.refs").collect().map(r => r.getString(0) -> r.getString(1))
    assert(refs.toSeq == Seq("dev" -> "branch", "main" -> "branch", "t1" -> "tag"))
    assert(spark.sql("SELECT * FROM omnitable.refs.errors").count() == 0, "no error table: no rows")
    Seq("runs", "features", "lineage", "status").foreach(n => spark.sql(s"SELECT * FROM omnitable.refs.$n").collect())
  }

  test("an unknown name after a table lists the metadata tables") {
    val e = intercept[AnalysisException](spark.sql("SELECT * FROM omnitable.refs.snapshots").collect())
    assert(e.getCondition == "TABLE_OR_VIEW_NOT_FOUND")
    assert(e.getMessage.contains("Cannot find table 'refs.snapshots' in warehouse '"))
    assert(e.getMessage.contains(s"(metadata tables: ${MetadataTables.Names.mkString(", ")})"))
    assert(intercept[AnalysisException](spark.sql("SELECT * FROM omnitable.nope.history").collect())
      .getMessage.contains("Cannot find table 'nope'"))
    assert(intercept[AnalysisException](spark.sql("SELECT * FROM omnitable.refs.history VERSION AS OF 42").collect())
      .getMessage.contains("Cannot read version 42"))
  }

  test("a batch's state follows its live fragments' states") {
    assert(StatusGrid.batchState(Nil) == "done")
    assert(StatusGrid.batchState(Seq("done", "done")) == "done")
    assert(StatusGrid.batchState(Seq("missing", "missing")) == "missing")
    assert(StatusGrid.batchState(Seq("stale", "stale")) == "stale")
    assert(StatusGrid.batchState(Seq("done", "stale")) == "partial")
    assert(StatusGrid.batchState(Seq("missing", "stale")) == "partial")
  }

  test("a running run without a recent heartbeat is abandoned") {
    val now = Instant.parse("2026-12-01T12:00:00Z")
    def run(status: String, beat: String) =
      RunRow(
        "r",
        "backfill",
        status,
        None,
        None,
        None,
        "2026-12-01T11:00:00.000000Z",
        None,
        Some("elsewhere"),
        Some(1L),
        Some(beat))
    assert(MetadataRows.runStatus(run("running", "2026-12-01T11:59:00.000000Z"), now) == "running")
    assert(MetadataRows.runStatus(run("running", "2026-12-01T11:54:00.000000Z"), now) == "abandoned")
    assert(MetadataRows.runStatus(run("succeeded", "2026-12-01T11:00:00.000000Z"), now) == "succeeded")
  }
}
