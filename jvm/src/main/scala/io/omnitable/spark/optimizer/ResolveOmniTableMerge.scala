package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.errors.UpdateErrors
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.analysis.{AssignmentUtils, EliminateSubqueryAliases, UnresolvedAttribute}
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, Expression}
import org.apache.spark.sql.catalyst.plans.logical.{
  Assignment,
  DeleteAction,
  LogicalPlan,
  MergeAction,
  MergeIntoTable,
  UpdateAction
}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Resolves a `MERGE INTO` an OmniTable table of the supported forms (only `WHEN MATCHED [AND c]
 * THEN UPDATE SET … | DELETE` clauses, see [[RefuseOmniTableMerge]]) as Spark's ResolveReferences
 * and ResolveRowLevelCommandAssignments do for tables that do not accept any schema: the ON
 * condition, clause conditions and assigned values against the target and the source, the
 * assigned columns against the target; then aligns each UPDATE's assignments with the target's
 * columns (unassigned ones keep their value); an assigned system column fails the statement
 * (`Table.update` refuses them too). OmniTable tables accept any schema, so Spark leaves
 * both steps to the source; once done, Spark's RewriteMergeIntoTable rewrites the statement into
 * a row-level operation ([[io.omnitable.spark.write.OmniTableDeltaOperation]]). Names left
 * unresolved stay so, and Spark reports them. Backs off for other tables and other forms.
 */
object ResolveOmniTableMerge extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case m: MergeIntoTable
        if m.targetTable.resolved && m.sourceTable.resolved && supported(m) && isOmniTable(m.targetTable) =>
      if (!m.resolved) resolve(m)
      else if (!m.aligned) {
        refuseSystemColumns(m)
        m.copy(matchedActions = m.matchedActions.map(align(m.targetTable, _)))
      } else m
  }

  /** An UPDATE clause assigning `_ai_unique_id_` or `_ai_append_name_` fails, as `Table.update` does. */
  private def refuseSystemColumns(m: MergeIntoTable): Unit = m.matchedActions.foreach {
    case u: UpdateAction =>
      u.assignments.map(_.key).collectFirst {
        case a: Attribute if a.name.equalsIgnoreCase(SystemColumns.RowId) => SystemColumns.RowId
        case a: Attribute if a.name.equalsIgnoreCase(SystemColumns.AppendName) => SystemColumns.AppendName
      }.foreach { name =>
        val table = EliminateSubqueryAliases(m.targetTable) match {
          case r: DataSourceV2Relation => r.table.name()
          case other => other.nodeName
        }
        throw UpdateErrors.systemColumn(table, name)
      }
    case _ =>
  }

  /** Only matched UPDATE (not `SET *`) and DELETE clauses: the forms the write supports. */
  private[optimizer] def supported(m: MergeIntoTable): Boolean =
    m.notMatchedActions.isEmpty && m.notMatchedBySourceActions.isEmpty && m.matchedActions.forall {
      case _: DeleteAction => true
      case u: UpdateAction => !u.fromStar
      case _ => false
    }

  private[optimizer] def isOmniTable(table: LogicalPlan): Boolean = EliminateSubqueryAliases(table) match {
    case r: DataSourceV2Relation => r.table.isInstanceOf[OmniTableTable]
    case _ => false
  }

  private def resolve(m: MergeIntoTable): MergeIntoTable = {
    val both = (e: Expression) => resolveIn(e, parts => m.resolveChildren(parts, conf.resolver))
    val target = (e: Expression) => resolveIn(e, parts => m.targetTable.resolve(parts, conf.resolver))
    val actions = m.matchedActions.map {
      case DeleteAction(cond) => DeleteAction(cond.map(both))
      case u: UpdateAction =>
        u.copy(
          condition = u.condition.map(both),
          assignments = u.assignments.map(a => Assignment(target(a.key), both(a.value))))
      case other => other
    }
    m.copy(mergeCondition = both(m.mergeCondition), matchedActions = actions)
  }

  /** `e` with its unresolved column names resolved by `lookup` (a nested field: its extraction). */
  private def resolveIn(e: Expression, lookup: Seq[String] => Option[Expression]): Expression = e.transformUp {
    case u: UnresolvedAttribute =>
      lookup(u.nameParts).map {
        case Alias(child, _) => child
        case other => other
      }.getOrElse(u)
  }

  private def align(target: LogicalPlan, action: MergeAction): MergeAction = action match {
    case u: UpdateAction if u.resolved =>
      u.copy(assignments = AssignmentUtils.alignUpdateAssignments(target.output, u.assignments, false, false))
    case other => other
  }
}
