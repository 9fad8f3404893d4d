package io.omnitable.spark.read.exec

import io.omnitable.spark.catalog.FileColumnStats
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

class StatsEvaluatorSuite extends AnyFunSuite {
  import CompareOp._
  import Filter._

  private val d = FilterColumn("d", FilterColumn.Data, 1, "d", DoubleType)
  private val i = FilterColumn("i", FilterColumn.Data, 2, "i", LongType)
  private val s = FilterColumn("s", FilterColumn.Data, 3, "s", StringType)
  private val batch = FilterColumn("_ai_append_name_", FilterColumn.BatchName, -1, "", StringType)

  private def view(min: Value, max: Value, nulls: Long = 0, rows: Long = 100, nan: Boolean = false) =
    StatsView(Some(min), Some(max), Some(nulls), rows, nan)
  private def may(f: Filter, stats: Map[FilterColumn, StatsView]): Boolean =
    StatsEvaluator.mightMatch(f, c => stats.getOrElse(c, StatsView.unknown(100)))

  private val ints = Map(i -> view(Value.Integral(10), Value.Integral(20)))

  test("comparisons against [min, max]") {
    assert(may(Compare(Eq, i, Value.Integral(15)), ints))
    assert(!may(Compare(Eq, i, Value.Integral(21)), ints))
    assert(!may(Compare(Lt, i, Value.Integral(10)), ints) && may(Compare(LtEq, i, Value.Integral(10)), ints))
    assert(!may(Compare(Gt, i, Value.Integral(20)), ints) && may(Compare(GtEq, i, Value.Integral(20)), ints))
    assert(may(Compare(NotEq, i, Value.Integral(10)), ints))
    assert(!may(Compare(NotEq, i, Value.Integral(7)), Map(i -> view(Value.Integral(7), Value.Integral(7)))))
    assert(may(In(i, Seq(Value.Integral(1), Value.Integral(12)), negated = false), ints))
    assert(!may(In(i, Seq(Value.Integral(1), Value.Integral(22)), negated = false), ints))
    assert(!may(In(i, Seq(Value.Integral(7)), negated = true), Map(i -> view(Value.Integral(7), Value.Integral(7)))))
  }

  test("NULLs: all-NULL units match no comparison; null counts decide IS [NOT] NULL") {
    val allNull = Map(i -> StatsView.allNull(100))
    assert(!may(Compare(Gt, i, Value.Integral(0)), allNull))
    assert(!may(Compare(NotEq, i, Value.Integral(0)), allNull))
    assert(!may(In(i, Seq(Value.Integral(0)), negated = false), allNull))
    assert(!may(In(i, Seq(Value.Integral(0)), negated = true), allNull))
    assert(!may(StartsWith(s, Value.str("a"), negated = false), Map(s -> StatsView.allNull(100))))
    assert(!may(StartsWith(s, Value.str("a"), negated = true), Map(s -> StatsView.allNull(100))))
    assert(may(IsNull(i, negated = false), allNull) && !may(IsNull(i, negated = true), allNull))
    assert(!may(IsNull(i, negated = false), ints) && may(IsNull(i, negated = true), ints))
    assert(!may(IsNull(i, negated = false), Map(i -> StatsView.allNull(0))), "no rows, no match")
  }

  test("NaN: above every number, equal to itself; bounds cannot exclude it when it may be present") {
    val noNaN = Map(d -> view(Value.Floating(1), Value.Floating(2)))
    val maybeNaN = Map(d -> view(Value.Floating(1), Value.Floating(2), nan = true))
    val nan = Value.Floating(Double.NaN)
    assert(!may(Compare(Gt, d, Value.Floating(5)), noNaN) && may(Compare(Gt, d, Value.Floating(5)), maybeNaN))
    assert(may(Compare(GtEq, d, nan), maybeNaN) && !may(Compare(GtEq, d, nan), noNaN))
    assert(!may(Compare(Lt, d, Value.Floating(0)), maybeNaN), "NaN is never below a number")
    assert(may(Compare(Lt, d, nan), noNaN), "every number is below NaN")
    assert(!may(Compare(Eq, d, nan), noNaN) && may(Compare(Eq, d, nan), maybeNaN))
    assert(may(Compare(NotEq, d, Value.Floating(1)), Map(d -> view(Value.Floating(1), Value.Floating(1), nan = true))))
  }

  test("-0.0 equals 0.0") {
    val negZero = Map(d -> view(Value.Floating(-0.0), Value.Floating(-0.0)))
    assert(may(Compare(Eq, d, Value.Floating(0.0)), negZero))
    assert(!may(Compare(Gt, d, Value.Floating(0.0)), negZero))
  }

