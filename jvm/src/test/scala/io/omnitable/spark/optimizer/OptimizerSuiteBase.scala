package io.omnitable.spark.optimizer

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.assertSameRows
import io.omnitable.spark.read.plan.OmniTableScan
import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec
import org.scalatest.funsuite.AnyFunSuite

/** Shared helpers of the optimizer suites: the random `opt` table, rules on/off, plan probes. */
abstract class OptimizerSuiteBase extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map("spark.sql.adaptive.enabled" -> "false")

  protected lazy val optManifest = TestWarehouses.manifest.get("opt")

  protected def opt(options: (String, String)*): DataFrame =
    options.foldLeft(spark.read.format("omnitable").option("warehouse", optManifest.get("warehouse").asText())) {
      case (r, (k, v)) => r.option(k, v)
    }.load("opt")

  protected def scans(df: DataFrame): Seq[OmniTableScan] =
    df.queryExecution.executedPlan.collect { case b: BatchScanExec => b.scan }.collect { case s: OmniTableScan => s }

  protected def explain(df: DataFrame): String =
    df.queryExecution.explainString(org.apache.spark.sql.execution.SimpleMode)

  /** `query` gives the same rows with the setting `key` on and off. */
  protected def assertSameWithRule(key: String)(query: => DataFrame): Unit = {
    val on = withConf(key -> "true")(query.collect().toSeq)
    val off = withConf(key -> "false")(query)
    assertSameRows(spark.createDataFrame(spark.sparkContext.parallelize(on), off.schema), off)
  }
}
