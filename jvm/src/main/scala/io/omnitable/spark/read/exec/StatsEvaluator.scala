package io.omnitable.spark.read.exec

import io.omnitable.spark.catalog.FileColumnStats

/**
 * What is known about one column over a unit of rows (a fragment, or a Parquet row group):
 * bounds of its non-NULL values (None: unknown), its NULL count (None: unknown) and whether
 * NaN may hide outside the bounds (Parquet writers leave NaN out of float statistics).
 */
final case class StatsView(
    min: Option[Value],
    max: Option[Value],
    nullCount: Option[Long],
    rowCount: Long,
    mayHoldNaN: Boolean = false) {

  def allNull: Boolean = nullCount.contains(rowCount)
}

object StatsView {
  def unknown(rows: Long): StatsView = StatsView(None, None, None, rows, mayHoldNaN = true)

  /** A column no file of the fragment carries: every row is NULL. */
  def allNull(rows: Long): StatsView = StatsView(None, None, Some(rows), rows)

  /** A per-fragment constant (batch name, fragment id): exact. */
  def constant(value: Value, rows: Long): StatsView = StatsView(Some(value), Some(value), Some(0L), rows)

  /** Catalog statistics of a file's column, decoded with the column's domain. */
  def fromCatalog(stats: FileColumnStats, rows: Long, domain: Option[Domain]): StatsView = {
    val min = for (d <- domain; t <- stats.min; v <- d.decodeStat(t)) yield v
    val max = for (d <- domain; t <- stats.max; v <- d.decodeStat(t)) yield v
    // docs/catalog.md: float bounds are not kept for files holding NaN, so bounds imply no NaN.
    StatsView(
      min.filter(_ => max.isDefined),
      max.filter(_ => min.isDefined),
      stats.nullCount,
      rows,
      mayHoldNaN = min.isEmpty || max.isEmpty)
  }
}

/**
 * Decides from statistics whether any row of a unit might satisfy a [[Filter]]. Answers
 * `false` only when the statistics prove that no row does (under Spark's semantics: NULL never
 * satisfies a comparison, NaN is above every number and equal to itself, strings compare by
 * UTF-8 bytes). For per-fragment constants the answer is exact.
 */
object StatsEvaluator {

  def mightMatch(filter: Filter, stats: FilterColumn => StatsView): Boolean = filter match {
    case Filter.Const(b) => b
    case Filter.And(l, r) => mightMatch(l, stats) && mightMatch(r, stats)
    case Filter.Or(l, r) => mightMatch(l, stats) || mightMatch(r, stats)
    case Filter.IsNull(c, negated) =>
      val s = stats(c)
      s.rowCount > 0 && (if (negated) !s.allNull else s.nullCount.forall(_ > 0))
    case Filter.Compare(op, c, v) => nonNull(stats(c)).exists(s => compare(op, c, v, s))
    case Filter.In(c, values, false) =>
      nonNull(stats(c)).exists(s => values.exists(v => compare(CompareOp.Eq, c, v, s)))
    case Filter.In(c, values, true) => nonNull(stats(c)).exists { s =>
        s.mayHoldNaN && isFloating(c) ||
        !(bounded(s) && eq(c, s.min.get, s.max.get) && values.exists(eq(c, _, s.min.get)))
      }
    case Filter.StartsWith(c, prefix, negated) => nonNull(stats(c)).exists { s =>
        (s.min, s.max) match {
          case (Some(lo: Value.Str), Some(hi: Value.Str)) =>
            if (negated) !(startsWith(lo, prefix) && startsWith(hi, prefix))
            else !(cmp(c, hi, prefix).exists(_ < 0) || (cmp(c, lo, prefix).exists(_ > 0) && !startsWith(lo, prefix)))
          case _ => true
        }
      }
  }

  /**
   * Whether the statistics prove that every row of the unit satisfies `filter` (the dual of
   * [[mightMatch]]; `false` whenever they do not prove it): a comparison needs known bounds, no
   * NULL and, for floating columns, no NaN. For per-fragment constants the answer is exact.
   */
  def mustMatch(filter: Filter, stats: FilterColumn => StatsView): Boolean = filter match {
    case Filter.Const(b) => b
    case Filter.And(l, r) => mustMatch(l, stats) && mustMatch(r, stats)
    case Filter.Or(l, r) => mustMatch(l, stats) || mustMatch(r, stats)
    case Filter.IsNull(c, negated) =>
      val s = stats(c)
      if (negated) s.nullCount.contains(0L) else s.allNull
    case Filter.Compare(op, c, v) => provable(c, stats(c)).exists(s => always(op, c, v, s))
    case Filter.In(c, values, false) =>
      provable(c, stats(c)).exists(s => values.exists(v => always(CompareOp.Eq, c, v, s)))
    case _ => false
  }

