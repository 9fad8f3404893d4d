package io.omnitable.spark.metrics

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import org.scalatest.funsuite.AnyFunSuite

class ScanMetricsListenerSuite extends AnyFunSuite with SharedSparkSession {

  private def snapshot(): JsonNode = new ObjectMapper().readTree(ScanMetricsListener.snapshot())

  private def omni(table: String, warehouse: String = TestWarehouses.warehouse) =
    spark.read.format("omnitable").option("warehouse", warehouse).load(table)

  private def tagged[T](tag: String)(body: => T): T = {
    spark.sparkContext.addJobTag(tag)
    try body
    finally spark.sparkContext.removeJobTag(tag)
  }

  test("tasks' input metrics and scan reports, in total and per job tag") {
    ScanMetricsListener.install(spark.sparkContext)
    ScanMetricsListener.install(spark.sparkContext) // idempotent: one listener
    ScanMetricsListener.reset()
    val rows = tagged("omnitable-run1-step0")(omni("pruning").select("score", "payload").collect().length)
    omni("pruning").select("k").collect()
    val s = snapshot()
    val step = s.get("byJobTag").get("omnitable-run1-step0")
    assert(rows == 20000)
    assert(step.get("recordsRead").asLong() == 20000)
    assert(step.get("omnitableScans").asLong() == 1)
    assert(step.get("fragmentsRead").asLong() == 20)
    assert(step.get("filesOpened").asLong() == 40)
    assert(step.get("omnitableTasks").asLong() == step.get("tasks").asLong())
    assert(step.get("bytesRead").asLong() >= step.get("omnitableBytesRead").asLong())
    assert(step.get("omnitableBytesRead").asLong() > 0)
    assert(step.get("memoryBytesSpilled").asLong() == 0) // a scan without a shuffle spills nothing
    assert(step.get("diskBytesSpilled").asLong() == 0)
    val total = s.get("total")
    assert(total.get("recordsRead").asLong() == 40000)
    assert(total.get("omnitableScans").asLong() == 2)
    assert(total.get("fragmentsRead").asLong() == 40)
    assert(total.get("bytesRead").asLong() > step.get("bytesRead").asLong())
    assert(s.get("byJobTag").size() == 1)
    ScanMetricsListener.reset()
    assert(snapshot().get("total").get("tasks").asLong() == 0)
  }

  test("bytes read follow the columns read, and count every read of the same files") {
    ScanMetricsListener.install(spark.sparkContext)
    def totals(reads: Seq[String]*): JsonNode = {
      ScanMetricsListener.reset()
      reads.foreach(cols => omni("pruning").select(cols.head, cols.tail: _*).collect())
      snapshot().get("total")
    }
    val narrow = totals(Seq("k"))
    val wide = totals(Seq("k", "payload"))
    val twice = totals(Seq("k", "payload"), Seq("k", "payload"))
    assert(wide.get("bytesRead").asLong() > narrow.get("bytesRead").asLong())
    assert(wide.get("bytesRead").asLong() >= wide.get("omnitableBytesRead").asLong())
    assert(twice.get("bytesRead").asLong() == 2 * wide.get("bytesRead").asLong())
    assert(twice.get("omnitableBytesRead").asLong() == 2 * wide.get("omnitableBytesRead").asLong())
    assert(twice.get("omnitableScans").asLong() == 2)
  }

  test("skipped corrupt fragments are listed with fragment, file and error") {
    ScanMetricsListener.install(spark.sparkContext)
    ScanMetricsListener.reset()
    val dirty = TestWarehouses.manifest.get("dirty")
    val footer = dirty.get("footer").asText()
    val frags = (dirty.get("clean").elements().asScala.map(_.asText()).toSeq :+ footer).mkString(",")
    val n = tagged("dirty-read")(spark.read.format("omnitable").option("warehouse", dirty.get("warehouse").asText())
      .option("fragments", frags).option("on_corrupt", "skip_fragment").option("corrupt_retries", "0")
      .load("dirty").select("text").collect().length)
    assert(n == 2000)
    val corrupt = snapshot().get("byJobTag").get("dirty-read").get("corruptFragments")
    assert(corrupt.size() == 1)
    val c = corrupt.get(0)
    assert(c.get("table").asText() == "dirty")
    assert(c.get("fragment").asText() == footer)
    assert(c.get("file").asText().contains(s"/$footer/wide-"))
    assert(c.get("error").asText().nonEmpty)
    assert(snapshot().get("total").get("corruptFragments").size() == 1)
  }

  test("omnitable_scan_metrics(): the listener through SQL, with the tasks' SQL metric sums") {
    def sql(query: String): JsonNode =
      new ObjectMapper().readTree(spark.sql(query).collect().head.getString(0))
    sql("SELECT metrics FROM omnitable_scan_metrics('reset')")
    assert(sql("SELECT metrics FROM omnitable_scan_metrics()").get("total").get("tasks").asLong() == 0)
    val rows = tagged("sql-read")(omni("pruning").where("k >= 0").select("k").collect().length)
    val step = sql("SELECT * FROM omnitable_scan_metrics()").get("byJobTag").get("sql-read")
    assert(rows == 20000)
    assert(step.get("recordsRead").asLong() == 20000)
    assert(step.get("sqlMetrics").get("number of output rows").asLong() >= 20000)
    sql("SELECT metrics FROM omnitable_scan_metrics('reset')")
    assert(sql("SELECT metrics FROM omnitable_scan_metrics()").get("byJobTag").size() == 0)
    val bad = intercept[org.apache.spark.sql.AnalysisException](spark.sql("SELECT * FROM omnitable_scan_metrics('x')"))
    assert(bad.getMessage.contains("unknown action 'x'"))
  }
}
