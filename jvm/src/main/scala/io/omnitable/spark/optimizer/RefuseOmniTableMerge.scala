package io.omnitable.spark.optimizer

import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.analysis.EliminateSubqueryAliases
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, MergeIntoTable}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Matches a `MERGE INTO` an OmniTable table (once its target and source are resolved) and fails it
 * with `OMNITABLE_UNSUPPORTED_DML`: Spark leaves the resolution of MERGE to the source for tables
 * that accept any schema, and OmniTable does not resolve MERGE yet, so without this rule the
 * statement would fail with an unresolved-column error naming a column that exists.
 */
object RefuseOmniTableMerge extends Rule[LogicalPlan] {

  override def apply(plan: LogicalPlan): LogicalPlan = plan.resolveOperators {
    case m: MergeIntoTable if m.targetTable.resolved && m.sourceTable.resolved =>
      EliminateSubqueryAliases(m.targetTable) match {
        case r: DataSourceV2Relation if r.table.isInstanceOf[OmniTableTable] =>
          throw WriteErrors.unsupportedDml(
            r.table.name(),
            "MERGE INTO",
            "use UPDATE … SET … WHERE and DELETE FROM in SQL, or Table.update / Table.upsert in Python")
        case _ => m
      }
  }
}
