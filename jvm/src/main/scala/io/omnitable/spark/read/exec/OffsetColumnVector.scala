package io.omnitable.spark.read.exec

import org.apache.spark.sql.types.{Decimal, StructType}
import org.apache.spark.sql.vectorized.{ColumnarArray, ColumnarMap, ColumnVector}
import org.apache.spark.unsafe.types.UTF8String

/**
 * A zero-copy view of `numRows` rows of `delegate`: row `i` of the view is row `at(i)` of the
 * delegate. Struct children are viewed through the same mapping; arrays and maps delegate (their
 * `ColumnarArray` already points into the delegate's data). The view owns nothing: closing it is
 * a no-op (the file reader owns the delegate).
 */
private[exec] abstract class RowMappedColumnVector(delegate: ColumnVector, numRows: Int)
    extends ColumnVector(delegate.dataType()) {

  /** The delegate's row for row `rowId` of this view. */
  protected def at(rowId: Int): Int

  /** The same row mapping over `child`, a child vector of the delegate. */
  protected def sameRowsOf(child: ColumnVector): ColumnVector

  private lazy val children: Array[ColumnVector] = dataType() match {
    case s: StructType => Array.tabulate(s.length)(i => sameRowsOf(delegate.getChild(i)))
    case _ => Array.empty
  }

  override def close(): Unit = ()
  override def closeIfFreeable(): Unit = ()

  override def hasNull(): Boolean = delegate.hasNull() && numNulls() > 0

  override def numNulls(): Int =
    if (!delegate.hasNull()) 0
    else {
      var c = 0
      var i = 0
      while (i < numRows) { if (delegate.isNullAt(at(i))) c += 1; i += 1 }
      c
    }

  override def isNullAt(rowId: Int): Boolean = delegate.isNullAt(at(rowId))
  override def getBoolean(rowId: Int): Boolean = delegate.getBoolean(at(rowId))
  override def getByte(rowId: Int): Byte = delegate.getByte(at(rowId))
  override def getShort(rowId: Int): Short = delegate.getShort(at(rowId))
  override def getInt(rowId: Int): Int = delegate.getInt(at(rowId))
  override def getLong(rowId: Int): Long = delegate.getLong(at(rowId))
  override def getFloat(rowId: Int): Float = delegate.getFloat(at(rowId))
  override def getDouble(rowId: Int): Double = delegate.getDouble(at(rowId))
  override def getArray(rowId: Int): ColumnarArray = delegate.getArray(at(rowId))
  override def getMap(rowId: Int): ColumnarMap = delegate.getMap(at(rowId))
  override def getDecimal(rowId: Int, precision: Int, scale: Int): Decimal =
    delegate.getDecimal(at(rowId), precision, scale)
  override def getUTF8String(rowId: Int): UTF8String = delegate.getUTF8String(at(rowId))
  override def getBinary(rowId: Int): Array[Byte] = delegate.getBinary(at(rowId))
  override def getChild(ordinal: Int): ColumnVector = children(ordinal)
}

/**
 * Rows `offset until offset + rows` of `source`: row `i` of this vector is row `offset + i`.
 * Used to zip files whose batches start at different rows (their row groups differ).
 */
private[exec] final class OffsetColumnVector(source: ColumnVector, offset: Int, rows: Int)
    extends RowMappedColumnVector(source, rows) {
  override protected def at(rowId: Int): Int = offset + rowId
  override protected def sameRowsOf(child: ColumnVector): ColumnVector = new OffsetColumnVector(child, offset, rows)
}

private[exec] object OffsetColumnVector {

  /** `vector` itself when the view would be the identity, else an offset view. */
  def view(vector: ColumnVector, offset: Int, numRows: Int): ColumnVector =
    if (offset == 0) vector else new OffsetColumnVector(vector, offset, numRows)
}

/**
 * Chosen rows of `source`: row `i` of this vector is row `indices(from + i)` (`n` rows). Late
 * materialization uses it to pick the rows that passed the filter out of batches a file without
 * page indexes decoded in full.
 */
private[exec] final class IndexedColumnVector(source: ColumnVector, indices: Array[Int], from: Int, n: Int)
    extends RowMappedColumnVector(source, n) {
  override protected def at(rowId: Int): Int = indices(from + rowId)
  override protected def sameRowsOf(child: ColumnVector): ColumnVector =
    new IndexedColumnVector(child, indices, from, n)
}
