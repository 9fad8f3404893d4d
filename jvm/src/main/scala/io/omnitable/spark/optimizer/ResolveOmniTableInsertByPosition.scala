package io.omnitable.spark.optimizer

import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.expressions.Alias
import org.apache.spark.sql.catalyst.plans.logical.{AppendData, LogicalPlan, Project}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Matches an append by position (`INSERT INTO omnitable.web VALUES …` / `SELECT …` without a
 * column list) into an OmniTable table and rewrites it into an append by name: the query's
 * columns are renamed, in order, to the table's user columns (its columns without
 * `_ai_unique_id_` and `_ai_append_name_`, which OmniTable sets). Backs off while the query is
 * unresolved; fails when the column counts differ. OmniTable tables accept any schema (they check
 * the written columns by name themselves), so without this rule Spark would pass `col1, col2`.
 */
object ResolveOmniTableInsertByPosition extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case a @ AppendData(r: DataSourceV2Relation, query, _, false, _, _) if query.resolved && isOmniTable(r) =>
      val table = r.table.asInstanceOf[OmniTableTable]
      val user = table.schema.fieldNames.drop(2) // _ai_unique_id_, _ai_append_name_
      if (query.output.size != user.length) {
        throw WriteErrors.positionMismatch(table.name(), query.output.size, user.length)
      }
      val renamed = query.output.zip(user).map { case (attr, name) => Alias(attr, name)() }
      a.copy(query = Project(renamed, query), isByName = true)
  }

  private def isOmniTable(r: DataSourceV2Relation): Boolean = r.table.isInstanceOf[OmniTableTable]
}
