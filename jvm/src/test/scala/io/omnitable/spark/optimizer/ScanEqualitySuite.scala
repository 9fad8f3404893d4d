package io.omnitable.spark.optimizer

import io.omnitable.spark.optimizer.OmniTableRelations.Read
import io.omnitable.spark.read.plan.OptimizerMarks
import io.omnitable.spark.source.{OmniTableCatalog, OmniTableTable}
import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.execution.columnar.InMemoryRelation
import org.apache.spark.sql.execution.exchange.ReusedExchangeExec
import org.apache.spark.sql.functions.{col, length, max, sum}

/** Identical reads compare equal, so Spark reuses exchanges between them and finds cached data. */
class ScanEqualitySuite extends OptimizerSuiteBase {

  override protected def sparkConf: Map[String, String] = super.sparkConf ++ Map(
    "spark.sql.catalog.omnitable" -> classOf[OmniTableCatalog].getName,
    "spark.sql.catalog.omnitable.warehouse" -> optManifest.get("warehouse").asText())

  private def table(df: DataFrame): OmniTableTable =
    df.queryExecution.analyzed.collectFirst { case Read(_, t) => t }.get

  private def cached(df: DataFrame): Boolean =
    df.queryExecution.withCachedData.exists(_.isInstanceOf[InMemoryRelation])

  test("tables, scans and batches of identical reads are equal; other snapshots, marks or filters are not") {
    val (a, b) = (table(opt()), table(opt()))
    assert(a == b && a.hashCode == b.hashCode)
    assert(table(opt("versionAsOf" -> optManifest.get("v1").asText())) != a)
    assert(a.withMarks(OptimizerMarks(fusedReads = 2)) != a)
    assert(a.withMarks(OptimizerMarks(fusedReads = 2)) == b.withMarks(OptimizerMarks(fusedReads = 2)))
    def late = opt().where("k < 1").select("k", "text")
    val (sa, sb) = (scans(late).head, scans(late).head)
    assert(sa.optimizer.exists(_.contains("LateMaterializeFilteredColumns: on")))
    assert(sa == sb && sa.hashCode == sb.hashCode)
    assert(sa.toBatch == sb.toBatch && sa.toBatch.hashCode == sb.toBatch.hashCode)
    val other = scans(opt().where("k < 2").select("k", "text")).head
    assert(other != sa && other.toBatch != sa.toBatch)
    val plain = withConf("spark.omnitable.optimizer.late_materialization" -> "false")(scans(late).head)
    assert(plain != sa && plain.toBatch != sa.toBatch)
  }

  test("Spark reuses the exchange of two identical scans (with and without optimizer marks)") {
    def selfJoin(base: DataFrame): DataFrame = {
      val agg = base.groupBy("k").agg(sum("x").as("sx"), max(length(col("text"))).as("len"))
      agg.join(agg.select(col("k"), col("sx").as("sx2"), col("len").as("len2")), "k")
    }
    assert(explain(selfJoin(opt().where("k < 1"))).contains("LateMaterializeFilteredColumns: on"))
    Seq(opt(), opt().where("k < 1")).foreach { base =>
      val df = selfJoin(base)
      val plan = df.queryExecution.executedPlan
      assert(plan.collect { case r: ReusedExchangeExec => r }.size == 1, plan.treeString)
      assert(df.count() == base.select("k").distinct().count())
    }
  }

  test("CACHE TABLE omnitable.opt is used by later reads of the same snapshot, not by other versions") {
    spark.sql("CACHE TABLE omnitable.opt")
    try {
      val later = spark.table("omnitable.opt").where("k < 5").select("x")
      assert(cached(later), later.queryExecution.withCachedData.treeString)
      assert(cached(spark.sql("SELECT count(*) FROM omnitable.opt")))
      assert(later.count() == opt().where("k < 5").count())
      val v1 = optManifest.get("v1").asText()
      assert(!cached(spark.sql(s"SELECT * FROM omnitable.opt VERSION AS OF $v1")))
    } finally spark.sql("UNCACHE TABLE omnitable.opt")
    val df = opt().select("k", "s")
    df.cache()
    try assert(cached(opt().select("k", "s").where("k > 3")))
    finally df.unpersist()
  }
}
