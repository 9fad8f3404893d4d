package io.omnitable.spark.optimizer

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, AttributeSet, PythonUDF}
import org.apache.spark.sql.execution.{SparkPlan, UnaryExecNode}
import org.apache.spark.sql.execution.metric.SQLMetric
import org.apache.spark.sql.execution.python.{ArrowEvalPythonExec, BatchEvalPythonExec}

/**
 * The lowest Python evaluation of a chain [[FusePythonUDFs]] rewrote. Runs exactly as Spark's own
 * `ArrowEvalPythonExec` / `BatchEvalPythonExec` with its UDFs (which it delegates to, metrics
 * included: bytes sent to Python are `pythonDataSent`); it exists so that EXPLAIN and the SQL UI
 * say the rule fired and what it did to the chain.
 *
 * @param evaluations the chain's Python evaluations before the rule
 * @param passes those left after it (this one included)
 * @param shared UDF evaluations the chain no longer runs: their results come from an equal UDF below
 */
case class FusedPythonEvalExec(
    udfs: Seq[PythonUDF],
    resultAttrs: Seq[Attribute],
    child: SparkPlan,
    evalType: Int,
    evaluations: Int,
    passes: Int,
    shared: Int) extends UnaryExecNode {

  @transient private lazy val delegate: SparkPlan =
    if (evalType == PythonEvalTypes.SQL_BATCHED_UDF) BatchEvalPythonExec(udfs, resultAttrs, child)
    else ArrowEvalPythonExec(udfs, resultAttrs, child, evalType)

  override def output: Seq[Attribute] = child.output ++ resultAttrs

  override def producedAttributes: AttributeSet = AttributeSet(resultAttrs)

  override lazy val metrics: Map[String, SQLMetric] = delegate.metrics

  override protected def doExecute(): RDD[InternalRow] = delegate.execute()

  override def nodeName: String = "FusedPythonEval"

  override def simpleString(maxFields: Int): String = {
    val sharing = if (shared > 0) s", $shared shared" else ""
    s"$nodeName ${udfs.mkString("[", ", ", "]")}, ${resultAttrs.mkString("[", ", ", "]")}, $evalType " +
      s"(FusePythonUDFs: $evaluations Python evaluations -> $passes$sharing)"
  }

  override protected def withNewChildInternal(newChild: SparkPlan): FusedPythonEvalExec = copy(child = newChild)
}
