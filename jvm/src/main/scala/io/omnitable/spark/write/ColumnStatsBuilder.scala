package io.omnitable.spark.write

import java.math.{BigDecimal => JBigDecimal}

import io.omnitable.spark.catalog.FileColumnStats
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * Statistics of one column of one file as it is written, in the catalog's text encoding
 * (docs/catalog.md, "Statistics encoding"; python/omnitable/vocabulary/stats.py is the other
 * implementation): null count always; min/max for orderable primitive types, not for floats
 * holding NaN, not for strings whose min or max is longer than 64 characters.
 */
private[write] final class ColumnStatsBuilder(dataType: DataType) {
  private var nulls = 0L
  private var nan = false
  private var min: Any = _
  private var max: Any = _

  private val ordering: Option[Ordering[Any]] = dataType match {
    case BooleanType => Some(Ordering.Boolean.asInstanceOf[Ordering[Any]])
    case ByteType | ShortType | IntegerType | DateType | LongType | TimestampType | TimestampNTZType =>
      Some(Ordering.Long.asInstanceOf[Ordering[Any]])
    case FloatType | DoubleType => Some(Ordering.Double.TotalOrdering.asInstanceOf[Ordering[Any]])
    case _: DecimalType => Some(Ordering.by[JBigDecimal, JBigDecimal](identity).asInstanceOf[Ordering[Any]])
    case StringType => Some(Ordering.by[UTF8String, UTF8String](identity)(_ compareTo _).asInstanceOf[Ordering[Any]])
    case _ => None
  }

  /** Add the value at `ordinal` of `row`. */
  def add(row: InternalRow, ordinal: Int): Unit =
    if (row.isNullAt(ordinal)) nulls += 1
    else ordering.foreach { ord =>
      val v: Any = dataType match {
        case BooleanType => row.getBoolean(ordinal)
        case ByteType => row.getByte(ordinal).toLong
        case ShortType => row.getShort(ordinal).toLong
        case IntegerType | DateType => row.getInt(ordinal).toLong
        case LongType | TimestampType | TimestampNTZType => row.getLong(ordinal)
        case FloatType => row.getFloat(ordinal).toDouble
        case DoubleType => row.getDouble(ordinal)
        case d: DecimalType => row.getDecimal(ordinal, d.precision, d.scale).toJavaBigDecimal
        case StringType => row.getUTF8String(ordinal).clone()
        case _ => None // no ordering: never reached
      }
      v match {
        case d: Double if d.isNaN => nan = true
        case _ =>
          if (min == null || ord.lt(v, min)) min = v
          if (max == null || ord.gt(v, max)) max = v
      }
    }

  def result: FileColumnStats = {
    val keep = min != null && !nan && (dataType != StringType || Seq(min, max).forall(fits))
    if (!keep) FileColumnStats(Some(nulls), None, None)
    else FileColumnStats(Some(nulls), Some(encode(min)), Some(encode(max)))
  }

  private def fits(v: Any): Boolean = {
    val s = v.toString
    s.codePointCount(0, s.length) <= ColumnStatsBuilder.MaxStringChars
  }

  private def encode(v: Any): String = v match {
    case b: Boolean => if (b) "true" else "false"
    case d: Double => ColumnStatsBuilder.pythonRepr(d)
    case d: JBigDecimal => d.toPlainString
    case other => other.toString
  }
}

private[write] object ColumnStatsBuilder {
  val MaxStringChars = 64

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
