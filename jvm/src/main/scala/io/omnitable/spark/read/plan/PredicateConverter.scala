package io.omnitable.spark.read.plan

import io.omnitable.spark.read.exec.{CompareOp, Domain, Filter, FilterColumn, Value}
import org.apache.spark.sql.connector.expressions.{Literal, NamedReference}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** The result of converting one Spark predicate. */
sealed trait Conversion

object Conversion {

  /**
   * Converted. `complete`: the filter says exactly what the predicate says (else it is a weaker
   * condition, e.g. one side of an AND we could not convert). Either way it is safe for pruning.
   */
  final case class Converted(filter: Filter, complete: Boolean) extends Conversion

  /** "Can't push": the predicate stays with Spark, for this reason. */
  final case class Declined(reason: String) extends Conversion
}

/**
 * The one place where Spark's V2 predicates become OmniTable [[Filter]]s. Anything it does not
 * understand is declined with a reason (never an error): Spark then evaluates it as usual.
 * NOT is pushed down to the leaves (negation normal form) so statistics can evaluate it.
 *
 * @param resolve the filterable column of a top-level column name (None: not filterable)
 */
final class PredicateConverter(resolve: String => Option[FilterColumn]) {
  import Conversion._

  def convert(predicate: Predicate): Conversion =
    try convert(predicate, negate = false)
    catch { case e: RuntimeException => Declined(s"unexpected ${e.getClass.getSimpleName}: ${e.getMessage}") }

  private def convert(p: Predicate, negate: Boolean): Conversion = p.name() match {
    case "AND" | "OR" =>
      val l = convert(p.children()(0).asInstanceOf[Predicate], negate)
      val r = convert(p.children()(1).asInstanceOf[Predicate], negate)
      // NOT (a AND b) = NOT a OR NOT b; NOT (a OR b) = NOT a AND NOT b
      val conjunction = (p.name() == "AND") != negate
      (l, r) match {
        case (Converted(a, ca), Converted(b, cb)) =>
          Converted(if (conjunction) Filter.And(a, b) else Filter.Or(a, b), ca && cb)
        case (Converted(a, _), Declined(_)) if conjunction => Converted(a, complete = false)
        case (Declined(_), Converted(b, _)) if conjunction => Converted(b, complete = false)
        case (d: Declined, _) => d
        case (_, d: Declined) => d
      }
    case "NOT" => convert(p.children()(0).asInstanceOf[Predicate], !negate)
    case "ALWAYS_TRUE" => Converted(Filter.Const(!negate), complete = true)
    case "ALWAYS_FALSE" => Converted(Filter.Const(negate), complete = true)
    case "IS_NULL" | "IS_NOT_NULL" =>
      withColumn(p, 0)(c => Converted(Filter.IsNull(c, (p.name() == "IS_NOT_NULL") != negate), complete = true))
    case "=" | "<>" | "<" | "<=" | ">" | ">=" | "<=>" => comparison(p, negate)
    case "IN" =>
      withColumn(p, 0) { c =>
        val literals = p.children().toSeq.drop(1)
        if (!literals.forall(_.isInstanceOf[Literal[_]])) Declined("IN list holds non-literals")
        else {
          val lits = literals.map(_.asInstanceOf[Literal[_]])
          val hasNull = lits.exists(_.value() == null)
          val values = lits.filter(_.value() != null).map(l => literal(c, l))
          if (values.exists(_.isEmpty)) Declined(s"IN list types do not match column ${c.name}")
          else if (negate && hasNull)
            Converted(Filter.Const(false), complete = true) // x NOT IN (.., NULL) is never true
          else Converted(Filter.In(c, values.flatten, negate), complete = true)
        }
      }
    case "STARTS_WITH" =>
      withColumn(p, 0) { c =>
        p.children()(1) match {
          case l: Literal[_] if l.value() == null => Converted(Filter.Const(false), complete = true)
          case l: Literal[_] => literal(c, l) match {
              case Some(s: Value.Str) if c.domain.contains(Domain.StringDomain) =>
                Converted(Filter.StartsWith(c, s, negate), complete = true)
              case _ => Declined(s"STARTS_WITH on non-string column ${c.name}")
            }
          case _ => Declined("STARTS_WITH with a non-literal prefix")
        }
      }
    case other => Declined(s"predicate $other is not evaluated from statistics")
  }

