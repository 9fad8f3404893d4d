package io.omnitable.spark.read.plan

import io.omnitable.spark.read.exec.{CompareOp, Filter, FilterColumn, Value}
import org.apache.spark.sql.connector.expressions.{Expression, Literal, NamedReference}
import org.apache.spark.sql.connector.expressions.filter.{And => V2And, Not => V2Not, Or => V2Or, Predicate}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String
import org.scalatest.funsuite.AnyFunSuite

class PredicateConverterSuite extends AnyFunSuite {
  import Conversion._

  private val cols = Map(
    "x" -> FilterColumn("x", FilterColumn.Data, 1, "x", IntegerType),
    "d" -> FilterColumn("d", FilterColumn.Data, 2, "d", DateType),
    "s" -> FilterColumn("s", FilterColumn.Data, 3, "s", StringType),
    "b" -> FilterColumn("b", FilterColumn.Data, 4, "b", BinaryType),
    "_ai_append_name_" -> FilterColumn("_ai_append_name_", FilterColumn.BatchName, -1, "", StringType)
  )
  private val converter = new PredicateConverter(cols.get)

  private final case class Ref(fieldNames: Array[String]) extends NamedReference {
    override def describe(): String = fieldNames.mkString(".")
  }
  private final case class LiteralValue(value: Any, dataType: DataType) extends Literal[Any] {
    override def describe(): String = String.valueOf(value)
  }
  private def ref(n: String) = Ref(Array(n))
  private def int(v: Int) = LiteralValue(v, IntegerType)
  private def str(v: String) = LiteralValue(UTF8String.fromString(v), StringType)
  private def p(name: String, children: Expression*) = new Predicate(name, children.toArray)
  private def x = cols("x")

  test("comparisons normalize to column-op-literal, flipping when the literal is on the left") {
    assert(converter.convert(p(">", ref("x"), int(3))) ==
      Converted(Filter.Compare(CompareOp.Gt, x, Value.Integral(3)), complete = true))
    assert(converter.convert(p(">", int(3), ref("x"))) ==
      Converted(Filter.Compare(CompareOp.Lt, x, Value.Integral(3)), complete = true))
  }

  test("NOT is pushed to the leaves") {
    val notAnd = new V2Not(new V2And(p("<", ref("x"), int(3)), p("IS_NULL", ref("s"))))
    assert(converter.convert(notAnd) == Converted(
      Filter.Or(
        Filter.Compare(CompareOp.GtEq, x, Value.Integral(3)),
        Filter.IsNull(cols("s"), negated = true)),
      complete = true))
    assert(converter.convert(new V2Not(p("<=>", ref("x"), int(1)))) == Converted(
      Filter.Or(Filter.IsNull(x, negated = false), Filter.Compare(CompareOp.NotEq, x, Value.Integral(1))),
      complete = true))
  }

  test("half an AND is still usable for pruning, but is not complete; half an OR is not") {
    val unknown = p("ENDS_WITH", ref("s"), str("z"))
    converter.convert(new V2And(p("=", ref("x"), int(1)), unknown)) match {
      case Converted(Filter.Compare(CompareOp.Eq, c, Value.Integral(1)), false) if c == x =>
      case other => fail(other.toString)
    }
    assert(converter.convert(new V2Or(p("=", ref("x"), int(1)), unknown)).isInstanceOf[Declined])
    assert(converter.convert(new V2Not(new V2Or(p("=", ref("x"), int(1)), unknown))).isInstanceOf[Converted])
  }

  test("NULL literals and IN lists with NULL") {
    assert(converter.convert(p("=", ref("x"), LiteralValue(null, IntegerType))) ==
      Converted(Filter.Const(false), complete = true))
    assert(converter.convert(p("IN", ref("x"), int(1), LiteralValue(null, IntegerType))) ==
      Converted(Filter.In(x, Seq(Value.Integral(1)), negated = false), complete = true))
    assert(converter.convert(new V2Not(p("IN", ref("x"), int(1), LiteralValue(null, IntegerType)))) ==
      Converted(Filter.Const(false), complete = true))
  }

  test("what statistics cannot answer is declined with a reason, never an error") {
    def reason(pr: Predicate) = converter.convert(pr) match { case Declined(r) => r; case o => fail(o.toString) }
    assert(reason(p("=", ref("d"), int(3))).contains("does not match"))
    assert(reason(p("=", ref("nope"), int(3))).contains("not filterable"))
    assert(reason(p("=", Ref(Array("s", "inner")), int(3))).contains("nested field"))
    assert(reason(p("CONTAINS", ref("s"), str("a"))).contains("CONTAINS"))
    assert(reason(p("=", ref("b"), LiteralValue(Array[Byte](1), BinaryType))).contains("does not match"))
    assert(converter.convert(p("IS_NOT_NULL", ref("b"))) ==
      Converted(Filter.IsNull(cols("b"), negated = true), complete = true))
    assert(reason(p("=", ref("x"), ref("x"))).contains("does not compare a column with a literal"))
  }

  test("dates and strings convert to their domains") {
    assert(converter.convert(p("<", ref("d"), LiteralValue(19000, DateType))) ==
      Converted(Filter.Compare(CompareOp.Lt, cols("d"), Value.Integral(19000)), complete = true))
    assert(converter.convert(p("STARTS_WITH", ref("s"), str("ab"))) ==
      Converted(Filter.StartsWith(cols("s"), Value.str("ab"), negated = false), complete = true))
  }
}
