package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.write.OmniTableDeltaOperation
import org.apache.spark.sql.catalyst.ProjectingInternalRow
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, ExprId, Literal, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, Project, WriteDelta}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.connector.write.RowLevelOperation
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.omnitable.SqlInternals

/**
 * Makes an `UPDATE` of an OmniTable table column-only. Spark rewrites `UPDATE t SET quality = …`
 * into a `WriteDelta` whose rows carry every column: the assigned ones computed, the others the
 * row's own values (the target's attributes, unchanged). This rule, run before Spark pushes
 * projections into scans and builds the write, finds the user columns whose value is not the
 * target's own attribute (the assigned ones), tells the statement's operation
 * ([[OmniTableDeltaOperation.assignColumns]]: the write then rewrites only their files), and
 * replaces the unchanged ones in the row projection by NULL, so the scan no longer reads them and
 * they leave the statement's read set. System columns stay (the writer checks they are unchanged).
 * Backs off for other tables and commands, a plan not of this shape, or an UPDATE assigning
 * nothing that changes (`SET x = x`: every column is written, as without the extension). Runs
 * once per statement: the operation remembers the columns.
 */
object WriteOnlyAssignedColumns extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.transformDown {
    case wd @ WriteDelta(r: DataSourceV2Relation, _, p: Project, original, projections, None) =>
      (SqlInternals.rowLevelOperation(r.table), projections.rowProjection) match {
        case (Some(op: OmniTableDeltaOperation), Some(rows))
            if op.command == RowLevelOperation.Command.UPDATE && op.assignedColumns.isEmpty =>
          prune(wd, p, op, rows, original.output.map(_.exprId).toSet)
        case _ => wd
      }
  }

  private def prune(
      wd: WriteDelta,
      p: Project,
      op: OmniTableDeltaOperation,
      rows: ProjectingInternalRow,
      targetIds: Set[ExprId]): LogicalPlan = {
    val user = rows.schema.fieldNames.toSeq.zip(rows.colOrdinals.map(_.asInstanceOf[Int]))
      .filterNot { case (name, _) => name == SystemColumns.RowId || name == SystemColumns.AppendName }
    val (unchanged, assigned) = user.partition { case (name, at) => isOwnValue(p.projectList(at), name, targetIds) }
    if (assigned.isEmpty) return wd
    op.assignColumns(assigned.map(_._1).toSet)
    val nulled = unchanged.map(_._2).toSet
    val list = p.projectList.zipWithIndex.map { case (e, i) =>
      if (nulled.contains(i)) Alias(Literal(null, e.dataType), e.name)() else e
    }
    wd.copy(query = p.copy(projectList = list))
  }

  /** The column `name`'s output is the target row's own value of `name`. */
  private def isOwnValue(e: NamedExpression, name: String, targetIds: Set[ExprId]): Boolean = e match {
    case a: Attribute => targetIds.contains(a.exprId) && a.name.equalsIgnoreCase(name)
    case Alias(a: Attribute, _) => targetIds.contains(a.exprId) && a.name.equalsIgnoreCase(name)
    case _ => false
  }
}
