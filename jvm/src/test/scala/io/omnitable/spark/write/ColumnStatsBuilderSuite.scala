package io.omnitable.spark.write

import scala.util.Random

import io.omnitable.spark.catalog.FileColumnStats
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{BoundReference, UnsafeProjection}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

/** The statistics encoding of docs/catalog.md, as python/omnitable/vocabulary/stats.py writes it. */
class ColumnStatsBuilderSuite extends AnyFunSuite {

  private def stats(t: DataType, values: Any*): FileColumnStats = {
    val b = new ColumnStatsBuilder(t)
    values.foreach(v => b.add(InternalRow(v), 0))
    b.result
  }

  test("doubles are written as Python's repr writes them") {
    val cases = Seq(
      1e-05 -> "1e-05",
      0.0001 -> "0.0001",
      1e16 -> "1e+16",
      1e15 -> "1000000000000000.0",
      0.1 -> "0.1",
      -2.5 -> "-2.5",
      123456789012345.6 -> "123456789012345.6",
      1.5e-300 -> "1.5e-300",
      3.0 -> "3.0"
    )
    cases.foreach { case (d, text) => assert(ColumnStatsBuilder.pythonRepr(d) == text, d) }
    assert(ColumnStatsBuilder.pythonRepr(Double.PositiveInfinity) == "Infinity")
    assert(ColumnStatsBuilder.pythonRepr(0.1f.toDouble) == "0.10000000149011612")
  }

  test("min, max and null count by type") {
    assert(stats(LongType, 5L, null, -3L) == FileColumnStats(Some(1), Some("-3"), Some("5")))
    assert(stats(DoubleType, 1e16, 1e-05) == FileColumnStats(Some(0), Some("1e-05"), Some("1e+16")))
    assert(stats(BooleanType, true, false) == FileColumnStats(Some(0), Some("false"), Some("true")))
    assert(stats(DateType, 3, 1) == FileColumnStats(Some(0), Some("1"), Some("3")))
    val dec = DecimalType(10, 2)
    assert(stats(dec, Decimal(BigDecimal("1.50"), 10, 2), Decimal(BigDecimal("-12.50"), 10, 2)) ==
      FileColumnStats(Some(0), Some("-12.50"), Some("1.50")))
    assert(stats(StringType, UTF8String.fromString("b"), UTF8String.fromString("a")) ==
      FileColumnStats(Some(0), Some("a"), Some("b")))
  }

  test("no bounds: NaN, long strings, all nulls, nested types") {
    assert(stats(DoubleType, 1.0, Double.NaN) == FileColumnStats(Some(0), None, None))
    assert(stats(StringType, UTF8String.fromString("x" * 65)) == FileColumnStats(Some(0), None, None))
    assert(stats(StringType, UTF8String.fromString("é" * 64)).min.isDefined) // characters, not bytes
    assert(stats(LongType, null, null) == FileColumnStats(Some(2), None, None))
    assert(stats(BinaryType, Array[Byte](1)) == FileColumnStats(Some(0), None, None))
  }

  test("every integer-like type, timestamps and all-null columns of each type") {
    assert(stats(ByteType, 3.toByte, (-7).toByte, null) == FileColumnStats(Some(1), Some("-7"), Some("3")))
    assert(stats(ShortType, 300.toShort, (-2).toShort) == FileColumnStats(Some(0), Some("-2"), Some("300")))
    assert(stats(IntegerType, 5, Int.MinValue, Int.MaxValue) ==
      FileColumnStats(Some(0), Some(Int.MinValue.toString), Some(Int.MaxValue.toString)))
    assert(stats(LongType, Long.MaxValue, Long.MinValue) ==
      FileColumnStats(Some(0), Some(Long.MinValue.toString), Some(Long.MaxValue.toString)))
    assert(stats(TimestampType, 1700000000000000L, -5L, null) ==
      FileColumnStats(Some(1), Some("-5"), Some("1700000000000000")))
    assert(stats(TimestampNTZType, 7L) == FileColumnStats(Some(0), Some("7"), Some("7")))
    assert(stats(BooleanType, true, true) == FileColumnStats(Some(0), Some("true"), Some("true")))
    val types = Seq(
      BooleanType,
      ByteType,
      ShortType,
      IntegerType,
      LongType,
      FloatType,
      DoubleType,
      DateType,
      TimestampType,
      TimestampNTZType,
      DecimalType(38, 10),
      StringType,
      BinaryType
    )
    types.foreach(t => assert(stats(t, null, null, null) == FileColumnStats(Some(3), None, None), t))
    types.foreach(t => assert(stats(t) == FileColumnStats(Some(0), None, None), t))
  }