  private def comparison(p: Predicate, negate: Boolean): Conversion = {
    val (left, right) = (p.children()(0), p.children()(1))
    (left, right) match {
      case (r: NamedReference, l: Literal[_]) => comparison(p, negate, r, l, flipped = false)
      case (l: Literal[_], r: NamedReference) => comparison(p, negate, r, l, flipped = true)
      case _ => Declined(s"${p.name()} does not compare a column with a literal")
    }
  }

  private def comparison(
      p: Predicate,
      negate: Boolean,
      ref: NamedReference,
      lit: Literal[_],
      flipped: Boolean): Conversion =
    column(ref) match {
      case Left(reason) => Declined(reason)
      case Right(c) if p.name() == "<=>" =>
        if (lit.value() == null) Converted(Filter.IsNull(c, negated = negate), complete = true)
        else literal(c, lit) match {
          case None => Declined(s"literal type ${lit.dataType().simpleString} does not match column ${c.name}")
          case Some(v) if !negate => Converted(Filter.Compare(CompareOp.Eq, c, v), complete = true)
          case Some(v) => // NOT (c <=> v): c IS NULL OR c <> v
            Converted(
              Filter.Or(Filter.IsNull(c, negated = false), Filter.Compare(CompareOp.NotEq, c, v)),
              complete = true)
        }
      case Right(c) =>
        if (lit.value() == null) Converted(Filter.Const(false), complete = true) // NULL comparison, negated or not
        else literal(c, lit) match {
          case None => Declined(s"literal type ${lit.dataType().simpleString} does not match column ${c.name}")
          case Some(v) =>
            val op0 = CompareOp.fromV2(p.name()).get
            val op1 = if (flipped) op0.flip else op0
            Converted(Filter.Compare(if (negate) op1.negate else op1, c, v), complete = true)
        }
    }

  private def withColumn(p: Predicate, child: Int)(f: FilterColumn => Conversion): Conversion =
    p.children()(child) match {
      case r: NamedReference => column(r).fold(Declined(_), f)
      case other => Declined(s"${p.name()} on expression $other, not a column")
    }

  private def column(ref: NamedReference): Either[String, FilterColumn] = {
    val names = ref.fieldNames()
    if (names.length != 1) Left(s"nested field ${names.mkString(".")} has no statistics")
    else resolve(names(0)).toRight(s"column ${names(0)} is not filterable")
  }

  /** The literal as a value of the column's domain, if its type matches the column's. */
  private def literal(c: FilterColumn, l: Literal[_]): Option[Value] = c.domain.flatMap { domain =>
    (domain, l.value(), l.dataType()) match {
      case (Domain.IntegralDomain, v: Number, ByteType | ShortType | IntegerType | LongType) if integralColumn(c) =>
        Some(Value.Integral(v.longValue()))
      case (Domain.IntegralDomain, v: Integer, DateType) if c.dataType == DateType =>
        Some(Value.Integral(v.longValue()))
      case (Domain.IntegralDomain, v: java.lang.Long, TimestampType) if c.dataType == TimestampType =>
        Some(Value.Integral(v))
      case (Domain.IntegralDomain, v: java.lang.Long, TimestampNTZType) if c.dataType == TimestampNTZType =>
        Some(Value.Integral(v))
      case (Domain.FloatingDomain, v: java.lang.Float, FloatType) => Some(Value.Floating(v.doubleValue()))
      case (Domain.FloatingDomain, v: java.lang.Double, DoubleType) => Some(Value.Floating(v))
      case (Domain.DecimalDomain, v: Decimal, _: DecimalType) => Some(Value.Dec(v.toJavaBigDecimal))
      case (Domain.StringDomain, v: UTF8String, s: StringType) if s == StringType => Some(Value.Str(v.getBytes))
      case (Domain.BooleanDomain, v: java.lang.Boolean, BooleanType) => Some(Value.Bool(v))
      case _ => None
    }
  }

  private def integralColumn(c: FilterColumn): Boolean =
    c.dataType == ByteType || c.dataType == ShortType || c.dataType == IntegerType || c.dataType == LongType
}
