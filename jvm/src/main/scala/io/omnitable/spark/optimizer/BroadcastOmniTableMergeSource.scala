package io.omnitable.spark.optimizer

import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.write.OmniTableDeltaOperation
import org.apache.spark.sql.catalyst.expressions.SubqueryExpression
import org.apache.spark.sql.catalyst.plans.{Inner, LeftOuter}
import org.apache.spark.sql.catalyst.plans.logical.{
  BROADCAST,
  Filter,
  HintInfo,
  Join,
  LogicalPlan,
  MergeRows,
  Project,
  WriteDelta
}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.connector.write.RowLevelOperation
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.omnitable.SqlInternals

/**
 * Lets a `MERGE INTO` an OmniTable table that only updates and deletes target rows (`WHEN MATCHED`
 * and `WHEN NOT MATCHED BY SOURCE` clauses: Spark joins the target with the source by an inner or
 * left outer join, the target streamed either way) broadcast its source: when the source's size
 * estimate is at most `spark.omnitable.optimizer.merge_broadcast_bytes` and the source is
 * deterministic, the join is hinted as a broadcast of the source (the build side), so the target
 * scan keeps its partitioning and order through the join and [[KeepOmniTableUpdateOrder]] can
 * drop the write's exchange and sort. Spark's own hint on the target (no broadcast, no
 * replication: its cardinality check needs every match of a target row in one task) stays, and
 * holds: a streamed target row meets all its matches in the task that reads it. A MERGE with
 * `WHEN NOT MATCHED … INSERT` clauses (a right or full outer join) keeps Spark's plan, as do
 * other tables and sources over the bound.
 */
object BroadcastOmniTableMergeSource extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = {
    val bound = OmniTableConf.fromSQLConf().mergeBroadcastBytes
    if (bound <= 0) return plan
    plan.transformDown {
      case w @ WriteDelta(r: DataSourceV2Relation, _, m: MergeRows, _, _, None) if isOmniTableMerge(r) =>
        w.copy(query = m.withNewChildren(Seq(hinted(m.child, bound))))
    }
  }

  private def isOmniTableMerge(r: DataSourceV2Relation): Boolean = SqlInternals.rowLevelOperation(r.table) match {
    case Some(op: OmniTableDeltaOperation) => op.command == RowLevelOperation.Command.MERGE
    case _ => false
  }

  /** `plan` (projections and filters over the MERGE's join) with the join's source broadcast, if it may be. */
  private def hinted(plan: LogicalPlan, bound: Long): LogicalPlan = plan match {
    case p @ Project(_, child) => p.copy(child = hinted(child, bound))
    case f @ Filter(_, child) => f.copy(child = hinted(child, bound))
    case j @ Join(_, source, Inner | LeftOuter, _, hint)
        if hint.rightHint.flatMap(_.strategy).isEmpty && deterministic(source) &&
          source.stats.sizeInBytes <= BigInt(bound) =>
      val right = hint.rightHint.getOrElse(HintInfo()).copy(strategy = Some(BROADCAST))
      j.copy(hint = hint.copy(rightHint = Some(right)))
    case other => other
  }

  /** No expression of `plan` is non-deterministic or a subquery (evaluated as Spark's plan would). */
  private def deterministic(plan: LogicalPlan): Boolean =
    !plan.exists(_.expressions.exists(e => !e.deterministic || SubqueryExpression.hasSubquery(e)))

  /** The source side of a MERGE's join was hinted by this rule (or the user) as broadcast. */
  private[optimizer] def broadcastsSource(j: Join): Boolean =
    j.hint.rightHint.flatMap(_.strategy).contains(BROADCAST)
}