  /** The view when its bounds hold for every row: known bounds, no NULL, no NaN. */
  private def provable(c: FilterColumn, s: StatsView): Option[StatsView] =
    Some(s).filter(s => bounded(s) && s.nullCount.contains(0L) && !(s.mayHoldNaN && isFloating(c)))

  /** Every value in `[s.min, s.max]` satisfies `op v` (NaN literals never proven). */
  private def always(op: CompareOp, c: FilterColumn, v: Value, s: StatsView): Boolean = {
    val nan = v match { case Value.Floating(d) => d.isNaN; case _ => false }
    def is(x: Option[Int])(p: Int => Boolean): Boolean = x.exists(p) // incomparable: not proven
    !nan &&
    (op match {
      case CompareOp.Eq => is(cmp(c, s.min.get, v))(_ == 0) && is(cmp(c, s.max.get, v))(_ == 0)
      case CompareOp.NotEq => is(cmp(c, s.max.get, v))(_ < 0) || is(cmp(c, s.min.get, v))(_ > 0)
      case CompareOp.Lt => is(cmp(c, s.max.get, v))(_ < 0)
      case CompareOp.LtEq => is(cmp(c, s.max.get, v))(_ <= 0)
      case CompareOp.Gt => is(cmp(c, s.min.get, v))(_ > 0)
      case CompareOp.GtEq => is(cmp(c, s.min.get, v))(_ >= 0)
    })
  }

  /** None when no row can hold a non-NULL value (so no comparison can be true), else the view. */
  private def nonNull(s: StatsView): Option[StatsView] =
    if (s.rowCount == 0 || s.allNull) None else Some(s)

  private def bounded(s: StatsView): Boolean = s.min.isDefined && s.max.isDefined

  private def isFloating(c: FilterColumn): Boolean = c.domain.contains(Domain.FloatingDomain)

  private def cmp(c: FilterColumn, a: Value, b: Value): Option[Int] = c.domain.flatMap(_.compare(a, b))

  private def eq(c: FilterColumn, a: Value, b: Value): Boolean = cmp(c, a, b).contains(0)

  private def compare(op: CompareOp, c: FilterColumn, v: Value, s: StatsView): Boolean = {
    val literalIsNaN = v match { case Value.Floating(d) => d.isNaN; case _ => false }
    if (s.mayHoldNaN && isFloating(c)) {
      // A NaN row satisfies > and <> (non-NaN literal), >= (always), = and <= (NaN literal).
      val nanSatisfies = op match {
        case CompareOp.Gt | CompareOp.NotEq => !literalIsNaN
        case CompareOp.GtEq => true
        case CompareOp.Eq | CompareOp.LtEq => literalIsNaN
        case CompareOp.Lt => false
      }
      if (nanSatisfies) return true
    }
    if (!bounded(s)) return true
    val lo = s.min.get
    val hi = s.max.get
    def ok(x: Option[Int])(p: Int => Boolean): Boolean = x.forall(p) // incomparable: assume a match
    op match {
      case CompareOp.Eq => ok(cmp(c, lo, v))(_ <= 0) && ok(cmp(c, hi, v))(_ >= 0)
      case CompareOp.NotEq => !(eq(c, lo, v) && eq(c, hi, v))
      case CompareOp.Lt => ok(cmp(c, lo, v))(_ < 0)
      case CompareOp.LtEq => ok(cmp(c, lo, v))(_ <= 0)
      case CompareOp.Gt => ok(cmp(c, hi, v))(_ > 0)
      case CompareOp.GtEq => ok(cmp(c, hi, v))(_ >= 0)
    }
  }

  private def startsWith(s: Value.Str, prefix: Value.Str): Boolean =
    s.bytes.length >= prefix.bytes.length &&
      java.util.Arrays.equals(s.bytes, 0, prefix.bytes.length, prefix.bytes, 0, prefix.bytes.length)
}
