package io.omnitable.spark.read.exec

import org.apache.spark.sql.execution.vectorized.ConstantColumnVector
import org.apache.spark.sql.types.{DataType, Decimal, LongType, StringType, StructType}
import org.apache.spark.sql.vectorized.{ColumnarArray, ColumnarMap, ColumnVector}
import org.apache.spark.unsafe.types.UTF8String

/**
 * All-NULL column of any type (a column no file of the fragment carries, e.g. a feature not yet
 * computed for that batch). Struct children are all-NULL too, so any consumer can walk them.
 */
private[exec] final class NullColumnVector(dataType: DataType, numRows: Int) extends ColumnVector(dataType) {
  private lazy val children: Array[ColumnVector] = dataType match {
    case s: StructType => s.fields.map(f => new NullColumnVector(f.dataType, numRows))
    case _ => Array.empty
  }
  override def close(): Unit = ()
  override def closeIfFreeable(): Unit = ()
  override def hasNull(): Boolean = true
  override def numNulls(): Int = numRows
  override def isNullAt(rowId: Int): Boolean = true
  override def getBoolean(rowId: Int): Boolean = false
  override def getByte(rowId: Int): Byte = 0
  override def getShort(rowId: Int): Short = 0
  override def getInt(rowId: Int): Int = 0
  override def getLong(rowId: Int): Long = 0L
  override def getFloat(rowId: Int): Float = 0f
  override def getDouble(rowId: Int): Double = 0d
  override def getArray(rowId: Int): ColumnarArray = null
  override def getMap(ordinal: Int): ColumnarMap = null
  override def getDecimal(rowId: Int, precision: Int, scale: Int): Decimal = null
  override def getUTF8String(rowId: Int): UTF8String = null
  override def getBinary(rowId: Int): Array[Byte] = null
  override def getChild(ordinal: Int): ColumnVector = children(ordinal)
}

/** `_ai_row_offset_` values computed per row, never stored: a non-null bigint column. */
private[exec] abstract class RowOffsetVector extends ColumnVector(LongType) {
  override def close(): Unit = ()
  override def closeIfFreeable(): Unit = ()
  override def hasNull(): Boolean = false
  override def numNulls(): Int = 0
  override def isNullAt(rowId: Int): Boolean = false
  private def unsupported = throw new UnsupportedOperationException("_ai_row_offset_ is a bigint column")
  override def getBoolean(rowId: Int): Boolean = unsupported
  override def getByte(rowId: Int): Byte = unsupported
  override def getShort(rowId: Int): Short = unsupported
  override def getInt(rowId: Int): Int = unsupported
  override def getFloat(rowId: Int): Float = unsupported
  override def getDouble(rowId: Int): Double = unsupported
  override def getArray(rowId: Int): ColumnarArray = unsupported
  override def getMap(ordinal: Int): ColumnarMap = unsupported
  override def getDecimal(rowId: Int, precision: Int, scale: Int): Decimal = unsupported
  override def getUTF8String(rowId: Int): UTF8String = unsupported
  override def getBinary(rowId: Int): Array[Byte] = unsupported
  override def getChild(ordinal: Int): ColumnVector = unsupported
}

/** `_ai_row_offset_` of a row range: row `i` of the batch is fragment row `base + i`. */
private[exec] final class RowOffsetColumnVector(base: Long) extends RowOffsetVector {
  override def getLong(rowId: Int): Long = base + rowId
}

/** `_ai_row_offset_` of chosen rows (late materialization): row `i` is `rows(from + i)`. */
private[exec] final class LongSliceColumnVector(rows: Array[Long], from: Int) extends RowOffsetVector {
  override def getLong(rowId: Int): Long = rows(from + rowId)
}

private[exec] object ConstantVectors {

  /** A string constant for every row (`_ai_append_name_`, `_ai_fragment_`). */
  def string(value: String, capacity: Int): ColumnVector = {
    val v = new ConstantColumnVector(capacity, StringType)
    v.setUtf8String(UTF8String.fromString(value))
    v
  }
}
