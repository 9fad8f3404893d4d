package io.omnitable.spark.optimizer

import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.analysis.{AssignmentUtils, EliminateSubqueryAliases}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UpdateTable}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Matches a resolved `UPDATE` of an OmniTable table whose assignments are not aligned with the
 * table's columns yet and aligns them (every column gets an assignment, unassigned ones keep their
 * value), as Spark's own ResolveRowLevelCommandAssignments does for tables that do not accept any
 * schema. OmniTable tables accept any schema (appends match written columns by name), so Spark
 * skips that step for them and would then refuse the UPDATE instead of rewriting it into a
 * row-level operation. Backs off while the plan is unresolved or for other tables.
 */
object AlignOmniTableUpdateAssignments extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case u: UpdateTable if u.resolved && !u.aligned && isOmniTable(u.table) =>
      u.copy(assignments = AssignmentUtils.alignUpdateAssignments(u.table.output, u.assignments, false, false))
  }

  private def isOmniTable(table: LogicalPlan): Boolean = EliminateSubqueryAliases(table) match {
    case r: DataSourceV2Relation => r.table.isInstanceOf[OmniTableTable]
    case _ => false
  }
}
