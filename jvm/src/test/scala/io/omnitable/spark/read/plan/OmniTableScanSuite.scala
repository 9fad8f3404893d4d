package io.omnitable.spark.read.plan

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.assertSameRows
import io.omnitable.spark.read.exec.ReadMetrics
import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec
import org.apache.spark.sql.functions.{count, sum}
import org.scalatest.funsuite.AnyFunSuite

class OmniTableScanSuite extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map("spark.sql.adaptive.enabled" -> "false")

  private def pruning(options: (String, String)*): DataFrame = {
    val r = spark.read.format("omnitable").option("warehouse", TestWarehouses.warehouse)
    options.foldLeft(r) { case (acc, (k, v)) => acc.option(k, v) }.load("pruning")
  }
  private val noPruning = Seq("stats_pruning" -> "false", "row_group_filtering" -> "false")

  private def scanOf(df: DataFrame): (OmniTableScan, BatchScanExec) = {
    val exec = df.queryExecution.executedPlan.collectFirst { case b: BatchScanExec => b }.get
    (exec.scan.asInstanceOf[OmniTableScan], exec)
  }

  private def metric(df: DataFrame, name: String): Long = {
    df.collect()
    scanOf(df)._2.metrics(name).value
  }

  private val predicates = Seq(
    "score < 10",
    "score >= 150.5",
    "score = 42.0",
    "score BETWEEN 20 AND 30.5",
    "NOT (score > 5)",
    "score IN (1.0, 77.7, 180.0)",
    "score IS NULL",
    "k > 990",
    "name LIKE 'p2-%'",
    "name >= 'p3'",
    "_ai_append_name_ = 'p2'",
    "_ai_append_name_ IN ('p1', 'p4') AND score > 180",
    "score > 100 OR k < 3",
    "_ai_unique_id_ < 1500",
    "NOT (_ai_append_name_ <> 'p3')",
    "score <=> 33.0",
    "payload LIKE '%9'"
  )

  test("pruned reads equal unpruned reads for every predicate") {
    predicates.foreach { p =>
      val pruned = pruning().where(p).select("_ai_unique_id_", "score", "k", "name")
      val full = pruning(noPruning: _*).where(p).select("_ai_unique_id_", "score", "k", "name")
      assertSameRows(pruned, full)
    }
  }

  test("pruned reads equal unpruned reads on every statistics type") {
    def types(options: (String, String)*): DataFrame = options.foldLeft(
      spark.read.format("omnitable").option("warehouse", TestWarehouses.warehouse)) { case (r, (k, v)) =>
      r.option(k, v)
    }
      .load("types")
    val full = types(noPruning: _*)
    val pruned = types("batch_size" -> "64")
    val cols = Seq("i8", "i16", "i32", "i64", "f32", "f64", "flag", "name", "day", "ts", "ts_ntz", "amount")
    val sample = full.where("_ai_unique_id_ = 2222").collect().head
    val predicates = cols.flatMap { c =>
      Option(sample.getAs[Any](c)).toSeq.flatMap { v =>
        val lit = s"CAST('$v' AS ${full.schema(c).dataType.sql})"
        Seq(s"$c = $lit", s"NOT ($c > $lit)")
      } :+ s"$c IS NULL"
    } ++ Seq("name LIKE 'name-4%'", "f64 > 'NaN'", "f32 <= 0.0", "f64 = -0.0", "amount IN (1.5, -3.25)")
    def digest(df: DataFrame) = df.agg(count("*"), sum("_ai_unique_id_")).head()
    val reference = full.select("_ai_unique_id_", cols: _*).cache() // the unpruned rows, read once
    try predicates.foreach(p => assert(digest(pruned.where(p)) == digest(reference.where(p)), p))
    finally reference.unpersist()
    assert(full.where("i64 = CAST('" + sample.getAs[Any]("i64") + "' AS BIGINT)").count() == 1)
    assert(scanOf(pruned.where("i64 IS NULL").select("i64"))._1.plan.counts.byStats == 7, "no i64 is NULL")
  }

  test("a fragment no file of which carries a column is pruned for comparisons, kept for IS NULL") {
    val refs = spark.read.format("omnitable").option("warehouse", TestWarehouses.warehouse).load("refs")
    val gt = refs.where("y > 1.0").select("x", "y")
    assert(scanOf(gt)._1.plan.counts.byStats == 1, scanOf(gt)._1.description()) // batch r3 has no y file
    assert(gt.count() == 199)
    val isNull = refs.where("y IS NULL").select("x")
    assert(scanOf(isNull)._1.plan.counts.byStats == 2, scanOf(isNull)._1.description()) // r1, r2: no NULL y
    assert(isNull.count() == 30)
  }

  test("statistics prune fragments and EXPLAIN says so") {
    val df = pruning().where("score < 10").select("score")
    val (scan, _) = scanOf(df)
    assert(scan.plan.counts.total == 21 || scan.plan.counts.total == 20)
    assert(scan.plan.counts.kept == 1, scan.description())
    assert(scan.plan.counts.byStats == scan.plan.counts.total - 1)
    val explain = df.queryExecution.explainString(org.apache.spark.sql.execution.SimpleMode)
    assert(explain.contains("OmniTable pruning @ branch main"))
    assert(explain.contains("fragments=1/20 (pruned: stats 19)"), explain)
    assert(explain.contains("groups=[hot]"), explain)
    assert(explain.contains("pushed=[") && explain.contains("score < 10"), explain)
    assert(df.count() == 1000)
  }

  test("predicates on the batch name prune exactly and Spark does not re-evaluate them") {
    val df = pruning().where("_ai_append_name_ = 'p3'").select("name")
    val (scan, _) = scanOf(df)
    assert(scan.plan.counts.kept == 5 && scan.plan.counts.byPredicate == 15)
    val filters = df.queryExecution.executedPlan.collect { case f: org.apache.spark.sql.execution.FilterExec => f }
    assert(filters.isEmpty, "an exact predicate needs no Filter after the scan")
    assert(df.count() == 5000)
  }

  test("only the groups holding requested columns are opened") {
    val (scan, _) = scanOf(pruning().select("k"))
    assert(scan.plan.groups == Seq("hot"))
    assert(scan.plan.files.forall(_.contains("/hot-")))
    val (scan2, _) = scanOf(pruning().select("payload", "_ai_unique_id_"))
    assert(scan2.plan.groups == Seq("base", "wide"))
    val (scan3, _) = scanOf(pruning().select("_ai_append_name_"))
    assert(scan3.plan.files.isEmpty, "the batch name needs no file")
    assert(pruning().select("_ai_append_name_").distinct().count() == 4)
    assert(pruning().count() == 20000)
  }

  test("row groups ruled out by Parquet statistics are skipped in every file") {
    // score = id / 100 is sorted; fragment 10000..10999 has row groups of 250 rows: rows
    // 10100..10299 lie in the first two, so the last two are skipped (in hot and wide files alike)
    val df = pruning().where("score >= 101.0 AND score < 103.0").select("_ai_unique_id_", "payload")
    assert(metric(df, ReadMetrics.RowGroupsSkipped) == 2)
    assert(df.count() == 200)
    val off = pruning("row_group_filtering" -> "false").where("score >= 101.0 AND score < 103.0").select("payload")
    assert(metric(off, ReadMetrics.RowGroupsSkipped) == 0)
    assert(metric(df, ReadMetrics.BytesRead) < metric(off, ReadMetrics.BytesRead))
    assertSameRows(
      df,
      pruning(noPruning: _*).where("score >= 101.0 AND score < 103.0").select("_ai_unique_id_", "payload"))
  }

  test("a pushed limit reads only the fragments it needs") {
    val df = pruning().select("name").limit(1500)
    val (scan, _) = scanOf(df)
    assert(scan.plan.counts.kept == 2, scan.description())
    assert(scan.description().contains("limit=1500"))
    assert(df.collect().length == 1500)
  }

  test("declined predicates stay with Spark and are listed in EXPLAIN") {
    val df = pruning().where("length(payload) > 10000").select("name")
    val (scan, _) = scanOf(df)
    assert(scan.description().contains("declined=["), scan.description())
    assert(df.count() == 0)
  }

  test("the fragments option reads only those fragments; split_fragments=false keeps each whole and in order") {
    val ids =
      pruning().where("_ai_append_name_ = 'p2'").select("_ai_fragment_").distinct().collect().map(_.getString(0))
    val picked = ids.sorted.take(2)
    val df =
      pruning("fragments" -> picked.mkString(","), "split_fragments" -> "false", "max_rows_per_partition" -> "300")
        .select("_ai_fragment_", "_ai_row_offset_", "name")
    val (scan, _) = scanOf(df)
    assert(scan.plan.counts.kept == 2 && scan.plan.counts.byFragmentOption == 18 && scan.plan.partitions.size == 2)
    val perPartition = df.rdd.glom().collect().filter(_.nonEmpty)
    assert(perPartition.length == 2)
    perPartition.foreach { rows =>
      assert(rows.map(_.getString(0)).distinct.length == 1, "one fragment per partition")
      assert(rows.map(_.getLong(1)).toSeq == (0L until 1000L), "rows in fragment order")
    }
    val split = pruning("fragments" -> picked.mkString(","), "max_rows_per_partition" -> "300").select("name")
    assert(scanOf(split)._1.plan.partitions.size == 8)
    val e = intercept[org.apache.spark.sql.AnalysisException](pruning("fragments" -> "0000").select("name").collect())
    assert(e.getMessage.contains("Cannot read fragments 0000 of table 'pruning'"))
  }

  test("split fragments are read in row-group-aligned ranges: each row group by one partition") {
    val ids = pruning().where("_ai_append_name_ = 'p3'").select("_ai_fragment_").distinct().collect()
      .map(_.getString(0)).sorted.take(2)
    def read(max: String) = pruning("fragments" -> ids.mkString(","), "max_rows_per_partition" -> max)
      .select("_ai_fragment_", "_ai_row_offset_", "name", "score", "payload")
    val split = read("400") // 1000-row fragments of 250-row groups, cut at rows 333 and 666
    assert(scanOf(split)._1.plan.partitions.size == 6)
    assertSameRows(split, read("100000"))
    val sizes = split.rdd.glom().collect().map(_.length).toSeq
    assert(sizes.sorted == Seq(250, 250, 250, 250, 500, 500), "ranges moved to row-group starts")
    // 2 fragments x 3 files (base, hot, wide) x 4 row groups, each read once (unaligned: 36)
    assert(metric(split, ReadMetrics.RowGroupsRead) == 24)
  }

  /** Settings under which every fragment is its own partition (the oracle of packed reads). */
  private val onePerPartition =
    Seq("spark.sql.files.maxPartitionBytes" -> "1", "spark.sql.files.openCostInBytes" -> "0")
  private val packAll = Seq("spark.sql.files.maxPartitionBytes" -> "1g", "spark.sql.files.minPartitionNum" -> "3")

  /** Fragments per partition of `df`'s scan, and its rows partition by partition (as collected). */
  private def partitioned(df: => DataFrame, conf: Seq[(String, String)]): (Seq[Int], Seq[Seq[Row]]) =
    withConf(conf: _*) {
      val d = df
      (scanOf(d)._1.plan.partitions.map(_.fragments.length), d.rdd.glom().collect().map(_.toSeq).toSeq)
    }

  test("small fragments are packed into fewer partitions, read one after another in table order") {
    def df = pruning().select("_ai_fragment_", "_ai_append_name_", "_ai_row_offset_", "name", "score")
    val (lone, loneRows) = partitioned(df, onePerPartition)
    val (packed, packedRows) = partitioned(df, packAll)
    assert(lone == Seq.fill(20)(1))
    assert(packed.sum == 20 && packed.size >= 3 && packed.size < 20, packed)
    assert(packedRows.flatten == loneRows.flatten, "the same rows in the same order")
    // each packed partition holds whole fragments, one after another, each in fragment order
    var next = 0
    packed.zip(packedRows).foreach { case (n, rows) =>
      assert(rows == loneRows.slice(next, next + n).flatten)
      next += n
    }
    assert(withConf(packAll: _*)(scanOf(df)._1.description()).contains(s"partitions=${packed.size},"))
    // metrics are summed over the fragments of each partition
    def fragmentsRead = metric(df, ReadMetrics.FragmentsRead)
    assert(withConf(packAll: _*)(fragmentsRead) == 20 && withConf(onePerPartition: _*)(fragmentsRead) == 20)
  }

  test("a limit, filters and row-group pruning over packed partitions give the rows of unpacked reads") {
    def filtered = pruning().where("score < 40 OR k > 990").select("_ai_fragment_", "_ai_row_offset_", "name", "k")
    assert(partitioned(filtered, packAll)._2.flatten == partitioned(filtered, onePerPartition)._2.flatten)
    def limited = pruning().select("name").limit(1500)
    withConf(packAll: _*)(assert(limited.collect().length == 1500))
  }

  test("fragment ids and row offsets address rows") {
    val rows = pruning().where("_ai_append_name_ = 'p1'")
      .select("_ai_fragment_", "_ai_row_offset_", "_ai_unique_id_").collect()
    assert(rows.length == 5000)
    assert(rows.map(_.getString(0)).distinct.length == 5)
    assert(rows.groupBy(_.getString(0)).values.forall(g => g.map(_.getLong(1)).sorted.toSeq == (0L until 1000L)))
    val one = rows.head.getString(0)
    val df = pruning().where(s"_ai_fragment_ = '$one'").select("_ai_row_offset_")
    assert(scanOf(df)._1.plan.counts.kept == 1)
    assert(df.count() == 1000)
  }
}
