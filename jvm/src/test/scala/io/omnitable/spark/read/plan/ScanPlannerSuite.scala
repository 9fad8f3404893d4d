package io.omnitable.spark.read.plan

import io.omnitable.spark.read.exec.RowRanges
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
}
