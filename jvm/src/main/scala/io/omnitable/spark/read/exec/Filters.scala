package io.omnitable.spark.read.exec

import java.nio.charset.StandardCharsets

import org.apache.spark.sql.types._

/**
 * OmniTable's own small predicate language: what the one converter ([[PredicateConverter]])
 * turns Spark's V2 predicates into, in negation normal form (no NOT). It is evaluated against
 * statistics ("might any row match?") by [[StatsEvaluator]] — on the driver with catalog
 * statistics (fragment pruning), on executors with Parquet row-group statistics (row-range
 * pruning). Serializable: executors receive it inside the reader factory.
 */
sealed trait Filter extends Serializable {
  def columns: Seq[FilterColumn]
}

object Filter {
  final case class Compare(op: CompareOp, column: FilterColumn, value: Value) extends Filter {
    def columns: Seq[FilterColumn] = Seq(column)
  }

  /** `column IN (values)` (`negated`: NOT IN). A NULL in the list was already handled. */
  final case class In(column: FilterColumn, values: Seq[Value], negated: Boolean) extends Filter {
    def columns: Seq[FilterColumn] = Seq(column)
  }
  final case class IsNull(column: FilterColumn, negated: Boolean) extends Filter {
    def columns: Seq[FilterColumn] = Seq(column)
  }
  final case class StartsWith(column: FilterColumn, prefix: Value.Str, negated: Boolean) extends Filter {
    def columns: Seq[FilterColumn] = Seq(column)
  }
  final case class And(left: Filter, right: Filter) extends Filter {
    def columns: Seq[FilterColumn] = left.columns ++ right.columns
  }
  final case class Or(left: Filter, right: Filter) extends Filter {
    def columns: Seq[FilterColumn] = left.columns ++ right.columns
  }
  final case class Const(value: Boolean) extends Filter {
    def columns: Seq[FilterColumn] = Nil
  }

  def and(filters: Seq[Filter]): Filter = filters.reduceOption(And(_, _)).getOrElse(Const(true))
}

sealed trait CompareOp extends Serializable {
  def symbol: String

  /** The same comparison with its operands swapped (`5 < c` is `c > 5`). */
  def flip: CompareOp

  /** The comparison true exactly where this one is false, for non-NULL operands. */
  def negate: CompareOp
}

object CompareOp {
  case object Eq extends CompareOp { val symbol = "="; def flip: CompareOp = Eq; def negate: CompareOp = NotEq }
  case object NotEq extends CompareOp { val symbol = "<>"; def flip: CompareOp = NotEq; def negate: CompareOp = Eq }
  case object Lt extends CompareOp { val symbol = "<"; def flip: CompareOp = Gt; def negate: CompareOp = GtEq }
  case object LtEq extends CompareOp { val symbol = "<="; def flip: CompareOp = GtEq; def negate: CompareOp = Gt }
  case object Gt extends CompareOp { val symbol = ">"; def flip: CompareOp = Lt; def negate: CompareOp = LtEq }
  case object GtEq extends CompareOp { val symbol = ">="; def flip: CompareOp = LtEq; def negate: CompareOp = Lt }

  def fromV2(name: String): Option[CompareOp] = name match {
    case "=" => Some(Eq)
    case "<>" => Some(NotEq)
    case "<" => Some(Lt)
    case "<=" => Some(LtEq)
    case ">" => Some(Gt)
    case ">=" => Some(GtEq)
    case _ => None
  }
}

/**
 * A column a filter reads. `kind` says where its values come from: a data column (stored in
 * files, statistics per file and row group) or a per-fragment constant (batch name, fragment
 * id), whose "statistics" are exact. `domain` is None for types without min/max (binary,
 * nested): only null tests are pushed for those.
 */
final case class FilterColumn(
    name: String,
    kind: FilterColumn.Kind,
    columnId: Int,
    physicalName: String,
    dataType: DataType) {

  def domain: Option[Domain] = Domain.of(dataType)
}

object FilterColumn {
  sealed trait Kind extends Serializable
  case object Data extends Kind
  case object BatchName extends Kind
  case object FragmentId extends Kind
}

/** A comparable value of one [[Domain]]. */
sealed trait Value extends Serializable

object Value {

