package io.omnitable.spark

import io.omnitable.spark.conf.{OmniTableVersion, SparkVersionCheck}
import io.omnitable.spark.optimizer.{
  AlignOmniTableUpdateAssignments,
  BroadcastOmniTableMergeSource,
  ColumnViewReadStrategy,
  FuseOmniTableScans,
  FusePythonUDFs,
  KeepOmniTableUpdateOrder,
  LateMaterializeFilteredColumns,
  RefuseOmniTableMerge,
  ResolveOmniTableInsertByPosition,
  ResolveOmniTableMerge,
  SpreadMergeInserts,
  UseFreshColumnViews,
  WriteOnlyAssignedColumns
}
import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo, LeafExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.CodegenFallback
import org.apache.spark.sql.types.{DataType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * The single injection point of OmniTable into Spark (`spark.sql.extensions`). Every rule and
 * function OmniTable adds to a session is injected here, grouped by phase, with one line on why.
 */
class OmniTableSparkSessionExtensions extends (SparkSessionExtensions => Unit) {

  override def apply(extensions: SparkSessionExtensions): Unit = {
    // The jar runs on the Spark line it was built for only: fail here, not later in a rule.
    SparkVersionCheck.verified

    // --- functions -----------------------------------------------------------------------
    // omnitable_version(): proves the extension is loaded and tells which jar a session runs.
    extensions.injectFunction(OmniTableSparkSessionExtensions.versionFunction)
    // omnitable_scan_metrics([action]): the scan metrics listener through SQL (no py4j, so
    // Python reads scan metrics on Spark Connect too).
    extensions.injectTableFunction(metrics.ScanMetricsFunction.function)

    // --- analyzer ---------------------------------------------------------------------------
    // ResolveOmniTableInsertByPosition: INSERT INTO without a column list fills the user columns
    // in order (OmniTable tables accept any schema and match the written columns by name).
    extensions.injectResolutionRule(_ => ResolveOmniTableInsertByPosition)
    // AlignOmniTableUpdateAssignments: UPDATE of an OmniTable table gets one assignment per column
    // (Spark skips that for tables accepting any schema, and would then refuse the UPDATE).
    extensions.injectResolutionRule(_ => AlignOmniTableUpdateAssignments)
    // ResolveOmniTableMerge: MERGE INTO an OmniTable table (WHEN MATCHED UPDATE / DELETE clauses)
    // gets its names resolved and its assignments aligned (Spark skips both for tables accepting
    // any schema), so Spark rewrites it into a row-level operation.
    extensions.injectResolutionRule(_ => ResolveOmniTableMerge)
    // RefuseOmniTableMerge: the other MERGE forms fail with OMNITABLE_UNSUPPORTED_DML naming the
    // supported ones (an unresolved-column error naming a column that exists otherwise).
    extensions.injectResolutionRule(_ => RefuseOmniTableMerge)

    // --- optimizer (operator optimization batch, before Spark pushes filters into scans) ---
    // FuseOmniTableScans: reads of one snapshot joined on _ai_unique_id_ read the files once.
    extensions.injectOptimizerRule(_ => FuseOmniTableScans)
    // UseFreshColumnViews: a read covered by a hot column-group view that is fresh for the
    // snapshot reads the view's Delta table (docs/optimizer.md).
    extensions.injectOptimizerRule(_ => UseFreshColumnViews)
    // LateMaterializeFilteredColumns: a selective filter's columns are read first, payload only
    // for the rows that pass (runs after fusion so a fused scan is marked as a whole).
    extensions.injectOptimizerRule(_ => LateMaterializeFilteredColumns)
    // WriteOnlyAssignedColumns: an UPDATE writes (and reads) only the columns it assigns.
    extensions.injectOptimizerRule(_ => WriteOnlyAssignedColumns)
    // BroadcastOmniTableMergeSource: a MERGE that only updates / deletes target rows broadcasts a
    // small deterministic source, so the target scan's partitions and order reach the write.
    extensions.injectOptimizerRule(_ => BroadcastOmniTableMergeSource)
    // KeepOmniTableUpdateOrder: an UPDATE whose rows keep the scan's order (projections and
    // filters only) and whose scan reads each fragment whole in one task skips the exchange and
    // sort Spark would plan for its write (one task still rewrites each fragment, in one pass).
    extensions.injectOptimizerRule(_ => KeepOmniTableUpdateOrder)

    // --- planner (Python UDFs are only extracted into evaluation nodes after the optimizer) --
    // FusePythonUDFs: a UDF Spark evaluates again above the filter that needed it runs once
    // (never on rows a filter removed).
    extensions.injectPlannerStrategy(session => FusePythonUDFs(session))
    // ColumnViewReadStrategy: plans the marker UseFreshColumnViews puts over a read it answers
    // from a view (a pass-through node, so EXPLAIN names the view).
    extensions.injectPlannerStrategy(_ => ColumnViewReadStrategy)
    // SpreadMergeInserts: a MERGE's inserted rows (no fragment) go to every task of its write,
    // not all to the one task that the clustering by _ai_fragment_ gives rows without one.
    extensions.injectPlannerStrategy(_ => SpreadMergeInserts)
  }
}

object OmniTableSparkSessionExtensions {

  private[spark] val versionFunction: (FunctionIdentifier, ExpressionInfo, Seq[Expression] => Expression) = {
    val name = "omnitable_version"
    val info = new ExpressionInfo(
      classOf[OmniTableVersionExpression].getName,
      null,
      name,
      "_FUNC_() - Returns the version of the OmniTable Spark extension jar.",
      "",
      "",
      "",
      "misc_funcs",
      "0.1.0",
      "",
      "built-in"
    )
    val builder = (args: Seq[Expression]) => {
      if (args.nonEmpty) throw errors.OmniTableErrors.wrongArguments(name, 0, args.size)
      OmniTableVersionExpression()
    }
    (FunctionIdentifier(name), info, builder)
  }
}

/** `omnitable_version()`: the jar's version, a constant string (folded by the optimizer). */
case class OmniTableVersionExpression() extends LeafExpression with CodegenFallback {
  override def nullable: Boolean = false
  override def foldable: Boolean = true
  override def dataType: DataType = StringType
  override def prettyName: String = "omnitable_version"
  override def eval(input: InternalRow): Any = UTF8String.fromString(OmniTableVersion.current)
}
