package io.omnitable.spark.optimizer

import io.omnitable.spark.write.OmniTableDeltaOperation
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.plans.{Inner, LeftOuter}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, Join, LogicalPlan, MergeRows, Project, WriteDelta}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.connector.write.RowLevelOperation
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.omnitable.SqlInternals

/**
 * Lets an `UPDATE` of an OmniTable table skip Spark's exchange and sort. Its write asks Spark to
 * cluster the rows by `_ai_fragment_` and sort them by `_ai_row_offset_` (one task rewrites a
 * fragment, in one pass); when the rows reach the write through projections and filters only — no
 * join, aggregate, subquery or other operator that could move rows between tasks or reorder them —
 * each task writes the rows its scan partition read, in the order read. This rule, run before
 * Spark builds the write, tells the statement's operation whether that holds
 * ([[OmniTableDeltaOperation.keepsScanOrder]]); the write then drops the requirement only if the
 * scan also delivers each fragment whole, in offset order, to one task
 * ([[OmniTableDeltaOperation.streamsFragments]]). Other tables, commands and plan shapes keep
 * Spark's plan. Re-evaluated on every pass of the optimizer batch: the last shape seen decides.
 *
 * A `MERGE` qualifies the same way when its target rows reach the write through the streamed
 * side of a broadcast join ([[BroadcastOmniTableMergeSource]]: an inner or left outer join whose
 * source is broadcast) and Spark's `MergeRows` (a row-by-row projection, no insert clauses): a
 * broadcast hash or nested-loop join streams its left side in order, in its partitions.
 */
object KeepOmniTableUpdateOrder extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = {
    plan.foreach {
      case WriteDelta(r: DataSourceV2Relation, _, query, _, _, None) =>
        SqlInternals.rowLevelOperation(r.table) match {
          case Some(op: OmniTableDeltaOperation) if op.command == RowLevelOperation.Command.UPDATE =>
            op.keepsScanOrder(keepsOrder(query, r))
          case Some(op: OmniTableDeltaOperation) if op.command == RowLevelOperation.Command.MERGE =>
            op.keepsScanOrder(query match {
              case m: MergeRows => m.notMatchedInstructions.isEmpty && streamsTarget(m.child, r)
              case _ => false
            })
          case _ =>
        }
      case _ =>
    }
    plan
  }

  /** `query` is projections and filters without subqueries over a read of `target`'s table. */
  private def keepsOrder(query: LogicalPlan, target: DataSourceV2Relation): Boolean = query match {
    case Project(list, child) => !list.exists(SubqueryExpression.hasSubquery) && keepsOrder(child, target)
    case Filter(cond, child) => !SubqueryExpression.hasSubquery(cond) && keepsOrder(child, target)
    case r: DataSourceV2Relation => r.table eq target.table
    case _ => false
  }

  /** `plan` is projections and filters over a join that streams a read of `target` (left) past a broadcast source. */
  private def streamsTarget(plan: LogicalPlan, target: DataSourceV2Relation): Boolean = plan match {
    case Project(list, child) => !list.exists(SubqueryExpression.hasSubquery) && streamsTarget(child, target)
    case Filter(cond, child) => !SubqueryExpression.hasSubquery(cond) && streamsTarget(child, target)
    case j @ Join(left, _, Inner | LeftOuter, cond, _) =>
      BroadcastOmniTableMergeSource.broadcastsSource(j) && !cond.exists(SubqueryExpression.hasSubquery) &&
      keepsOrder(left, target)
    case _ => false
  }
}