  /** tinyint..bigint, date (days), timestamp and timestamp_ntz (microseconds). */
  final case class Integral(v: Long) extends Value
  final case class Floating(v: Double) extends Value
  final case class Dec(v: java.math.BigDecimal) extends Value

  /** Strings compare by their UTF-8 bytes, unsigned (Spark's binary collation, the stats order). */
  final case class Str(bytes: Array[Byte]) extends Value {
    override def equals(o: Any): Boolean = o match {
      case Str(b) => java.util.Arrays.equals(bytes, b)
      case _ => false
    }
    override def hashCode(): Int = java.util.Arrays.hashCode(bytes)
    override def toString: String = "'" + new String(bytes, StandardCharsets.UTF_8) + "'"
  }
  final case class Bool(v: Boolean) extends Value

  def str(s: String): Str = Str(s.getBytes(StandardCharsets.UTF_8))
}

/** How values of a logical type compare, and how its catalog statistics are decoded. */
sealed trait Domain extends Serializable {

  /** Total order of two values of this domain, or None if they cannot be compared. */
  def compare(a: Value, b: Value): Option[Int]

  /** Decodes a `min_value` / `max_value` of docs/catalog.md's encoding. */
  def decodeStat(text: String): Option[Value]
}

object Domain {

  case object IntegralDomain extends Domain {
    def compare(a: Value, b: Value): Option[Int] = (a, b) match {
      case (Value.Integral(x), Value.Integral(y)) => Some(java.lang.Long.compare(x, y))
      case _ => None
    }
    def decodeStat(text: String): Option[Value] = text.trim.toLongOption.map(Value.Integral)
  }

  /** Spark orders NaN above every other value and treats -0.0 as equal to 0.0. */
  case object FloatingDomain extends Domain {
    def compare(a: Value, b: Value): Option[Int] = (a, b) match {
      case (Value.Floating(x), Value.Floating(y)) =>
        if (x.isNaN || y.isNaN) Some(java.lang.Boolean.compare(x.isNaN, y.isNaN))
        else Some(if (x < y) -1 else if (x > y) 1 else 0)
      case _ => None
    }
    def decodeStat(text: String): Option[Value] = text.trim match {
      case "Infinity" | "inf" => Some(Value.Floating(Double.PositiveInfinity))
      case "-Infinity" | "-inf" => Some(Value.Floating(Double.NegativeInfinity))
      case t => t.toDoubleOption.filterNot(_.isNaN).map(Value.Floating)
    }
  }

  case object DecimalDomain extends Domain {
    def compare(a: Value, b: Value): Option[Int] = (a, b) match {
      case (Value.Dec(x), Value.Dec(y)) => Some(x.compareTo(y))
      case _ => None
    }
    def decodeStat(text: String): Option[Value] =
      try Some(Value.Dec(new java.math.BigDecimal(text.trim)))
      catch { case _: NumberFormatException => None }
  }

  case object StringDomain extends Domain {
    def compare(a: Value, b: Value): Option[Int] = (a, b) match {
      case (Value.Str(x), Value.Str(y)) => Some(java.util.Arrays.compareUnsigned(x, y))
      case _ => None
    }
    def decodeStat(text: String): Option[Value] = Some(Value.str(text))
  }

  case object BooleanDomain extends Domain {
    def compare(a: Value, b: Value): Option[Int] = (a, b) match {
      case (Value.Bool(x), Value.Bool(y)) => Some(java.lang.Boolean.compare(x, y))
      case _ => None
    }
    def decodeStat(text: String): Option[Value] = text.trim match {
      case "true" => Some(Value.Bool(true))
      case "false" => Some(Value.Bool(false))
      case _ => None
    }
  }

  /** The domain of a logical type, None where no statistics are kept (binary, nested, ...). */
  def of(dataType: DataType): Option[Domain] = dataType match {
    case ByteType | ShortType | IntegerType | LongType | DateType | TimestampType | TimestampNTZType =>
      Some(IntegralDomain)
    case FloatType | DoubleType => Some(FloatingDomain)
    case _: DecimalType => Some(DecimalDomain)
    case s: StringType if s == StringType => Some(StringDomain) // binary collation only
    case BooleanType => Some(BooleanDomain)
    case _ => None
  }
}
