package io.omnitable.spark.optimizer

import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.plans.logical.{AppendData, LogicalPlan, OverwriteByExpression, Project}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Matches an append or overwrite by position (`INSERT INTO|OVERWRITE omnitable.web VALUES …` /
 * `SELECT …` without a column list) into an OmniTable table and rewrites it into one by name: the query's
 * columns are renamed, in order, to the table's user columns (its columns without
 * `_ai_unique_id_` and `_ai_append_name_`, which OmniTable sets). Backs off while the query is
 * unresolved; fails when the column counts differ. OmniTable tables accept any schema (they check
 * the written columns by name themselves), so without this rule Spark would pass `col1, col2`.
 */
object ResolveOmniTableInsertByPosition extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case a @ AppendData(r: DataSourceV2Relation, query, _, false, _, _) if query.resolved && isOmniTable(r) =>
      a.copy(query = byName(r, query), isByName = true)
    case o @ OverwriteByExpression(r: DataSourceV2Relation, _, query, _, false, _, _)
        if query.resolved && isOmniTable(r) =>
      o.copy(query = byName(r, query), isByName = true)
  }

  /** `query` with its columns renamed, in order, to the table's user columns. */
  private def byName(r: DataSourceV2Relation, query: LogicalPlan): LogicalPlan = {
    val table = r.table.asInstanceOf[OmniTableTable]
    val user = table.schema.fieldNames.drop(2) // _ai_unique_id_, _ai_append_name_
    if (query.output.size != user.length) {
      throw WriteErrors.positionMismatch(table.name(), query.output.size, user.length)
    }
    Project(query.output.zip(user).map { case (attr, name) => Alias(attr, name)() }, query)
  }

  private def isOmniTable(r: DataSourceV2Relation): Boolean = r.table.isInstanceOf[OmniTableTable]
}
