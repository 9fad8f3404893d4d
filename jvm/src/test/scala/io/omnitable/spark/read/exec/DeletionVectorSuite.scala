package io.omnitable.spark.read.exec

import scala.util.Random

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.canonical
import io.omnitable.spark.catalog.DeletesCatalog
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.read.plan.OmniTableScan
import org.apache.spark.sql.{DataFrame, Row}
import org.apache.spark.sql.execution.datasources.v2.BatchScanExec
import org.apache.spark.sql.functions.col
import org.scalatest.funsuite.AnyFunSuite

/**
 * Deletion vectors written into a copy of the `opt` warehouse's catalog (the Python-written data
 * files unchanged): deleted rows never come back through any read path, time travel before the
 * delete shows them, `_ai_row_offset_` stays the physical offset, fully deleted fragments are
 * not planned, and a damaged vector fails the scan naming it.
 */
class DeletionVectorSuite extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map("spark.sql.adaptive.enabled" -> "false")

  private lazy val source = TestWarehouses.manifest.get("opt").get("warehouse").asText()

  private val MaxSel = "spark.omnitable.optimizer.late_materialization_max_selectivity"

  private def read(wh: DeletesCatalog, table: String, options: (String, String)*): DataFrame =
    options.foldLeft(spark.read.format("omnitable").option("warehouse", wh.dir.getPath)) {
      case (r, (k, v)) => r.option(k, v)
    }.load(table)

  private def scans(df: DataFrame): Seq[OmniTableScan] =
    df.queryExecution.executedPlan.collect { case b: BatchScanExec => b.scan }.collect { case s: OmniTableScan => s }

  private val Columns =
    Seq("_ai_fragment_", "_ai_row_offset_", "_ai_unique_id_", "_ai_append_name_", "k", "x", "s", "text", "late")

  /** The `opt` table with deletes committed at `v1` (see `deletes`) and its head before them, `v0`. */
  private final class Deleted(val wh: DeletesCatalog, val v0: Long, val v1: Long, val deletes: Map[String, Set[Long]])

  /**
   * Deletes in the `opt` fragments: random rows and both ends of the first, a run across row
   * groups of the second, all of the third, every other row of the fourth and a few rows of the
   * last (which has no file of column `late`: NULLs).
   */
  private def deleteSome(): Deleted = {
    val wh = new DeletesCatalog(source)
    val frags = wh.fragments("opt")
    assert(frags.size == 8 && frags.map(_._3) == Seq(1300L, 1300L, 400L, 1700L, 900L, 900L, 300L, 500L))
    val rng = new Random(11)
    val deletes = Map(
      frags(0)._1 -> ((0L until 1300L).filter(_ => rng.nextInt(10) == 0).toSet + 0L + 1299L),
      frags(1)._1 -> (650L until 1050L).toSet,
      frags(2)._1 -> (0L until 400L).toSet,
      frags(3)._1 -> (0L until 1700L by 2).toSet,
      frags(7)._1 -> ((0L until 10L) ++ (490L until 500L)).toSet
    )
    val v0 = wh.head("opt")
    new Deleted(wh, v0, wh.delete("opt", deletes), deletes)
  }

  private lazy val deleted = deleteSome()

  private def key(r: Row): (String, Long) = (r.getAs[String]("_ai_fragment_"), r.getAs[Long]("_ai_row_offset_"))

  /**
   * `query` over the table after the deletes returns the rows it returns before them minus the
   * deleted ones (its output must hold `_ai_fragment_` and `_ai_row_offset_`); returns how many.
   */
  private def assertDeleted(d: Deleted, table: String, options: (String, String)*)(query: DataFrame => DataFrame)
      : Int = {
    val before = query(read(d.wh, table, (options :+ ("versionAsOf" -> d.v0.toString)): _*))
    val after = query(read(d.wh, table, options: _*))
    val kept = before.collect().filterNot { r =>
      val (f, o) = key(r)
      d.deletes.get(f).exists(_.contains(o))
    }
    val expected = spark.createDataFrame(spark.sparkContext.parallelize(kept.toSeq), before.schema)
    val (a, e) = (canonical(after).sorted, canonical(expected).sorted)
    assert(a.size == e.size, s"row counts differ: ${a.size} vs ${e.size}")
    assert(a == e)
    a.size
  }

  test("deleted rows vanish from a full read; offsets stay physical; time travel shows them again") {
    val d = deleted
    val all = read(d.wh, "opt", "versionAsOf" -> d.v0.toString).select(Columns.head, Columns.tail: _*).collect()
    val live = assertDeleted(d, "opt")(_.select(Columns.head, Columns.tail: _*))
    assert(live == all.length - d.deletes.values.map(_.size).sum && live > 0)
    val after = read(d.wh, "opt").select(Columns.head, Columns.tail: _*).collect()
    // every surviving row keeps its physical offset and its values (a row id names one row)
    val byId = all.map(r => r.getAs[Long]("_ai_unique_id_") -> r).toMap
    after.foreach(r => assert(byId(r.getAs[Long]("_ai_unique_id_")) == r))
    assert(!after.exists(r => d.deletes.get(key(r)._1).exists(_.contains(key(r)._2))))
    // the version before the delete reads every row
    assert(read(d.wh, "opt", "versionAsOf" -> d.v0.toString).count() == all.length)
    assert(read(d.wh, "opt").count() == live)
  }

  test("deleted rows vanish with row ranges, packed partitions, one partition per fragment and small batches") {
    val d = deleted
    def q(df: DataFrame) = df.select(Columns.head, Columns.tail: _*)
    assertDeleted(d, "opt", "batch_size" -> "100", "max_rows_per_partition" -> "500")(q)
    assertDeleted(d, "opt", "split_fragments" -> "false")(q)
    assertDeleted(d, "opt", "batch_size" -> "7")(q)
    withConf("spark.sql.files.maxPartitionBytes" -> "1g", "spark.sql.files.minPartitionNum" -> "1") {
      assert(scans(q(read(d.wh, "opt"))).head.plan.partitions.size == 1)
      assertDeleted(d, "opt")(q)
    }
    // metadata columns only: no file is opened
    assertDeleted(d, "opt")(_.select("_ai_fragment_", "_ai_row_offset_", "_ai_append_name_"))
    assertDeleted(d, "opt", "max_rows_per_partition" -> "300")(_.select("_ai_fragment_", "_ai_row_offset_"))
  }

  test("a scan planned on the executors returns a driver plan's rows in its order: deletes, versions, filters, cuts") {
    val d = deleted
    val onExecutors = "executor_planning_min_fragments" -> "0"
    def rows(df: DataFrame) = df.select(Columns.head, Columns.tail: _*).collect().toSeq
    val reads: Seq[(Seq[(String, String)], DataFrame => DataFrame)] = Seq(
      (Nil, identity),
      (Seq("versionAsOf" -> d.v0.toString), identity),
      (Nil, _.where("k < 50 OR x > 10")),
      (Seq("max_rows_per_partition" -> "300"), identity),
      (Seq("batch_size" -> "7"), _.where("_ai_row_offset_ < 700"))
    )
    // late materialization decides from the fragments' statistics: a scan it marks is planned on the driver
    val late = read(d.wh, "opt", onExecutors).where("k < 50 OR x > 10").select(Columns.head, Columns.tail: _*)
    withConf(MaxSel -> "1.0") {
      assert(scans(late).head.description().contains("LateMaterializeFilteredColumns: on"))
      assert(scans(late).head.plan.executor.isEmpty)
    }
    val lateOff = "spark.omnitable.optimizer.late_materialization" -> "false"
    Seq(Map(lateOff), Map(lateOff, "spark.sql.files.maxPartitionBytes" -> "64k")).foreach { conf =>
      withConf(conf.toSeq: _*) {
        reads.foreach { case (options, query) =>
          val planned = query(read(d.wh, "opt", onExecutors +: options: _*))
          val scan = scans(planned).head
          assert(scan.plan.executor.isDefined && scan.description().contains("listed and pruned by the executors"))
          assert(rows(planned) == rows(query(read(d.wh, "opt", options: _*))), s"$conf $options")
        }
      }
    }
    // a small partition size cuts the batches at fragment boundaries
    withConf("spark.sql.files.maxPartitionBytes" -> "64k") {
      val slices = scans(read(d.wh, "opt", onExecutors)).head.plan.executor.get.slices
      assert(slices.exists(_.slice.seqRange.isDefined), slices)
    }
  }

  test("deleted rows vanish through filters, statistics pruning, late materialization and options") {
    val d = deleted
    val frags = d.wh.fragments("opt").map(_._1)
    def cols(df: DataFrame) = df.select(Columns.head, Columns.tail: _*)
    Seq("k < 50", "x > 10", "s IS NULL", "late IS NULL", "_ai_row_offset_ < 700", "_ai_append_name_ = 'o1'")
      .foreach(p => assertDeleted(d, "opt")(df => cols(df.where(p))))
    withConf(MaxSel -> "1.0") {
      def late(df: DataFrame) = df.where("k < 3").select("_ai_fragment_", "_ai_row_offset_", "text", "late", "k")
      assert(scans(late(read(d.wh, "opt"))).head.description().contains("LateMaterializeFilteredColumns: on"))
      assert(assertDeleted(d, "opt")(late) > 0)
      assertDeleted(d, "opt", "batch_size" -> "100", "max_rows_per_partition" -> "500")(late)
    }
    assertDeleted(d, "opt", "fragments" -> frags.take(4).mkString(","))(cols)
    assertDeleted(d, "opt", "batches" -> "o1,o4")(cols)
  }

  test("nested, binary, decimal and temporal columns keep their live rows") {
    val wh = new DeletesCatalog(TestWarehouses.warehouse)
    try {
      val deletes = wh.fragments("types").collect {
        case (f, _, rows) if rows > 0 => f -> (0L until rows by 3).toSet
      }.toMap
      assert(deletes.nonEmpty)
      val d = new Deleted(wh, wh.head("types"), wh.delete("types", deletes), deletes)
      val live = assertDeleted(d, "types")(_.select(col("*"), col("_ai_fragment_"), col("_ai_row_offset_")))
      assert(live > 0)
      assertDeleted(d, "types", "batch_size" -> "5")(_.select(col("*"), col("_ai_fragment_"), col("_ai_row_offset_")))
    } finally wh.close()
  }

  test("a limit returns live rows only") {
    val d = deleted
    val live = read(d.wh, "opt").select("_ai_fragment_", "_ai_row_offset_").collect().map(key).toSet
    Seq(1, 5, 1000, 3000).foreach { n =>
      Seq(Seq.empty[(String, String)], Seq("split_fragments" -> "false"), Seq("batch_size" -> "50")).foreach { o =>
        val rows = read(d.wh, "opt", o: _*).select("_ai_fragment_", "_ai_row_offset_", "k").limit(n).collect()
        assert(rows.length == n && rows.forall(r => live.contains(key(r))), s"limit $n with $o")
      }
    }
  }

  test("pages holding deleted rows: late materialization over a page index") {
    val wh = new DeletesCatalog(source)
    try {
      val frags = wh.fragments("paged")
      val rng = new Random(3)
      val deletes = frags.map { case (f, _, rows) => f -> (0L until rows).filter(_ => rng.nextInt(3) == 0).toSet }.toMap
      val v0 = wh.head("paged")
      val d = new Deleted(wh, v0, wh.delete("paged", deletes), deletes)
      withConf(MaxSel -> "1.0") {
        def q(df: DataFrame) = df.where("k = 7").select("_ai_fragment_", "_ai_row_offset_", "text")
        assert(scans(q(read(wh, "paged"))).head.description().contains("LateMaterializeFilteredColumns: on"))
        assertDeleted(d, "paged")(q)
        assertDeleted(d, "paged")(_.where("k < 3 OR k > 97").select("_ai_fragment_", "_ai_row_offset_", "text"))
      }
    } finally wh.close()
  }

  test("a fully deleted fragment is not planned; row totals and statistics count live rows") {
    val d = deleted
    val frags = d.wh.fragments("opt")
    val gone = frags(2)._1
    val df = read(d.wh, "opt").select("k", "_ai_fragment_")
    val scan = scans(df).head
    assert(!scan.plan.fragments.exists(_.fragmentId == gone))
    // a partition carries a vector only for a fragment that has one
    assert(scan.plan.fragments.forall(p => p.deletes.isDefined == d.deletes.contains(p.fragmentId)))
    assert(scan.plan.counts.empty == 1 && scan.plan.counts.kept == 7)
    assert(scan.description().contains("fragments=7/8 (pruned: empty 1)"))
    val live = frags.map(_._3).sum - d.deletes.values.map(_.size).sum
    assert(scan.plan.rows == live && scan.estimateStatistics().numRows().getAsLong == live)
    assert(df.count() == live)
    val only = read(d.wh, "opt", "fragments" -> gone)
    assert(scans(only).head.plan.partitions.isEmpty && only.count() == 0)
    val before = read(d.wh, "opt", "fragments" -> gone, "versionAsOf" -> d.v0.toString)
    assert(scans(before).head.plan.partitions.size == 1 && before.count() == 400)
  }

  test("a cumulative vector replacing an older one deletes the union; each version reads its own") {
    val wh = new DeletesCatalog(source)
    try {
      val (f, _, _) = wh.fragments("opt").head
      val v0 = wh.head("opt")
      val first = (0L until 100L).toSet
      val v1 = wh.delete("opt", Map(f -> first))
      val second = (50L until 200L by 3).toSet
      val v2 = wh.delete("opt", Map(f -> second))
      assert(wh.deleted("opt", f) == first ++ second)
      def offsets(version: Long): Set[Long] = read(wh, "opt", "versionAsOf" -> version.toString, "fragments" -> f)
        .select("_ai_row_offset_").collect().map(_.getLong(0)).toSet
      assert(offsets(v0) == (0L until 1300L).toSet)
      assert(offsets(v1) == (0L until 1300L).toSet -- first)
      assert(offsets(v2) == (0L until 1300L).toSet -- first -- second)
      assert(read(wh, "opt", "fragments" -> f).select("_ai_row_offset_").collect().map(_.getLong(0)).toSet ==
        offsets(v2))
    } finally wh.close()
  }

  test("a damaged vector fails the scan naming table, fragment and vector") {
    val probe = new DeletesCatalog(source)
    val (f, batch, rows) =
      try probe.fragments("opt").head
      finally probe.close()
    val cases = Seq(
      ("not base64", 1L, "*** not base64 ***", "is not base64"),
      ("not zlib", 1L, java.util.Base64.getEncoder.encodeToString("plain bytes".getBytes), "is not a zlib stream"),
      ("too long", 1L, DeletesCatalog.encode(Set(3L), rows + 64), s"bytes, a fragment of $rows rows needs"),
      ("too short", 1L, DeletesCatalog.encode(Set(3L), rows - 64), s"bytes, a fragment of $rows rows needs"),
      ("past the end", 1L, DeletesCatalog.encode(Set(rows + 2), rows + 3), s"past the fragment's $rows rows"),
      ("wrong count", 2L, DeletesCatalog.encode(Set(3L), rows), "the catalog's deleted_count says 2")
    )
    cases.foreach { case (name, count, vector, detail) =>
      val wh = new DeletesCatalog(source)
      try {
        val v = wh.commit("opt")
        wh.put("opt", "dv-bad", f, batch, count, vector, v)
        val e = intercept[Exception](read(wh, "opt").select("k", "_ai_row_offset_").collect())
        val messages = OmniTableErrors.causes(e).map(_.getMessage).mkString("\n")
        assert(
          messages.contains(s"Cannot read deletion vector dv-bad of fragment $f of table 'opt'") &&
            messages.contains(detail),
          s"$name: $messages")
        // the version before is still readable
        assert(read(wh, "opt", "versionAsOf" -> (v - 1).toString).count() == 6800 + 500)
      } finally wh.close()
    }
    val wh = new DeletesCatalog(source)
    try {
      val v = wh.commit("opt")
      wh.put("opt", "dv-bad", f, batch, rows + 1, DeletesCatalog.encode(Set(3L), rows), v)
      val e = intercept[Exception](read(wh, "opt").collect())
      assert(OmniTableErrors.causes(e).map(_.getMessage).mkString.contains(
        s"Cannot read deletion vector dv-bad of fragment $f of table 'opt': its deleted_count ${rows + 1} is not"))
    } finally wh.close()
    val twice = new DeletesCatalog(source)
    try {
      val v = twice.commit("opt")
      Seq("dv-1", "dv-2").foreach(id => twice.put("opt", id, f, batch, 1L, DeletesCatalog.encode(Set(3L), rows), v))
      val e = intercept[Exception](read(twice, "opt").collect())
      assert(e.getMessage.contains(s"fragment $f of table 'opt' has two visible deletion vectors (dv-1 and dv-2)"))
    } finally twice.close()
  }
}
