package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.errors.UpdateErrors
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.analysis.{AssignmentUtils, EliminateSubqueryAliases, UnresolvedAttribute}
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, CaseWhen, Cast, Expression, Literal, Or}
import org.apache.spark.sql.catalyst.expressions.objects.AssertNotNull
import org.apache.spark.sql.catalyst.plans.LeftAnti
import org.apache.spark.sql.catalyst.plans.logical.{
  AppendData,
  Assignment,
  DeleteAction,
  Filter,
  InsertAction,
  InsertStarAction,
  Join,
  JoinHint,
  LogicalPlan,
  MergeAction,
  MergeIntoTable,
  Project,
  UpdateAction,
  UpdateStarAction
}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Resolves a `MERGE INTO` an OmniTable table of the supported forms (`WHEN MATCHED [AND c] THEN
 * UPDATE SET … | UPDATE SET * | DELETE`, `WHEN NOT MATCHED [BY TARGET] [AND c] THEN INSERT
 * (cols) VALUES (…) | INSERT *` and `WHEN NOT MATCHED BY SOURCE [AND c] THEN UPDATE SET … |
 * DELETE` clauses, see [[RefuseOmniTableMerge]]; the stars are expanded first, [[expandStars]];
 * a BY SOURCE clause's condition and values read the target only) as Spark's ResolveReferences
 * and ResolveRowLevelCommandAssignments do for tables that do not accept any schema: the ON
 * condition, clause conditions and assigned values against the target and the source, the
 * assigned columns against the target; then aligns each UPDATE's assignments with the target's
 * columns (unassigned ones keep their value); an assigned system column fails the statement
 * (`Table.update` refuses them too). An INSERT's values and condition read the source only
 * (SQL's rule); each INSERT is aligned with every target column (unassigned: NULL, cast to the
 * column's type as INSERT stores values); `_ai_append_name_` may not be assigned (it is the batch
 * name), `_ai_unique_id_` only in a MERGE that only inserts (then the ids are supplied, checked
 * as a supplied-id append checks them). A MERGE that only inserts becomes an append by name of
 * the source rows no target row matches ([[insertOnly]]: one named batch, as INSERT INTO).
 * OmniTable tables accept any schema, so Spark leaves
 * both steps to the source; once done, Spark's RewriteMergeIntoTable rewrites the statement into
 * a row-level operation ([[io.omnitable.spark.write.OmniTableDeltaOperation]]). Names left
 * unresolved stay so, and Spark reports them. Backs off for other tables and other forms.
 */
object ResolveOmniTableMerge extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case m: MergeIntoTable
        if m.targetTable.resolved && m.sourceTable.resolved && supported(m) && isOmniTable(m.targetTable) =>
      // resolved and aligned in one step: Spark's own alignment would refuse an INSERT leaving out
      // the (non-nullable) system columns
      val expanded = expandStars(m)
      val resolved = if (expanded.resolved) expanded else resolve(expanded)
      if (resolved.resolved) KeyedMerge.check(resolved) // a keyed table takes keyed merges only
      if (resolved.resolved && !resolved.aligned) alignAll(resolved) else resolved
  }

  /**
   * `UPDATE SET *` and `INSERT *` as the assignments of every user column of the table that the
   * source has (by name, Spark's resolver): column-only, only the columns the source provides are
   * written; the system columns are never assigned (OmniTable sets them).
   */
  private def expandStars(m: MergeIntoTable): MergeIntoTable = {
    val hasStar = (m.matchedActions ++ m.notMatchedActions).exists {
      case _: UpdateStarAction | _: InsertStarAction => true
      case _ => false
    }
    if (!hasStar) return m
    lazy val assignments = m.targetTable.output.filterNot(isSystem).flatMap { a =>
      m.sourceTable.output.find(s => conf.resolver(s.name, a.name)).map(s => Assignment(a, s))
    }
    m.copy(
      matchedActions = m.matchedActions.map {
        case UpdateStarAction(cond) => UpdateAction(cond, assignments)
        case other => other
      },
      notMatchedActions = m.notMatchedActions.map {
        case InsertStarAction(cond) => InsertAction(cond, assignments)
        case other => other
      }
    )
  }

  private def alignAll(m: MergeIntoTable): LogicalPlan = {
    refuseSystemColumns(m)
    refuseInsertedSystemColumns(m)
    val onlyInserts =
      m.matchedActions.isEmpty && m.notMatchedBySourceActions.isEmpty && m.notMatchedActions.nonEmpty
    if (onlyInserts && KeyedMerge.keyed(m))
      // a keyed table takes rows through the row-level MERGE only (keys checked, index written):
      // a WHEN MATCHED clause that never holds keeps Spark from rewriting it as an append
      alignAll(m.copy(matchedActions = Seq(UpdateAction(Some(Literal.FalseLiteral), Nil))))
    else if (onlyInserts) insertOnly(m)
    else
      m.copy(
        matchedActions = m.matchedActions.map(align(m.targetTable, _)),
        notMatchedActions = m.notMatchedActions.map(alignInsert(m, _)),
        notMatchedBySourceActions = m.notMatchedBySourceActions.map(align(m.targetTable, _))
      )
  }

  private def tableName(m: MergeIntoTable): String = EliminateSubqueryAliases(m.targetTable) match {
    case r: DataSourceV2Relation => r.table.name()
    case other => other.nodeName
  }

  /**
   * An INSERT assigning `_ai_append_name_` fails (the batch name sets it); one assigning
   * `_ai_unique_id_` fails in a MERGE that also updates or deletes (supplied ids are checked by
   * the append path only).
   */
  private def refuseInsertedSystemColumns(m: MergeIntoTable): Unit = m.notMatchedActions.foreach {
    case i: InsertAction =>
      val keys = i.assignments.map(_.key).collect { case a: Attribute => a.name }
      keys.find(_.equalsIgnoreCase(SystemColumns.AppendName)).foreach { n =>
        throw io.omnitable.spark.errors.WriteErrors.systemColumn(tableName(m), n)
      }
      if (m.matchedActions.nonEmpty && keys.exists(_.equalsIgnoreCase(SystemColumns.RowId))) {
        throw io.omnitable.spark.errors.WriteErrors.unsupportedDml(
          tableName(m),
          s"MERGE INTO with WHEN MATCHED clauses and an INSERT assigning ${SystemColumns.RowId}",
          "supply ids in a MERGE that only inserts (or in INSERT INTO), or let OmniTable generate them"
        )
      }
    case _ =>
  }

  /**
   * A MERGE with only NOT MATCHED INSERT clauses as an append by name (Spark's own rewrite appends
   * by position, with the system columns): the source rows no target row matches (a left anti
   * join on the ON condition) that some clause's condition holds for, each column the value of
   * the first such clause (SQL's rule); columns no clause assigns are left out (they read NULL).
   */
  private def insertOnly(m: MergeIntoTable): LogicalPlan = {
    val r = EliminateSubqueryAliases(m.targetTable).asInstanceOf[DataSourceV2Relation]
    val inserts = m.notMatchedActions.collect { case i: InsertAction => i }
    val conds = inserts.map(_.condition.getOrElse(Literal.TrueLiteral))
    val live = conds.indexWhere(_ == Literal.TrueLiteral) match {
      case -1 => conds
      case i => conds.take(i + 1)
    }
    val assigned = (i: InsertAction, a: Attribute) =>
      i.assignments.find(_.key.semanticEquals(a)).map(_.value)
    val columns = r.output.filterNot(_.name == SystemColumns.AppendName).filter { a =>
      inserts.exists(i => assigned(i, a).exists(v => !isNullLiteral(v)))
    }
    val values = columns.map { a =>
      val branches = inserts.take(live.size).zip(live).map { case (i, c) =>
        c -> assigned(i, a).getOrElse(Literal(null, a.dataType))
      }
      val value = if (branches.size == 1) branches.head._2 else CaseWhen(branches)
      Alias(value, a.name)()
    }
    val join = Join(m.sourceTable, r, LeftAnti, Some(m.mergeCondition), JoinHint.NONE)
    val filtered = if (live.contains(Literal.TrueLiteral)) join else Filter(live.reduce(Or), join)
    AppendData.byName(r, Project(values, filtered))
  }

  private def isNullLiteral(e: Expression): Boolean = e match {
    case Literal(null, _) => true
    case Cast(Literal(null, _), _, _, _) => true
    case _ => false
  }

  /** An UPDATE clause assigning `_ai_unique_id_` or `_ai_append_name_` fails, as `Table.update` does. */
  private def refuseSystemColumns(m: MergeIntoTable): Unit = (m.matchedActions ++ m.notMatchedBySourceActions).foreach {
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

  /**
   * The forms the write supports: WHEN MATCHED and WHEN NOT MATCHED BY SOURCE UPDATE / DELETE
   * clauses, WHEN NOT MATCHED INSERT clauses (stars included, not yet expanded by Spark).
   */
  private[optimizer] def supported(m: MergeIntoTable): Boolean =
    m.notMatchedBySourceActions.forall {
      case _: DeleteAction => true
      case u: UpdateAction => !u.fromStar
      case _ => false
    } && m.matchedActions.forall {
      case _: DeleteAction | _: UpdateStarAction => true
      case u: UpdateAction => !u.fromStar
      case _ => false
    } && m.notMatchedActions.forall {
      case _: InsertAction | _: InsertStarAction => true
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
    val source = (e: Expression) => resolveIn(e, parts => m.sourceTable.resolve(parts, conf.resolver))
    val inserts = m.notMatchedActions.map {
      case i: InsertAction =>
        i.copy(
          condition = i.condition.map(source),
          assignments = i.assignments.map(a => Assignment(target(a.key), source(a.value))))
      case other => other
    }
    val bySource = m.notMatchedBySourceActions.map {
      case DeleteAction(cond) => DeleteAction(cond.map(target))
      case u: UpdateAction =>
        u.copy(
          condition = u.condition.map(target),
          assignments = u.assignments.map(a => Assignment(target(a.key), target(a.value))))
      case other => other
    }
    m.copy(
      mergeCondition = both(m.mergeCondition),
      matchedActions = actions,
      notMatchedActions = inserts,
      notMatchedBySourceActions = bySource)
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

  /**
   * An INSERT's assignments, one per target column in order: the assigned value (cast to the
   * column's type where it differs, ANSI store assignment as INSERT INTO; a NULL in a
   * non-nullable column fails its task), else NULL (a non-nullable user column left out fails
   * the statement). The system columns get placeholders the write ignores: the batch's generated
   * ids and its name replace them.
   */
  private def alignInsert(m: MergeIntoTable, action: MergeAction): MergeAction = action match {
    case i: InsertAction if i.resolved =>
      val tz = Some(conf.sessionLocalTimeZone)
      val missing = m.targetTable.output.filter(a =>
        !a.nullable && !isSystem(a) && !i.assignments.exists(_.key.semanticEquals(a))).map(_.name)
      if (missing.nonEmpty) throw io.omnitable.spark.errors.WriteErrors.missingColumns(tableName(m), missing)
      i.copy(assignments = m.targetTable.output.map { a =>
        val value = i.assignments.find(_.key.semanticEquals(a)).map(_.value) match {
          case _ if a.name == SystemColumns.RowId => Literal(-1L)
          case _ if a.name == SystemColumns.AppendName => Literal("")
          case Some(v) =>
            val cast = if (v.dataType == a.dataType) v else Cast(v, a.dataType, tz, ansiEnabled = true)
            if (!a.nullable && cast.nullable) AssertNotNull(cast) else cast
          case None => Literal(null, a.dataType)
        }
        Assignment(a, value)
      })
    case other => other
  }

  private def isSystem(a: Attribute): Boolean = a.name == SystemColumns.RowId || a.name == SystemColumns.AppendName
}
