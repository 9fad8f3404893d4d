package io.omnitable.spark.read.exec

import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector
import org.apache.spark.sql.types.LongType
import org.apache.spark.sql.vectorized.ColumnVector
import org.scalatest.funsuite.AnyFunSuite

class RowRangesSuite extends AnyFunSuite {

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
