package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import org.apache.spark.sql.catalyst.expressions.{Attribute, Expression, If, IsNull, Murmur3Hash}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, RepartitionByExpression}
import org.apache.spark.sql.catalyst.plans.physical.HashPartitioning
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.exchange.{REPARTITION_BY_COL, ShuffleExchangeExec}
import org.apache.spark.sql.types.{
  BinaryType,
  BooleanType,
  DataType,
  DateType,
  NumericType,
  StringType,
  TimestampNTZType,
  TimestampType
}

/**
 * Spreads the inserted rows of a MERGE into an OmniTable table over the write's tasks.
 *
 * A row-level write asks Spark to cluster its rows by `_ai_fragment_` (one task rewrites a
 * fragment: `write/OmniTableDeltaOperation.scala`), which Spark plans as an exchange hashing that
 * column alone. A MERGE's `WHEN NOT MATCHED … INSERT` rows have no fragment (NULL), so they would
 * all hash to one task, which would write the whole new batch. This strategy plans that exchange
 * (a `RepartitionByExpression` on exactly `_ai_fragment_` whose rows carry Spark's
 * `__row_operation`: a row-level write) hashing, per row, the fragment when it has one (so a
 * fragment's rows still meet in one task) and else the row's values (every column of a scalar
 * type): each task that receives inserted rows writes fragments of the new batch. Any other plan
 * is left to Spark.
 */
object SpreadMergeInserts extends SparkStrategy {

  /** The operation column of Spark's row-level writes (`RowDeltaUtils.OPERATION_COLUMN`). */
  private val OperationColumn = "__row_operation"

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case r @ RepartitionByExpression(Seq(f: Attribute), child, _, _)
        if f.name == SystemColumns.Fragment && child.output.exists(_.name == OperationColumn) =>
      val values = child.output.filter(a => a.exprId != f.exprId && hashable(a.dataType))
      if (values.isEmpty) Nil
      else {
        val key: Expression = If(IsNull(f), new Murmur3Hash(values), new Murmur3Hash(Seq(f)))
        val partitioning = HashPartitioning(Seq(key), r.partitioning.numPartitions)
        ShuffleExchangeExec(partitioning, planLater(child), REPARTITION_BY_COL, r.optAdvisoryPartitionSize) :: Nil
      }
    case _ => Nil
  }

  /** A type whose values the spread hashes: the scalar ones (never maps or variants). */
  private def hashable(t: DataType): Boolean = t match {
    case _: NumericType | _: StringType | BinaryType | BooleanType | DateType | TimestampType | TimestampNTZType => true
    case _ => false
  }
}
