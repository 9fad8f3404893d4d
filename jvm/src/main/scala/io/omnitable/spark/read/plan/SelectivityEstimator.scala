package io.omnitable.spark.read.plan

import io.omnitable.spark.read.exec.{CompareOp, Filter, FilterColumn, StatsEvaluator, StatsView, Value}

/**
 * Estimates which fraction of a unit's rows (a fragment) pass a [[Filter]], from the same
 * statistics [[StatsEvaluator]] uses: exact where statistics prove no row matches or give NULL
 * counts, uniform interpolation between min and max for range comparisons on numbers and
 * temporal values, fixed guesses elsewhere. Conjuncts are taken as independent. Used to decide
 * whether late materialization pays; never to decide results.
 */
object SelectivityEstimator {

  /** Guessed fraction for `=` when min/max cannot say more (and for each `IN` value). */
  val EqualityGuess = 0.05

  /** Guessed fraction for comparisons statistics cannot interpolate (strings, unknown bounds). */
  val RangeGuess = 1.0 / 3

  val PrefixGuess = 0.1

  def estimate(filter: Filter, stats: FilterColumn => StatsView): Double =
    if (!StatsEvaluator.mightMatch(filter, stats)) 0.0
    else
      filter match {
        case Filter.Const(v) => if (v) 1.0 else 0.0
        case Filter.And(l, r) => estimate(l, stats) * estimate(r, stats)
        case Filter.Or(l, r) =>
          val (a, b) = (estimate(l, stats), estimate(r, stats))
          a + b - a * b
        case Filter.IsNull(c, negated) =>
          val f = nullFraction(stats(c)).getOrElse(0.1)
          if (negated) 1 - f else f
        case Filter.Compare(op, c, v) => nonNull(stats(c)) * compare(op, v, stats(c))
        case Filter.In(c, values, negated) =>
          val f = math.min(1.0, values.map(v => compare(CompareOp.Eq, v, stats(c))).sum)
          nonNull(stats(c)) * (if (negated) 1 - f else f)
        case Filter.StartsWith(c, _, negated) => nonNull(stats(c)) * (if (negated) 1 - PrefixGuess else PrefixGuess)
      }

  private def nullFraction(s: StatsView): Option[Double] =
    s.nullCount.map(n => if (s.rowCount == 0) 0.0 else n.toDouble / s.rowCount)

  private def nonNull(s: StatsView): Double = 1 - nullFraction(s).getOrElse(0.0)

  private def number(v: Value): Option[Double] = v match {
    case Value.Integral(x) => Some(x.toDouble)
    case Value.Floating(x) if !x.isNaN && !x.isInfinite => Some(x)
    case Value.Dec(x) => Some(x.doubleValue())
    case _ => None
  }

  /** Fraction of the non-NULL rows for which `column op v` holds. */
  private def compare(op: CompareOp, v: Value, s: StatsView): Double = {
    val bounds = for (lo <- s.min.flatMap(number); hi <- s.max.flatMap(number); x <- number(v)) yield (lo, hi, x)
    val integral = s.min.exists(_.isInstanceOf[Value.Integral])
    def clamp(f: Double) = math.max(0.0, math.min(1.0, f))
    bounds match {
      case Some((lo, hi, _)) if hi <= lo => if (op == CompareOp.NotEq) 0.0 else 1.0 // a constant that might match
      case Some((lo, hi, x)) =>
        val eq = if (integral) 1.0 / (hi - lo + 1) else EqualityGuess
        op match {
          case CompareOp.Eq => eq
          case CompareOp.NotEq => 1 - eq
          case CompareOp.Lt | CompareOp.LtEq => clamp((x - lo) / (hi - lo))
          case CompareOp.Gt | CompareOp.GtEq => clamp((hi - x) / (hi - lo))
        }
      case None =>
        op match {
          case CompareOp.Eq => EqualityGuess
          case CompareOp.NotEq => 1 - EqualityGuess
          case _ => RangeGuess
        }
    }
  }
}
