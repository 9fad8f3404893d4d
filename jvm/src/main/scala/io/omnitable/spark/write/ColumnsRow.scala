package io.omnitable.spark.write

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.{ArrayData, MapData}
import org.apache.spark.sql.types.DataType
import org.apache.spark.unsafe.types.{CalendarInterval, GeographyVal, GeometryVal, UTF8String, VariantVal}

/**
 * One column group's row in file order, read straight from the row Spark hands the writer (no
 * copy): field `i` (of type `types(i)`) is the generated `_ai_unique_id_` where `inputs(i)` is -1, else field
 * `inputs(i)` of the current input row. Used for groups whose columns need no cast (the
 * others go through an `UnsafeProjection`); valid until the next [[ColumnsRow.set]], which is
 * all the Parquet writer and the statistics need (they read each row before the next one).
 */
private[write] final class ColumnsRow(inputs: Array[Int], types: Array[DataType]) extends InternalRow {
  private var id = 0L
  private var row: InternalRow = _

  def set(rowId: Long, input: InternalRow): ColumnsRow = { id = rowId; row = input; this }

  override def numFields: Int = inputs.length
  override def isNullAt(i: Int): Boolean = inputs(i) >= 0 && row.isNullAt(inputs(i))
  override def getLong(i: Int): Long = if (inputs(i) < 0) id else row.getLong(inputs(i))
  override def getBoolean(i: Int): Boolean = row.getBoolean(inputs(i))
  override def getByte(i: Int): Byte = row.getByte(inputs(i))
  override def getShort(i: Int): Short = row.getShort(inputs(i))
  override def getInt(i: Int): Int = row.getInt(inputs(i))
  override def getFloat(i: Int): Float = row.getFloat(inputs(i))
  override def getDouble(i: Int): Double = row.getDouble(inputs(i))
  override def getDecimal(i: Int, precision: Int, scale: Int) = row.getDecimal(inputs(i), precision, scale)
  override def getUTF8String(i: Int): UTF8String = row.getUTF8String(inputs(i))
  override def getBinary(i: Int): Array[Byte] = row.getBinary(inputs(i))
  override def getGeography(i: Int): GeographyVal = row.getGeography(inputs(i))
  override def getGeometry(i: Int): GeometryVal = row.getGeometry(inputs(i))
  override def getInterval(i: Int): CalendarInterval = row.getInterval(inputs(i))
  override def getVariant(i: Int): VariantVal = row.getVariant(inputs(i))
  override def getStruct(i: Int, numFields: Int): InternalRow = row.getStruct(inputs(i), numFields)
  override def getArray(i: Int): ArrayData = row.getArray(inputs(i))
  override def getMap(i: Int): MapData = row.getMap(inputs(i))
  override def get(i: Int, dataType: DataType): AnyRef =
    if (inputs(i) < 0) java.lang.Long.valueOf(id) else row.get(inputs(i), dataType)

  override def setNullAt(i: Int): Unit = throw new UnsupportedOperationException("ColumnsRow is read-only")
  override def update(i: Int, value: Any): Unit = throw new UnsupportedOperationException("ColumnsRow is read-only")
  override def copy(): InternalRow = {
    val out = new Array[Any](inputs.length)
    var i = 0
    while (i < inputs.length) {
      out(i) = if (isNullAt(i)) null else if (inputs(i) < 0) id else InternalRow.copyValue(row.get(inputs(i), types(i)))
      i += 1
    }
    new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(out)
  }
}
