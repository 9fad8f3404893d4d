package io.omnitable.spark.read.plan

import io.omnitable.spark.read.exec.{FileSlice, FragmentInputPartition, RowRanges}
import org.apache.spark.sql.types.StructType
import org.scalatest.funsuite.AnyFunSuite

class ScanPlannerSuite extends AnyFunSuite {

  test("large fragments are cut into near-equal row ranges that cover every row once") {
    assert(ScanPlanner.rowRanges(10, 100) == Seq((0L, 10L)))
    assert(ScanPlanner.rowRanges(10, 3) == Seq((0L, 2L), (2L, 5L), (5L, 7L), (7L, 10L)))
    for (rows <- Seq(1L, 7L, 1000L, 1048577L); max <- Seq(1L, 5L, 1000L, 1L << 20)) {
      val r = ScanPlanner.rowRanges(rows, max)
      assert(r.head._1 == 0 && r.last._2 == rows && r.zip(r.tail).forall { case (a, b) => a._2 == b._1 })
      assert(r.forall { case (a, b) => b - a <= max && b > a })
    }
  }

  test("range ends move to the next row-group start, so aligned ranges still tile the fragment") {
    val starts = Array(0L, 250L, 500L, 750L, 1000L)
    assert(Seq(0L, 1L, 250L, 333L, 666L, 999L, 1000L).map(RowRanges.alignToRowGroup(starts, _)) ==
      Seq(0L, 250L, 250L, 500L, 750L, 1000L, 1000L))
    val aligned = ScanPlanner.rowRanges(1000, 400).map { case (s, e) =>
      (RowRanges.alignToRowGroup(starts, s), RowRanges.alignToRowGroup(starts, e))
    }
    assert(aligned == Seq((0L, 500L), (500L, 750L), (750L, 1000L)))
    val oneGroup = Array(0L, 1000L) // ranges inside one row group: one partition reads it all
    assert(ScanPlanner.rowRanges(1000, 300).map { case (s, e) =>
      (RowRanges.alignToRowGroup(oneGroup, s), RowRanges.alignToRowGroup(oneGroup, e))
    } == Seq((0L, 1000L), (1000L, 1000L), (1000L, 1000L), (1000L, 1000L)))
  }

  /** Rows `[start, end)` (default: all) of a fragment of `rows` rows reading one file. */
  private def slice(id: String, rows: Long, start: Long = 0, end: Long = -1): FragmentInputPartition =
    FragmentInputPartition(
      id,
      "b",
      rows,
      start,
      if (end < 0) rows else end,
      Array(FileSlice(s"file:/t/$id.parquet", new StructType(), rows)),
      Array.empty)

  private def packed(slices: Seq[FragmentInputPartition], bytes: Seq[Long], p: Option[Packing]): Seq[Seq[String]] = {
    val parts = ScanPlanner.pack(slices.toIndexedSeq, bytes.toArray, p)
    assert(parts.flatMap(_.fragments) == slices, "the same fragments and ranges, in table order")
    parts.map(_.fragments.toSeq.map(_.fragmentId))
  }

  test("consecutive small fragments are packed up to the target; larger fragments and row ranges stay alone") {
    val slices = Seq(
      slice("a", 10),
      slice("b", 10),
      slice("c", 10),
      slice("big", 10),
      slice("d", 10),
      slice("e", 100, 0, 50),
      slice("e", 100, 50, 100),
      slice("f", 10),
      slice("g", 10))
    val bytes = Seq(100L, 100, 100, 1000, 100, 50, 50, 100, 100)
    // each fragment costs its bytes plus 10 per file: a, b, c fit 350 together
    assert(packed(slices, bytes, Some(Packing(350, 10, 1, 1000))) ==
      Seq(Seq("a", "b", "c"), Seq("big"), Seq("d"), Seq("e"), Seq("e"), Seq("f", "g")))
    assert(packed(slices, bytes, None) == slices.map(s => Seq(s.fragmentId)), "no packing: one each")
    assert(packed(slices, bytes, Some(Packing(1, 0, 1, 1000))).forall(_.size == 1), "a tiny target: one each")
    assert(packed(slices.take(3), bytes.take(3), Some(Packing(1L << 30, 0, 1, 25))) == Seq(Seq("a", "b"), Seq("c")))
  }

  test("the target shrinks to spread the scan's cost over the minimum number of partitions") {
    val six = (1 to 6).map(i => slice(s"f$i", 10))
    // 6 x (100 + 10) = 660 over 3 partitions: a target of 220
    assert(Packing(1L << 30, 10, 3, 1000).targetBytes(660) == 220)
    assert(packed(six, Seq.fill(6)(100L), Some(Packing(1L << 30, 10, 3, 1000))).map(_.size) == Seq(2, 2, 2))
    assert(Packing(1000, 10, 1, 1000).targetBytes(1L << 40) == 1000, "never above maxPartitionBytes")
    assert(Packing(1000, 10, 64, 1000).targetBytes(100) == 10, "never below the open cost")
  }
}
