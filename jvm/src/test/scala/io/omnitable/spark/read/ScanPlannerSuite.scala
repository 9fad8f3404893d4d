package io.omnitable.spark.read

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector
import org.apache.spark.sql.types.LongType
import org.apache.spark.sql.vectorized.ColumnVector
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
    assert(Seq(0L, 1L, 250L, 333L, 666L, 999L, 1000L).map(ScanPlanner.alignToRowGroup(starts, _)) ==
      Seq(0L, 250L, 250L, 500L, 750L, 1000L, 1000L))
    val aligned = ScanPlanner.rowRanges(1000, 400).map { case (s, e) =>
      (ScanPlanner.alignToRowGroup(starts, s), ScanPlanner.alignToRowGroup(starts, e))
    }
    assert(aligned == Seq((0L, 500L), (500L, 750L), (750L, 1000L)))
    val oneGroup = Array(0L, 1000L) // ranges inside one row group: one partition reads it all
    assert(ScanPlanner.rowRanges(1000, 300).map { case (s, e) =>
      (ScanPlanner.alignToRowGroup(oneGroup, s), ScanPlanner.alignToRowGroup(oneGroup, e))
    } == Seq((0L, 1000L), (1000L, 1000L), (1000L, 1000L), (1000L, 1000L)))
  }

  test("row ranges minus skipped row groups") {
    assert(RowRanges.subtract(Seq((0L, 100L)), Seq((10L, 20L), (50L, 60L))) == Seq((0L, 10L), (20L, 50L), (60L, 100L)))
    assert(RowRanges.subtract(Seq((15L, 55L)), Seq((50L, 60L), (10L, 20L))) == Seq((20L, 50L)))
    assert(RowRanges.subtract(Seq((0L, 10L)), Seq((0L, 10L))) == Nil)
    assert(RowRanges.subtract(Seq((0L, 10L)), Nil) == Seq((0L, 10L)))
  }

  test("offset views read the delegate's rows from the offset, without copying") {
    val v = new OnHeapColumnVector(10, LongType)
    (0 until 10).foreach(i => if (i == 7) v.putNull(i) else v.putLong(i, i * 10L))
    val view: ColumnVector = OffsetColumnVector.view(v, 5, 4)
    assert(view.getLong(0) == 50 && view.getLong(1) == 60 && view.isNullAt(2) && view.getLong(3) == 80)
    assert(view.numNulls() == 1 && view.hasNull())
    assert(OffsetColumnVector.view(v, 0, 10) eq v)
    assert(OffsetColumnVector.view(v, 0, 4).numNulls() == 1, "offset 0 returns the vector itself")
    v.close()
  }
}
