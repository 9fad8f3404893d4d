package io.omnitable.spark.metrics

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.plans.logical.{LocalRelation, LogicalPlan}
import org.apache.spark.sql.types.StringType
import org.apache.spark.unsafe.types.UTF8String

/**
 * `omnitable_scan_metrics([action])`: the [[ScanMetricsListener]] through SQL, so that Python
 * code reads scan metrics without py4j (Spark Connect has none):
 * {{{
 *   SELECT metrics FROM omnitable_scan_metrics()          -- install (idempotent), snapshot
 *   SELECT metrics FROM omnitable_scan_metrics('reset')   -- install, forget, snapshot (empty)
 * }}}
 * One row, one column `metrics`: the listener's JSON snapshot. The work happens on the driver
 * when the query is analysed (a table function is built there); every action is idempotent, so
 * an analysis Spark repeats does no harm.
 */
object ScanMetricsFunction {

  val Name = "omnitable_scan_metrics"

  val function: (FunctionIdentifier, ExpressionInfo, Seq[Expression] => LogicalPlan) = {
    val info = new ExpressionInfo(
      "io.omnitable.spark.metrics.ScanMetricsFunction",
      null,
      Name,
      "_FUNC_([action]) - Installs the scan metrics listener and returns its JSON snapshot; " +
        "action 'reset' forgets what it counted first.",
      "",
      "",
      "",
      "",
      "0.1.0",
      "",
      "built-in"
    )
    (FunctionIdentifier(Name), info, build)
  }

  private def build(args: Seq[Expression]): LogicalPlan = {
    val action = args match {
      case Seq() => "snapshot"
      case Seq(arg) if arg.foldable && arg.dataType == StringType => String.valueOf(arg.eval())
      case _ => throw OmniTableErrors.wrongArguments(Name, 1, args.size)
    }
    ScanMetricsListener.install(SparkSession.active.sparkContext)
    action match {
      case "snapshot" =>
      case "reset" => ScanMetricsListener.reset()
      case other => throw OmniTableErrors.unknownMetricsAction(Name, other)
    }
    val out = AttributeReference("metrics", StringType, nullable = false)()
    LocalRelation(Seq(out), Seq(InternalRow(UTF8String.fromString(ScanMetricsListener.snapshot()))))
  }
}
