package io.omnitable.spark.optimizer

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.execution.{SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.SparkStrategy
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * Marks the part of a plan [[UseFreshColumnViews]] answers from view `view` of table `table`
 * (`child` reads the view's Delta table). It changes nothing: it is planned as
 * [[ColumnViewReadExec]], which passes its child's rows through, so EXPLAIN names the view.
 */
final case class ColumnViewRead(table: String, view: String, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override def simpleString(maxFields: Int): String = s"ColumnViewRead $table.$view"
  override protected def withNewChildInternal(c: LogicalPlan): ColumnViewRead = copy(child = c)
}

/** The physical [[ColumnViewRead]]: its child's rows (or batches), partitioning and order. */
final case class ColumnViewReadExec(table: String, view: String, child: SparkPlan) extends UnaryExecNode {
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering
  override def supportsColumnar: Boolean = child.supportsColumnar
  override def simpleString(maxFields: Int): String = s"ColumnViewRead $table.$view"
  override protected def doExecute(): RDD[InternalRow] = child.execute()
  override protected def doExecuteColumnar(): RDD[ColumnarBatch] = child.executeColumnar()
  override protected def withNewChildInternal(c: SparkPlan): ColumnViewReadExec = copy(child = c)
}

/** Plans [[ColumnViewRead]]. */
object ColumnViewReadStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case ColumnViewRead(table, view, child) => ColumnViewReadExec(table, view, planLater(child)) :: Nil
    case _ => Nil
  }
}
