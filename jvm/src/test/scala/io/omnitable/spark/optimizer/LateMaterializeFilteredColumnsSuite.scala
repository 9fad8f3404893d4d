package io.omnitable.spark.optimizer

import io.omnitable.spark.read.exec.ReadMetrics
import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec
import org.apache.spark.sql.functions.{col, rand}

class LateMaterializeFilteredColumnsSuite extends OptimizerSuiteBase {

  private val Key = "spark.omnitable.optimizer.late_materialization"
  private val MaxSel = "spark.omnitable.optimizer.late_materialization_max_selectivity"

  private def paged: DataFrame =
    spark.read.format("omnitable").option("warehouse", optManifest.get("warehouse").asText()).load("paged")

  private def scanExec(df: DataFrame): BatchScanExec =
    df.queryExecution.executedPlan.collectFirst { case b: BatchScanExec => b }.get

  /** (rows the scan returned, compressed bytes it read), after running `df`. */
  private def scanned(df: DataFrame): (Long, Long) = {
    df.collect()
    val m = scanExec(df).metrics
    (m("numOutputRows").value, m(ReadMetrics.BytesRead).value)
  }

  test("a selective filter reads its columns first and the rest only for the rows that pass") {
    def q = opt().where("k < 1").select("_ai_unique_id_", "text", "late", "k", "_ai_row_offset_", "_ai_fragment_")
    assert(explain(q).contains("LateMaterializeFilteredColumns: on (reads k first; estimated selectivity"))
    val (rowsOn, _) = scanned(q)
    assert(rowsOn == q.count())
    withConf(Key -> "false") {
      assert(!explain(q).contains("LateMaterializeFilteredColumns"))
      assert(scanned(q)._1 > 10 * rowsOn)
    }
    assertSameWithRule(Key)(q)
  }

  test("late materialization over packed partitions returns the rows of one partition per fragment") {
    def q = opt().where("k < 3").select("_ai_fragment_", "_ai_row_offset_", "text", "late", "k")
    def run(conf: (String, String)*): (Int, Seq[org.apache.spark.sql.Row]) = withConf(conf: _*) {
      assert(explain(q).contains("LateMaterializeFilteredColumns: on"))
      (scans(q).head.plan.partitions.size, q.collect().toSeq)
    }
    val (packed, packedRows) =
      run("spark.sql.files.maxPartitionBytes" -> "1g", "spark.sql.files.minPartitionNum" -> "1")
    val (lone, loneRows) = run("spark.sql.files.maxPartitionBytes" -> "1", "spark.sql.files.openCostInBytes" -> "0")
    assert(packed == 1 && lone == 8)
    assert(packedRows.nonEmpty && packedRows == loneRows)
  }

  test("only the pages holding rows that pass are read") {
    def q = paged.where("k = 7").select("text")
    val (rowsOn, bytesOn) = scanned(q)
    val (rowsOff, bytesOff) = withConf(Key -> "false")(scanned(q))
    assert(rowsOn == q.count() && rowsOff == 4000)
    assert(bytesOn * 3 < bytesOff, s"late materialization read $bytesOn bytes, a full read $bytesOff")
    assertSameWithRule(Key)(q)
    assertSameWithRule(Key)(paged.where("k < 3 OR k > 97").select(col("text"), col("_ai_row_offset_")))
  }

  test("the scan declines when the filter keeps many rows or nothing wider is read later") {
    assert(explain(opt().where("k < 60").select("text")).contains("off (estimated selectivity"))
    assert(explain(opt().where("k < 2").select("k")).contains("off (no other stored column"))
    assert(explain(opt().where("k < 2").select("k", "x")).contains("off (the other columns (0 B) are not wider"))
    assert(!explain(opt().where("length(text) > 290").select("text")).contains("LateMaterializeFilteredColumns: on"))
    withConf(MaxSel -> "0.9") {
      assert(explain(opt().where("k < 60").select("text")).contains("LateMaterializeFilteredColumns: on"))
    }
  }

  test("never with a non-deterministic filter, nor for conjuncts that could fail or call UDFs") {
    val nd = opt().where(rand(3) < 0.5 && col("k") < 2).select("text")
    assert(!explain(nd).contains("LateMaterialize"))
    spark.udf.register("plus1", (v: Long) => v + 1)
    val udf = opt().where("plus1(k) < 3").select("text")
    assert(!explain(udf).contains("LateMaterialize"))
    val cast = opt().where("CAST(s AS INT) > 3").select("text")
    assert(!explain(cast).contains("LateMaterializeFilteredColumns: on"))
  }

  test("random predicates on random data give the same rows with the rule on and off") {
    val predicates = Seq(
      "k < 2",
      "k = 5",
      "k IN (1, 2, 3)",
      "x IS NULL",
      "x > 250",
      "s LIKE 's1%'",
      "s IS NULL AND k < 10",
      "NOT (k >= 3)",
      "k < 3 OR x > 280",
      "late > 2.0",
      "late IS NULL AND k < 4",
      "_ai_append_name_ = 'o2' AND k < 5",
      "k <=> 9",
      "s LIKE '%7'",
      "x < -200.5 AND s IS NOT NULL"
    )
    withConf(MaxSel -> "1.0") {
      predicates.foreach { p =>
        def q = opt().where(p).select("_ai_unique_id_", "text", "s", "late", "_ai_row_offset_", "_ai_fragment_")
        assertSameWithRule(Key)(q)
        def batched = opt("batch_size" -> "100", "max_rows_per_partition" -> "500").where(p).select("text", "x")
        assertSameWithRule(Key)(batched)
      }
    }
  }
}
