package io.omnitable.spark.write

import java.math.{BigDecimal => JBigDecimal, MathContext, RoundingMode}
import java.nio.charset.StandardCharsets
import java.security.MessageDigest
import java.time.LocalDate

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.{ArrayData, MapData}
import org.apache.spark.sql.types._

/**
 * Spark values as Python's backfill sees and prints them, for the error rows of SQL features
 * (python/omnitable/exec/task.py `_sql_outputs`): a double's `repr` (a string's: [[PyRepr.str]]), and
 * `input_digest` (python/omnitable/isolation/policy.py) of one record's inputs.
 */
object PyValues {

  /** Python's `repr(d)` of a finite, non-NaN float: the shortest digits that round-trip. */
  def floatRepr(d: Double): String = {
    if (d.isInfinite) return if (d > 0) "inf" else "-inf"
    if (d == 0) return if (1 / d < 0) "-0.0" else "0.0"
    val exact = new JBigDecimal(d)
    val shortest = (1 to 17).iterator
      .map(p => exact.round(new MathContext(p, RoundingMode.HALF_EVEN)))
      .find(_.doubleValue == d)
      .get
      .stripTrailingZeros
    val digits = shortest.unscaledValue.abs.toString
    val exp = digits.length - 1 - shortest.scale
    val sign = if (d < 0) "-" else ""
    val body =
      if (exp >= -4 && exp < 16) {
        if (exp >= digits.length - 1) digits + "0" * (exp - digits.length + 1) + ".0"
        else if (exp >= 0) digits.take(exp + 1) + "." + digits.drop(exp + 1)
        else "0." + "0" * (-exp - 1) + digits
      } else {
        val mantissa = if (digits.length > 1) s"${digits.head}.${digits.tail}" else digits
        f"${mantissa}e${if (exp < 0) "-" else "+"}${math.abs(exp)}%02d"
      }
    sign + body
  }

  /** `input_digest` of the fields of `inputs` (a struct of type `schema`), as Python receives them through Arrow. */
  def inputDigest(inputs: InternalRow, schema: StructType): String = {
    val h = MessageDigest.getInstance("SHA-256")
    h.update(s"${schema.length};".getBytes(StandardCharsets.US_ASCII))
    schema.fields.zipWithIndex.foreach { case (f, i) =>
      encode(if (inputs.isNullAt(i)) null else inputs.get(i, f.dataType), f.dataType, h)
    }
    h.digest().map(b => f"${b & 0xff}%02x").mkString
  }

  private def encode(v: Any, t: DataType, h: MessageDigest): Unit = (v, t) match {
    case (null, _) => ascii(h, "N;")
    case (b: Boolean, _) => ascii(h, if (b) "B1;" else "B0;")
    case (n @ (_: Byte | _: Short | _: Int | _: Long), ByteType | ShortType | IntegerType | LongType) =>
      tagged(h, "I", n.toString)
    case (n: Int, DateType) => tagged(h, "T", LocalDate.ofEpochDay(n.toLong).toString)
    case (f: Float, _) => encodeDouble(f.toDouble, h)
    case (d: Double, _) => encodeDouble(d, h)
    case (d: Decimal, _) => tagged(h, "E", d.toJavaBigDecimal.toString)
    case (s: org.apache.spark.unsafe.types.UTF8String, _) => tagged(h, "S", s.getBytes)
    case (b: Array[Byte], _) => tagged(h, "Y", b)
    case (a: ArrayData, ArrayType(et, _)) =>
      ascii(h, s"L${a.numElements()};")
      (0 until a.numElements()).foreach(i => encode(if (a.isNullAt(i)) null else a.get(i, et), et, h))
    case (r: InternalRow, st: StructType) => // a dict
      ascii(h, s"M${st.length};")
      st.fields.zipWithIndex.foreach { case (f, i) =>
        tagged(h, "S", f.name)
        encode(if (r.isNullAt(i)) null else r.get(i, f.dataType), f.dataType, h)
      }
    case (m: MapData, MapType(kt, vt, _)) => // a list of (key, value) tuples
      ascii(h, s"L${m.numElements()};")
      (0 until m.numElements()).foreach { i =>
        ascii(h, "L2;")
        encode(m.keyArray().get(i, kt), kt, h)
        encode(if (m.valueArray().isNullAt(i)) null else m.valueArray().get(i, vt), vt, h)
      }
    case (other, _) => tagged(h, "R", other.toString)
  }

  private def encodeDouble(d: Double, h: MessageDigest): Unit =
    if (d.isNaN) ascii(h, "N;")
    else if (!d.isInfinite && d == math.rint(d) && math.abs(d) < math.pow(2, 63)) {
      tagged(h, "I", new JBigDecimal(d).toBigInteger.toString)
    } else tagged(h, "F", floatRepr(d))

  private def ascii(h: MessageDigest, s: String): Unit = h.update(s.getBytes(StandardCharsets.US_ASCII))

  private def tagged(h: MessageDigest, tag: String, payload: String): Unit =
    tagged(h, tag, payload.getBytes(StandardCharsets.UTF_8))

  private def tagged(h: MessageDigest, tag: String, payload: Array[Byte]): Unit = {
    ascii(h, s"$tag${payload.length}:")
    h.update(payload)
  }
}
