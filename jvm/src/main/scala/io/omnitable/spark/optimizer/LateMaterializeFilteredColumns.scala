package io.omnitable.spark.optimizer

import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.optimizer.OmniTableRelations.Read
import io.omnitable.spark.read.plan.OptimizerMarks
import org.apache.spark.sql.catalyst.expressions.{
  And,
  AttributeReference,
  BinaryComparison,
  Cast,
  Contains,
  EndsWith,
  Expression,
  In,
  InSet,
  IsNotNull,
  IsNull,
  Literal,
  Not,
  Or,
  PredicateHelper,
  StartsWith
}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreePattern.FILTER

/**
 * Late materialization (DESIGN.md §6): a selective filter on narrow columns over a read of
 * wide payload columns reads the filter's columns first and the payload only for the rows that
 * pass — only the Parquet pages holding them are fetched and only those rows decoded.
 *
 * Matches `Filter(cond, relation)` over an omnitable relation. Picks the conjuncts of `cond`
 * the scan can evaluate exactly as Spark would and without any risk of failing: comparisons,
 * `IN`, `IS [NOT] NULL`, `STARTS_WITH`/`ENDS_WITH`/`CONTAINS` between a column (or a widening
 * cast of one) and literals, combined with AND/OR/NOT, on flat columns. It marks the relation
 * (its table's [[OptimizerMarks.lateMaterialization]]) with them; the Filter stays, so Spark
 * still checks every row the scan returns.
 *
 * The scan then decides (EXPLAIN: `LateMaterializeFilteredColumns: on (...)` or `off (why)`):
 * it applies only conjuncts Spark actually pushed into it (so the filter is known to sit
 * directly on the scan), only when other stored columns are read and their files are larger
 * than the predicate columns' files, and only when catalog statistics estimate that the filter
 * keeps at most `spark.omnitable.optimizer.late_materialization_max_selectivity` of the rows.
 *
 * Backs off for: any non-deterministic conjunct (evaluating part of the filter early would
 * change which rows a random filter sees), conjuncts with subqueries, UDFs or anything that
 * could raise an error, nested columns. Turned off by
 * `spark.omnitable.optimizer.late_materialization=false`.
 */
object LateMaterializeFilteredColumns extends Rule[LogicalPlan] with PredicateHelper {

  override val ruleName: String = "LateMaterializeFilteredColumns"

  override def apply(plan: LogicalPlan): LogicalPlan =
    if (!OmniTableConf.fromSQLConf().lateMaterialization) plan
    else plan.transformWithPruning(_.containsPattern(FILTER)) {
      case f @ Filter(cond, Read(rel, table)) if table.marks.lateMaterialization.isEmpty && cond.deterministic =>
        val conjuncts = splitConjunctivePredicates(cond).filter(c => simple(c) && c.references.nonEmpty)
        if (conjuncts.isEmpty) f
        else {
          val marked = rel.copy(table = table.withMarks(table.marks.copy(lateMaterialization = Some(conjuncts))))
          marked.setTagValue(OptimizerMarks.FiredRules, Seq(ruleName))
          f.copy(child = marked)
        }
    }

  /** A predicate the scan can evaluate like Spark, that can neither fail nor depend on context. */
  private[optimizer] def simple(e: Expression): Boolean = e match {
    case And(l, r) => simple(l) && simple(r)
    case Or(l, r) => simple(l) && simple(r)
    case Not(c) => simple(c)
    case IsNull(v) => value(v)
    case IsNotNull(v) => value(v)
    case b: BinaryComparison => (value(b.left) && literal(b.right)) || (literal(b.left) && value(b.right))
    case In(v, list) => value(v) && list.forall(literal)
    case InSet(v, _) => value(v)
    case StartsWith(v, p) => value(v) && literal(p)
    case EndsWith(v, p) => value(v) && literal(p)
    case Contains(v, p) => value(v) && literal(p)
    case _ => false
  }

  private def value(e: Expression): Boolean = e match {
    case _: AttributeReference => true
    case c: Cast => c.child.isInstanceOf[AttributeReference] && Cast.canUpCast(c.child.dataType, c.dataType)
    case _ => false
  }

  private def literal(e: Expression): Boolean = e.isInstanceOf[Literal]
}
