package io.omnitable.spark.write

import io.omnitable.spark.catalog.FileColumnStats
import org.apache.spark.sql.catalyst.InternalRow
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
}
