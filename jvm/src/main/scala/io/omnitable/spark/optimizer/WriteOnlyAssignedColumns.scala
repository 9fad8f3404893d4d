package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.write.OmniTableDeltaOperation
import org.apache.spark.sql.catalyst.ProjectingInternalRow
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, ExprId, Literal, NamedExpression}
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, MergeRows, Project, WriteDelta}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.connector.write.RowLevelOperation
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.omnitable.SqlInternals

/**
 * Makes an `UPDATE` (and a `MERGE … WHEN MATCHED THEN UPDATE`, see `pruneMerge`) of an
 * OmniTable table column-only. Spark rewrites `UPDATE t SET quality = …`
 * into a `WriteDelta` whose rows carry every column: the assigned ones computed, the others the
 * row's own values (the target's attributes, unchanged). This rule, run before Spark pushes
 * projections into scans and builds the write, finds the user columns whose value is not the
 * target's own attribute (the assigned ones), tells the statement's operation
 * ([[OmniTableDeltaOperation.assignColumns]]: the write then rewrites only their files), and
 * replaces the unchanged ones in the row projection by NULL, so the scan no longer reads them and
 * they leave the statement's read set. `_ai_unique_id_` stays (the row id; the writer checks it is
 * unchanged); `_ai_append_name_` is NULLed too when every UPDATE writes the target row's own value
 * ([[OmniTableDeltaOperation.keepAppendName]]: the writer skips its check), else it stays and the
 * writer refuses a changed value.
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
    case wd @ WriteDelta(r: DataSourceV2Relation, _, m: MergeRows, original, projections, None) =>
      (SqlInternals.rowLevelOperation(r.table), projections.rowProjection) match {
        case (Some(op: OmniTableDeltaOperation), Some(rows))
            if op.command == RowLevelOperation.Command.MERGE && op.assignedColumns.isEmpty =>
          pruneMerge(wd, m, op, rows, original.output.map(_.exprId).toSet)
        case _ => wd
      }
  }

  /**
   * The MERGE form (`MergeRows` under the write, one instruction per WHEN MATCHED and WHEN NOT
   * MATCHED BY SOURCE clause): a user column is unchanged when its output is the target row's own
   * value in every UPDATE instruction (DELETE instructions write no values; a MERGE that only deletes writes none).
   * `WHEN NOT MATCHED … INSERT` instructions keep their values (their rows become the new batch,
   * [[OmniTableDeltaOperation.insertRows]]). Backs off when an instruction re-inserts rows (an
   * assigned row id: Spark splits the row). The unchanged
   * columns are NULLed in the UPDATE instructions and a projection of what `MergeRows` references
   * goes under it, so the target scan no longer reads them.
   */
  private def pruneMerge(
      wd: WriteDelta,
      m: MergeRows,
      op: OmniTableDeltaOperation,
      rows: ProjectingInternalRow,
      targetIds: Set[ExprId]): LogicalPlan = {
    // a clause whose condition is literally false never applies (a keyed MERGE that only inserts
    // carries one, ResolveOmniTableMerge): dropped, it neither writes nor reads a column
    val matchedLive = m.matchedInstructions.filterNot(_.condition == Literal.FalseLiteral)
    val matched = matchedLive.collect { case k: MergeRows.Keep => k }
    val bySource = m.notMatchedBySourceInstructions.collect { case k: MergeRows.Keep => k }
    val inserts = m.notMatchedInstructions.collect { case k: MergeRows.Keep if k.context == MergeRows.Insert => k }
    if (matched.size != matchedLive.size || inserts.size != m.notMatchedInstructions.size ||
      bySource.size != m.notMatchedBySourceInstructions.size) return wd
    if (inserts.nonEmpty) op.insertRows() // the write names the new batch before any job runs
    val keeps = matched ++ bySource
    val updates = keeps.filter(_.context == MergeRows.Update)
    if (keeps.exists(k => k.context != MergeRows.Update && k.context != MergeRows.Delete)) return wd
    val user = userColumns(rows)
    val (unchanged, assigned) = user.partition { case (name, at) =>
      updates.forall(k => isOwn(k.output(at), name, targetIds))
    }
    if (updates.nonEmpty && assigned.isEmpty) return wd
    op.assignColumns(assigned.map(_._1).toSet) // empty for a MERGE that only deletes: nothing to write
    val name = appendNameAt(rows).filter(at =>
      updates.nonEmpty && updates.forall(k => isOwn(k.output(at), SystemColumns.AppendName, targetIds)))
    name.foreach(_ => op.keepAppendName())
    val nulled = unchanged.map(_._2).toSet ++ name
    val prune = (k: MergeRows.Keep) =>
      if (k.context != MergeRows.Update) k
      else k.copy(output = k.output.zipWithIndex.map { case (e, i) =>
        if (nulled.contains(i)) Literal(null, e.dataType) else e
      })
    val merged = m.copy(matchedInstructions = matched.map(prune), notMatchedBySourceInstructions = bySource.map(prune))
    val needed = m.child.output.filter(merged.references.contains)
    wd.copy(query = merged.copy(child = Project(needed, m.child)))
  }

  /** (name, ordinal in the written rows) of the user columns Spark's row projection writes. */
  private def userColumns(rows: ProjectingInternalRow): Seq[(String, Int)] =
    rows.schema.fieldNames.toSeq.zip(rows.colOrdinals.map(_.asInstanceOf[Int]))
      .filterNot { case (name, _) => name == SystemColumns.RowId || name == SystemColumns.AppendName }

  /** The ordinal of `_ai_append_name_` in the written rows, if Spark's row projection writes it. */
  private def appendNameAt(rows: ProjectingInternalRow): Option[Int] =
    rows.schema.fieldNames.toSeq.zip(rows.colOrdinals.map(_.asInstanceOf[Int]))
      .collectFirst { case (n, at) if n == SystemColumns.AppendName => at }

  private def isOwn(e: Expression, name: String, targetIds: Set[ExprId]): Boolean = e match {
    case n: NamedExpression => isOwnValue(n, name, targetIds)
    case _ => false
  }

  private def prune(
      wd: WriteDelta,
      p: Project,
      op: OmniTableDeltaOperation,
      rows: ProjectingInternalRow,
      targetIds: Set[ExprId]): LogicalPlan = {
    val user = userColumns(rows)
    val (unchanged, assigned) = user.partition { case (name, at) => isOwnValue(p.projectList(at), name, targetIds) }
    if (assigned.isEmpty) return wd
    op.assignColumns(assigned.map(_._1).toSet)
    val name = appendNameAt(rows).filter(at => isOwnValue(p.projectList(at), SystemColumns.AppendName, targetIds))
    name.foreach(_ => op.keepAppendName())
    val nulled = unchanged.map(_._2).toSet ++ name
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
