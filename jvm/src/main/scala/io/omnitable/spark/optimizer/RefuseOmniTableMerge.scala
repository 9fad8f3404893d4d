package io.omnitable.spark.optimizer

import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.write.RowChanges
import org.apache.spark.sql.catalyst.analysis.EliminateSubqueryAliases
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, MergeIntoTable}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Matches a `MERGE INTO` an OmniTable table (once its target and source are resolved) of a form
 * [[ResolveOmniTableMerge]] does not resolve — an UPDATE Spark already expanded from `SET *` (Spark
 * leaves the stars to OmniTable, which expands them itself) — and fails it with `OMNITABLE_UNSUPPORTED_DML`
 * naming the supported forms: Spark leaves the resolution of MERGE to the source for tables that
 * accept any schema, so without this rule such a statement would fail with an unresolved-column
 * error naming a column that exists.
 */
object RefuseOmniTableMerge extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case m: MergeIntoTable
        if m.targetTable.resolved && m.sourceTable.resolved && !ResolveOmniTableMerge.supported(m) =>
      EliminateSubqueryAliases(m.targetTable) match {
        case r: DataSourceV2Relation if ResolveOmniTableMerge.isOmniTable(r) =>
          throw WriteErrors.unsupportedDml(r.table.name(), s"MERGE INTO with ${refused(m)}", RowChanges.MergeForms)
        case _ => m
      }
  }

  private def refused(m: MergeIntoTable): String = "an UPDATE Spark expanded from SET *"
}