  test("strings compare by UTF-8 bytes; STARTS_WITH uses the bounds") {
    val strs = Map(s -> view(Value.str("apple"), Value.str("banana")))
    assert(may(Compare(Eq, s, Value.str("avocado")), strs))
    assert(!may(Compare(Gt, s, Value.str("é")), strs), "é (0xC3..) sorts after ASCII")
    assert(may(StartsWith(s, Value.str("ba"), negated = false), strs))
    assert(may(StartsWith(s, Value.str("apple"), negated = false), strs))
    assert(!may(StartsWith(s, Value.str("c"), negated = false), strs))
    assert(!may(StartsWith(s, Value.str("aa"), negated = false), strs))
    val same = Map(s -> view(Value.str("pre-1"), Value.str("pre-9")))
    assert(!may(StartsWith(s, Value.str("pre-"), negated = true), same))
    assert(may(StartsWith(s, Value.str("pre-5"), negated = true), same))
  }

  test("AND, OR and constants combine; batch names are exact") {
    val stats = ints ++ Map(batch -> StatsView.constant(Value.str("b1"), 100))
    assert(!may(And(Compare(Eq, batch, Value.str("b2")), Compare(Gt, i, Value.Integral(0))), stats))
    assert(may(Or(Compare(Eq, batch, Value.str("b2")), Compare(Gt, i, Value.Integral(0))), stats))
    assert(!may(Const(false), stats) && may(Const(true), stats))
  }

  test("catalog statistics decode per type; missing bounds mean unknown (and maybe NaN)") {
    val v = StatsView.fromCatalog(FileColumnStats(Some(0), Some("-Infinity"), Some("1e+20")), 10, d.domain)
    assert(v.min.contains(Value.Floating(Double.NegativeInfinity)) && v.max.contains(Value.Floating(1e20)) &&
      !v.mayHoldNaN)
    val none = StatsView.fromCatalog(FileColumnStats(Some(2), None, None), 10, d.domain)
    assert(none.min.isEmpty && none.mayHoldNaN)
    val dec =
      StatsView.fromCatalog(FileColumnStats(Some(0), Some("-12.500"), Some("3.000")), 10, Domain.of(DecimalType(10, 3)))
    assert(dec.min.contains(Value.Dec(new java.math.BigDecimal("-12.500"))))
    assert(Domain.of(BinaryType).isEmpty && Domain.of(ArrayType(IntegerType)).isEmpty)
  }

  private def must(f: Filter, stats: Map[FilterColumn, StatsView]): Boolean =
    StatsEvaluator.mustMatch(f, c => stats.getOrElse(c, StatsView.unknown(100)))

  test("mustMatch: proven only by known bounds without NULL or NaN (metadata-only DELETE)") {
    assert(must(Compare(GtEq, i, Value.Integral(10)), ints) && !must(Compare(Gt, i, Value.Integral(10)), ints))
    assert(must(Compare(LtEq, i, Value.Integral(20)), ints) && !must(Compare(Lt, i, Value.Integral(20)), ints))
    assert(must(Compare(NotEq, i, Value.Integral(9)), ints) && !must(Compare(NotEq, i, Value.Integral(15)), ints))
    assert(!must(Compare(Eq, i, Value.Integral(15)), ints))
    assert(must(Compare(Eq, i, Value.Integral(7)), Map(i -> view(Value.Integral(7), Value.Integral(7)))))
    assert(must(
      In(i, Seq(Value.Integral(7), Value.Integral(8)), negated = false),
      Map(i -> view(Value.Integral(7), Value.Integral(7)))))
    // a NULL row never satisfies a comparison; unknown NULL counts or bounds prove nothing
    assert(!must(
      Compare(GtEq, i, Value.Integral(0)),
      Map(i -> view(Value.Integral(10), Value.Integral(20), nulls = 1))))
    assert(!must(Compare(GtEq, i, Value.Integral(0)), Map(i -> StatsView.unknown(100))))
    assert(must(IsNull(i, negated = false), Map(i -> StatsView.allNull(100))))
    assert(must(IsNull(i, negated = true), ints) && !must(IsNull(i, negated = false), ints))
    // NaN may hide outside float bounds; a NaN literal is never proven
    val floats = Map(d -> view(Value.Floating(1.0), Value.Floating(2.0)))
    assert(must(Compare(Gt, d, Value.Floating(0.5)), floats))
    assert(!must(
      Compare(Lt, d, Value.Floating(3.0)),
      Map(d -> view(Value.Floating(1.0), Value.Floating(2.0), nan = true))))
    assert(!must(Compare(NotEq, d, Value.Floating(Double.NaN)), floats))
    // per-fragment constants are exact; AND / OR combine
    val b1 = Map(batch -> StatsView.constant(Value.str("b1"), 5), i -> ints(i))
    assert(must(Compare(Eq, batch, Value.str("b1")), b1) && !must(Compare(Eq, batch, Value.str("b2")), b1))
    assert(must(And(Compare(Eq, batch, Value.str("b1")), Compare(GtEq, i, Value.Integral(10))), b1))
    assert(!must(And(Compare(Eq, batch, Value.str("b1")), Compare(Gt, i, Value.Integral(10))), b1))
    assert(must(Or(Compare(Eq, batch, Value.str("b2")), Compare(GtEq, i, Value.Integral(10))), b1))
    assert(must(Const(true), Map.empty) && !must(Const(false), Map.empty))
  }
}
