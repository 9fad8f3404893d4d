package io.omnitable.spark.read.plan

import scala.collection.mutable

import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.read.exec.{Filter, FilterColumn}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.read.{
  Scan,
  ScanBuilder,
  SupportsPushDownLimit,
  SupportsPushDownRequiredColumns,
  SupportsPushDownV2Filters
}
import org.apache.spark.sql.types.StructType

/**
 * Collects what Spark pushes into a read — columns, predicates, a limit — and plans the scan.
 *
 *  - Columns: only the files providing requested columns are opened (nested struct pruning
 *    passes through to Parquet).
 *  - Predicates go through [[PredicateConverter]]. Those it converts prune fragments (batch
 *    name / fragment id exactly, data columns by catalog statistics) and Parquet row groups;
 *    only complete predicates on per-fragment constants are enforced exactly, so every other
 *    predicate is handed back to Spark to evaluate after the scan.
 *  - Limit: Spark only pushes one when no predicate is left for it; fragments past the limit
 *    are not read and each reader stops at the limit.
 */
final class OmniTableScanBuilder(handle: TableHandle, conf: OmniTableConf, marks: OptimizerMarks = OptimizerMarks.Empty)
    extends ScanBuilder
    with SupportsPushDownV2Filters
    with SupportsPushDownRequiredColumns
    with SupportsPushDownLimit
    with Logging {

  private val snap = handle.snapshot
  private val allColumns: Seq[ReadColumn] = ReadColumn.tableColumns(snap) ++ ReadColumn.metadataColumns
  private val filterColumns = ReadColumn.filterColumns(snap)
  private val converter = new PredicateConverter(name =>
    filterColumns.get(name).orElse(filterColumns.find(_._1.equalsIgnoreCase(name)).map(_._2)))

  private var required: StructType = ReadColumn.schema(ReadColumn.tableColumns(snap))
  private val pushed = mutable.ArrayBuffer.empty[(Predicate, Filter)]
  private val exact = mutable.ArrayBuffer.empty[Filter]
  private val declined = mutable.ArrayBuffer.empty[(Predicate, String)]
  private val offered = mutable.ArrayBuffer.empty[Predicate]
  private var limit: Option[Int] = None
  @volatile private var built: Option[OmniTableScan] = None

  /** The scan [[build]] returned last, if any (a row-level write reads its input partitions). */
  def builtScan: Option[OmniTableScan] = built

  override def pushPredicates(predicates: Array[Predicate]): Array[Predicate] = {
    offered ++= predicates
    predicates.filter { p =>
      converter.convert(p) match {
        case Conversion.Converted(filter, complete) =>
          pushed += (p -> filter)
          val isExact = complete && filter.columns.forall(_.kind != FilterColumn.Data)
          if (isExact) exact += filter
          !isExact
        case Conversion.Declined(reason) =>
          logInfo(s"Not pushing $p into the scan of ${snap.table.name}: $reason")
          declined += (p -> reason)
          true
      }
    }
  }

  override def pushedPredicates(): Array[Predicate] = pushed.map(_._1).toArray

  override def pruneColumns(requiredSchema: StructType): Unit = required = requiredSchema

  /** The columns the scan reads (after Spark pruned them): a row-level statement's read set. */
  def requiredColumns: StructType = required

  override def pushLimit(n: Int): Boolean = {
    limit = Some(n)
    true
  }

  /**
   * Packing as Spark's file sources do it, from the session's `spark.sql.files.*` settings; the
   * default parallelism is that of the active session's SparkContext (1 without one).
   */
  private def packing: Packing = {
    def parallelism = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
      .fold(1)(_.sparkContext.defaultParallelism)
    Packing(
      conf.filesMaxPartitionBytes,
      conf.filesOpenCostInBytes,
      conf.filesMinPartitionNum.getOrElse(parallelism),
      conf.maxRowsPerPartition)
  }

  override def build(): Scan = {
    val readColumns = required.fields.toSeq.map { field =>
      allColumns.find(
        _.field.name == field.name).orElse(allColumns.find(_.field.name.equalsIgnoreCase(field.name))) match {
        case Some(s: ReadColumn.Stored) => s.copy(field = s.field.copy(dataType = field.dataType))
        case Some(other) => other
        case None => throw new IllegalStateException(s"Spark asked ${snap.table.name} for unknown column ${field.name}")
      }
    }
    val pruning = Filter.and(pushed.map(_._2).toSeq)
    val request = ScanRequest(
      readColumns,
      handle.batches,
      handle.fragments,
      Filter.and(exact.toSeq),
      pruning,
      conf.statsPruning,
      limit,
      // Skipping corrupt fragments is whole-fragment: never split them then.
      if (conf.splitFragments && !conf.skipCorruptFragments) Some(conf.maxRowsPerPartition) else None,
      // split_fragments=false promises one partition per fragment (per-fragment jobs).
      Option.when(conf.splitFragments)(packing)
    )
    // late materialization decides from the fragments' statistics: those only a listing has
    val onExecutors =
      if (marks.lateMaterialization.isDefined) None
      else ExecutorPlanning.plan(handle, request, conf.executorPlanningMinFragments)
    lazy val listing = handle.reader.listFragments(snap, ScanPlanner.scope(request))
    val plan = onExecutors.getOrElse(ScanPlanner.plan(snap, listing, request))
    val dataFilter = pushed.map(_._2).filter(_.columns.exists(_.kind == FilterColumn.Data))
    val schema = ReadColumn.schema(readColumns)
    val late = marks.lateMaterialization.map { conjuncts =>
      val kept = plan.fragments.map(_.fragmentId).toSet
      LateMaterializationPlanner.decide(
        conjuncts,
        offered.toSeq,
        schema,
        readColumns,
        p =>
          converter.convert(p) match {
            case Conversion.Converted(f, _) => Some(f)
            case _ => None
          },
        listing.fragments.filter(f => kept.contains(f.fragmentId)),
        OmniTableConf.fromSQLConf().lateMaterializationMaxSelectivity
      )
    }
    late.foreach(d => logInfo(s"Scan of ${snap.table.name}: ${d.explain}"))
    val scan = new OmniTableScan(
      snap,
      schema,
      plan,
      OmniTableScan.Pushdown(
        pushed.map(_._1).toSeq,
        declined.toSeq,
        limit,
        if (dataFilter.isEmpty) None else Some(Filter.and(dataFilter.toSeq))),
      conf,
      marks.describe ++ late.map(_.explain),
      late.flatMap(_.plan)
    )
    built = Some(scan)
    scan
  }
}
