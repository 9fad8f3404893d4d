package io.omnitable.spark.write

import java.math.{BigDecimal => JBigDecimal}

import scala.annotation.switch

import io.omnitable.spark.catalog.FileColumnStats
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * Statistics of one column of one file as it is written, in the catalog's text encoding
 * (docs/catalog.md, "Statistics encoding"; python/omnitable/vocabulary/stats.py is the other
 * implementation): null count always; min/max for orderable primitive types, not for floats
 * holding NaN, not for strings whose min or max is longer than 64 characters.
 *
 * Called once per value of every written row, so each kind of column keeps its bounds unboxed
 * (integers and dates as `Long`, floats as `Double` in total order, so -0.0 < 0.0) and a string or
 * decimal is copied only when it becomes a new bound. Strings compare by `binaryCompare` (UTF-8
 * bytes, what `compareTo` does outside Spark's own tests, minus its per-call environment lookup).
 */
private[write] final class ColumnStatsBuilder(dataType: DataType) {
  import ColumnStatsBuilder._

  private val kind: Int = dataType match {
    case BooleanType => KBoolean
    case ByteType => KByte
    case ShortType => KShort
    case IntegerType | DateType => KInt
    case LongType | TimestampType | TimestampNTZType => KLong
    case FloatType => KFloat
    case DoubleType => KDouble
    case _: DecimalType => KDecimal
    case StringType => KString
    case _ => KNone
  }
  private val precision = dataType match { case d: DecimalType => d.precision; case _ => 0 }
  private val scale = dataType match { case d: DecimalType => d.scale; case _ => 0 }
  private var nulls = 0L
  private var nan = false
  private var seen = false // a non-null, non-NaN value was added (the bounds below are set)
  private var minLong, maxLong = 0L
  private var minDouble, maxDouble = 0.0
  private var minRef, maxRef: AnyRef = _ // UTF8String or Decimal copies

  /** Add the value at `ordinal` of `row`. */
  def add(row: InternalRow, ordinal: Int): Unit =
    if (row.isNullAt(ordinal)) nulls += 1
    else
      (kind: @switch) match {
        case KLong => addLong(row.getLong(ordinal))
        case KInt => addLong(row.getInt(ordinal).toLong)
        case KDouble => addDouble(row.getDouble(ordinal))
        case KString => addString(row.getUTF8String(ordinal))
        case KFloat => addDouble(row.getFloat(ordinal).toDouble)
        case KShort => addLong(row.getShort(ordinal).toLong)
        case KByte => addLong(row.getByte(ordinal).toLong)
        case KBoolean => addLong(if (row.getBoolean(ordinal)) 1L else 0L)
        case KDecimal => addDecimal(row.getDecimal(ordinal, precision, scale))
        case _ => ()
      }

  private def addLong(v: Long): Unit =
    if (!seen) { minLong = v; maxLong = v; seen = true }
    else if (v < minLong) minLong = v
    else if (v > maxLong) maxLong = v

  private def addDouble(v: Double): Unit =
    if (v.isNaN) nan = true
    else if (!seen) { minDouble = v; maxDouble = v; seen = true }
    else if (java.lang.Double.compare(v, minDouble) < 0) minDouble = v
    else if (java.lang.Double.compare(v, maxDouble) > 0) maxDouble = v

  private def addString(v: UTF8String): Unit =
    if (!seen) { minRef = v.clone(); maxRef = minRef; seen = true }
    else if (v.binaryCompare(minRef.asInstanceOf[UTF8String]) < 0) minRef = v.clone()
    else if (v.binaryCompare(maxRef.asInstanceOf[UTF8String]) > 0) maxRef = v.clone()

  private def addDecimal(v: Decimal): Unit =
    if (!seen) { minRef = v.clone(); maxRef = minRef; seen = true }
    else if (v.compare(minRef.asInstanceOf[Decimal]) < 0) minRef = v.clone()
    else if (v.compare(maxRef.asInstanceOf[Decimal]) > 0) maxRef = v.clone()

  def result: FileColumnStats = {
    val keep = kind != KNone && seen && !nan &&
      (kind != KString || Seq(minRef, maxRef).forall(_.asInstanceOf[UTF8String].numChars <= MaxStringChars))
    if (!keep) FileColumnStats(Some(nulls), None, None)
    else FileColumnStats(Some(nulls), Some(encode(isMin = true)), Some(encode(isMin = false)))
  }

  private def encode(isMin: Boolean): String = kind match {
    case KBoolean => if ((if (isMin) minLong else maxLong) == 1L) "true" else "false"
    case KFloat | KDouble => pythonRepr(if (isMin) minDouble else maxDouble)
    case KDecimal => (if (isMin) minRef else maxRef).asInstanceOf[Decimal].toJavaBigDecimal.toPlainString
    case KString => (if (isMin) minRef else maxRef).toString
    case _ => (if (isMin) minLong else maxLong).toString
  }
}

private[write] object ColumnStatsBuilder {
  val MaxStringChars = 64

  // Kinds of column (a switch in the per-value path instead of a match on the DataType).
  private final val KNone = 0
  private final val KBoolean = 1
  private final val KByte = 2
  private final val KShort = 3
  private final val KInt = 4
  private final val KLong = 5
  private final val KFloat = 6
  private final val KDouble = 7
  private final val KDecimal = 8
  private final val KString = 9

  /**
   * A double as Python's `repr` writes it (the shortest round-trip digits; positional notation
   * for exponents -4..15, else `1e+20` style): the encoding docs/catalog.md specifies for floats.
   */
  def pythonRepr(d: Double): String = {
    if (d.isPosInfinity) return "Infinity"
    if (d.isNegInfinity) return "-Infinity"
    if (d == 0.0) return if (1.0 / d < 0) "-0.0" else "0.0"
    val bd = new JBigDecimal(java.lang.Double.toString(d)).stripTrailingZeros()
    val digits = bd.unscaledValue().abs().toString
    val exp = digits.length - 1 - bd.scale() // decimal exponent of the first digit
    val sign = if (d < 0) "-" else ""
    if (exp >= -4 && exp < 16) {
      val plain = bd.abs().toPlainString
      sign + (if (plain.contains('.')) plain else plain + ".0")
    } else {
      val mantissa = if (digits.length == 1) digits else digits.head.toString + "." + digits.tail
      val e = if (exp < 0) f"-${-exp}%02d" else f"+$exp%02d"
      s"$sign${mantissa}e$e"
    }
  }
}