  test("floats: NaN anywhere drops the bounds, -0.0 sorts before 0.0, infinities are bounds") {
    assert(stats(DoubleType, Double.NaN, 1.0) == FileColumnStats(Some(0), None, None))
    assert(stats(DoubleType, Double.NaN, null) == FileColumnStats(Some(1), None, None))
    assert(stats(FloatType, 1.0f, Float.NaN, 2.0f) == FileColumnStats(Some(0), None, None))
    assert(stats(DoubleType, 0.0, -0.0) == FileColumnStats(Some(0), Some("-0.0"), Some("0.0")))
    assert(stats(DoubleType, Double.NegativeInfinity, 2.0, Double.PositiveInfinity, null) ==
      FileColumnStats(Some(1), Some("-Infinity"), Some("Infinity")))
    assert(stats(FloatType, 0.1f, -1.5f) == FileColumnStats(Some(0), Some("-1.5"), Some("0.10000000149011612")))
  }

  test("decimals keep their scale, compare by value, and survive the source value changing") {
    val dec = DecimalType(38, 3)
    val big = Decimal(BigDecimal("12345678901234567890123456789.125"), 38, 3)
    val mutable = Decimal(BigDecimal("-1.000"), 38, 3)
    val b = new ColumnStatsBuilder(dec)
    b.add(InternalRow(mutable), 0)
    mutable.set(BigDecimal("5.500"), 38, 3) // a reused value must not move the bounds it set
    b.add(InternalRow(big), 0)
    b.add(InternalRow(null), 0)
    assert(b.result == FileColumnStats(Some(1), Some("-1.000"), Some("12345678901234567890123456789.125")))
    assert(stats(DecimalType(5, 2), Decimal(BigDecimal("0.10"), 5, 2)) ==
      FileColumnStats(Some(0), Some("0.10"), Some("0.10")))
  }

  test("strings: bounds are copies, compared as UTF-8 bytes, 64 characters at most for min and max") {
    // One UnsafeProjection reuses its buffer, as rows reach the writer: earlier values are overwritten.
    val proj = UnsafeProjection.create(Seq(BoundReference(0, StringType, nullable = true)))
    val b = new ColumnStatsBuilder(StringType)
    Seq("m", "b", null, "zz", "é", "c").foreach { v =>
      b.add(proj(InternalRow(if (v == null) null else UTF8String.fromString(v))), 0)
    }
    assert(b.result == FileColumnStats(Some(1), Some("b"), Some("é"))) // é (0xC3..) sorts after z
    val long = UTF8String.fromString("y" * 65)
    assert(stats(StringType, UTF8String.fromString("a"), long) == FileColumnStats(Some(0), None, None))
    assert(stats(StringType, long, UTF8String.fromString("z")) == FileColumnStats(Some(0), None, None))
    assert(stats(StringType, UTF8String.fromString("a"), long, UTF8String.fromString("z")) ==
      FileColumnStats(Some(0), Some("a"), Some("z"))) // a long value that is neither bound is fine
    assert(stats(StringType, UTF8String.fromString("")) == FileColumnStats(Some(0), Some(""), Some("")))
  }

  test("random columns: the same statistics as a plain boxed min/max over the values") {
    val rnd = new Random(14)
    def check[T](t: DataType, gen: () => T, toCatalyst: T => Any, encode: T => String)(implicit o: Ordering[T]) =
      (0 until 20).foreach { _ =>
        val values = Seq.fill(1 + rnd.nextInt(50))(if (rnd.nextInt(5) == 0) None else Some(gen()))
        val present = values.flatten
        val expected = FileColumnStats(
          Some(values.count(_.isEmpty).toLong),
          present.reduceOption((a, b) => o.min(a, b)).map(encode),
          present.reduceOption((a, b) => o.max(a, b)).map(encode))
        assert(stats(t, values.map(_.map(toCatalyst).orNull): _*) == expected, (t, values))
      }
    check[Long](LongType, () => rnd.nextLong() >> rnd.nextInt(64), identity, _.toString)
    check[Int](IntegerType, () => rnd.nextInt() >> rnd.nextInt(32), identity, _.toString)
    check[Short](ShortType, () => rnd.nextInt().toShort, identity, _.toString)
    check[Double](
      DoubleType,
      () => rnd.nextGaussian() * math.pow(10, rnd.nextInt(40) - 20),
      identity,
      ColumnStatsBuilder.pythonRepr)(Ordering.Double.TotalOrdering)
    check[BigDecimal](
      DecimalType(12, 4),
      () => BigDecimal(rnd.nextLong() % 100000000000L, 4),
      Decimal(_, 12, 4),
      _.bigDecimal.toPlainString)
    check[String](StringType, () => rnd.alphanumeric.take(rnd.nextInt(10)).mkString, UTF8String.fromString, identity)
  }
}
