package io.omnitable.spark.read.exec

import scala.jdk.CollectionConverters._

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import org.apache.spark.SparkException
import org.apache.spark.sql.{AnalysisException, DataFrame}
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec
import org.scalatest.funsuite.AnyFunSuite

/** Reads of column files that cannot be opened or decoded: fail by default, skip on request. */
class CorruptInputSuite extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map("spark.sql.adaptive.enabled" -> "false")

  private lazy val dirty = TestWarehouses.manifest.get("dirty")
  private def id(kind: String): String = dirty.get(kind).asText()
  private lazy val allFragments = dirty.get("fragments").elements().asScala.map(_.asText()).toSeq
  private lazy val clean = dirty.get("clean").elements().asScala.map(_.asText()).toSeq

  private def read(fragments: Seq[String], options: (String, String)*): DataFrame =
    options.foldLeft(spark.read.format("omnitable").option("warehouse", dirty.get("warehouse").asText())
      .option("fragments", fragments.mkString(",")).option("corrupt_retries", "1")) { case (r, (k, v)) =>
      r.option(k, v)
    }.load("dirty")

  private def failure(df: DataFrame): String = {
    val e = intercept[SparkException](df.collect())
    Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).map(_.getMessage).mkString("\n")
  }

  private val kinds = Seq(
    "footer" -> "OMNITABLE_FILE_READ",
    "truncated" -> "OMNITABLE_FILE_READ",
    "row_count" -> "OMNITABLE_MISALIGNED_FILE",
    "first_row_group" -> "OMNITABLE_CORRUPT_FILE",
    "later_row_group" -> "OMNITABLE_CORRUPT_FILE"
  )

  test("every kind of corruption fails a read by default, naming fragment, file and what to do") {
    kinds.foreach { case (kind, cls) =>
      val msg = failure(read(Seq(id(kind))).select("x", "text"))
      assert(msg.contains(s"[$cls] Cannot read fragment ${id(kind)} (2 attempt(s)"), s"$kind: $msg")
      assert(msg.contains("/wide-") && msg.contains(".parquet"), s"$kind names the file: $msg")
      assert(msg.contains("on_corrupt=skip_fragment"), s"$kind: $msg")
    }
    assert(failure(read(Seq(id("row_count"))).select("text")).contains("it holds 999 rows but its fragment has 1000"))
    assert(failure(read(Seq(id("later_row_group"))).select("text")).contains("row group 2"))
  }

  test("skip_fragment returns no row of a fragment whose files cannot be read, and counts it") {
    val corrupt = Seq("footer", "truncated", "row_count", "first_row_group").map(id)
    val df = read(clean ++ corrupt, "on_corrupt" -> "skip_fragment").select("x", "text")
    val rows = df.collect()
    val expected = read(clean).select("x").collect().map(_.getLong(0)).sorted.toSeq
    assert(rows.map(_.getLong(0)).sorted.toSeq == expected)
    assert(rows.length == 2 * dirty.get("rows_per_fragment").asInt())
    val exec = df.queryExecution.executedPlan.collectFirst { case b: BatchScanExec => b }.get
    assert(exec.metrics(ReadMetrics.CorruptFragments).value == 4)
    assert(exec.metrics(ReadMetrics.FragmentsRead).value == 2)
  }

  test("skip_fragment leaves fragments alone when only intact files are read") {
    val corrupt = Seq("footer", "truncated", "row_count", "first_row_group", "later_row_group").map(id)
    assert(read(corrupt, "on_corrupt" -> "skip_fragment").select("x").count() == 5000)
    assert(read(corrupt).select("x").count() == 5000)
  }

  test("skip_fragment cannot skip corruption found after a fragment's first rows were returned") {
    val msg = failure(read(Seq(id("later_row_group")), "on_corrupt" -> "skip_fragment").select("text"))
    assert(msg.contains("rows of the fragment were already returned"), msg)
    assert(msg.contains("row group 2"), msg)
  }

  test("on_corrupt and corrupt_retries are session settings too, and are validated") {
    spark.conf.set("spark.omnitable.read.on_corrupt", "skip_fragment")
    try assert(read(allFragments.filterNot(_ == id("later_row_group"))).select("text").collect().length == 2000)
    finally spark.conf.unset("spark.omnitable.read.on_corrupt")
    val bad = intercept[AnalysisException](read(clean, "on_corrupt" -> "ignore").collect())
    assert(bad.getMessage.contains("Cannot use option on_corrupt='ignore': expected one of fail, skip_fragment"))
    val retries = intercept[AnalysisException](read(clean, "corrupt_retries" -> "-1").collect())
    assert(retries.getMessage.contains("expected an integer in 0..100"))
  }

  test("skip_fragment reads each fragment in one partition (skipping is whole-fragment)") {
    val split = read(clean, "max_rows_per_partition" -> "300").select("text")
    val whole = read(clean, "max_rows_per_partition" -> "300", "on_corrupt" -> "skip_fragment").select("text")
    assert(split.rdd.getNumPartitions == 8)
    assert(whole.rdd.getNumPartitions == 2)
  }

  test("with late materialization, corruption in the filter's columns is skippable anywhere in the fragment") {
    spark.conf.set("spark.omnitable.optimizer.late_materialization_max_selectivity", "1.0")
    try {
      val frags = clean ++ Seq("footer", "first_row_group", "later_row_group").map(id)
      val df = read(frags, "on_corrupt" -> "skip_fragment").where("text LIKE '%1 z%'").select("x", "text")
      assert(df.queryExecution.explainString(org.apache.spark.sql.execution.SimpleMode)
        .contains("LateMaterializeFilteredColumns: on"))
      val expected = read(clean).where("text LIKE '%1 z%'").select("x", "text").collect().map(_.getLong(0)).sorted
      assert(df.collect().map(_.getLong(0)).sorted.toSeq == expected.toSeq)
      val exec = df.queryExecution.executedPlan.collectFirst { case b: BatchScanExec => b }.get
      assert(exec.metrics(ReadMetrics.CorruptFragments).value == 3)
    } finally spark.conf.unset("spark.omnitable.optimizer.late_materialization_max_selectivity")
  }
}
