package io.omnitable.spark.read.plan

import java.util.OptionalLong

import io.omnitable.spark.catalog.TableSnapshot
import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.read.exec.{Filter, LateMaterialization, ReadMetrics}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.metric.CustomMetric
import org.apache.spark.sql.connector.read.{Batch, Scan, Statistics, SupportsReportStatistics}
import org.apache.spark.sql.types.StructType

/**
 * A planned read of one table snapshot. `description` is what EXPLAIN prints: the snapshot,
 * the groups, fragments and files chosen, and the pushed (and declined) predicates.
 */
final class OmniTableScan(
    snap: TableSnapshot,
    schema: StructType,
    val plan: ScanPlan,
    val pushdown: OmniTableScan.Pushdown,
    conf: OmniTableConf,
    /** What optimizer rules did to this read (see io.omnitable.spark.optimizer.OptimizerMarks), for EXPLAIN. */
    val optimizer: Seq[String] = Nil,
    /** Late materialization executors apply (decided in the scan builder), if any. */
    val lateMaterialization: Option[LateMaterialization] = None) extends Scan with SupportsReportStatistics {

  override def readSchema(): StructType = schema

  override def toBatch: Batch = {
    recordAccess()
    new OmniTableBatch(snap.table.name, plan, schema, pushdown, conf, lateMaterialization)
  }

  @volatile private var recorded = false

  /** One access-log entry per scan (Spark may ask for the batch more than once). */
  private def recordAccess(): Unit = if (!recorded) {
    recorded = true
    val filtered = pushdown.predicates.flatMap(_.references().toSeq.map(_.fieldNames().mkString(".")))
    AccessLog.record(snap, (schema.fieldNames.toSeq ++ filtered).toSet)
  }

  /**
   * Whether each fragment read comes whole to one task, its rows in offset order: no fragment is
   * cut into row ranges (a task reads its fragments one after another, each from its first row
   * on) and no late materialization changes how its rows are read. A row-level UPDATE whose plan
   * keeps the scan's order then needs no exchange and sort (`write.OmniTableDeltaOperation`).
   */
  def deliversWholeFragments: Boolean = lateMaterialization.isEmpty && plan.executor.fold {
    val read = plan.fragments
    read.forall(_.wholeFragment) && read.map(_.fragmentId).distinct.size == read.size
  }(_.slices.forall(_.rowPiece.isEmpty)) // slices of whole batches or fragments never overlap

  override def columnarSupportMode(): Scan.ColumnarSupportMode = Scan.ColumnarSupportMode.SUPPORTED

  override def supportedCustomMetrics(): Array[CustomMetric] = ReadMetrics.all

  override def estimateStatistics(): Statistics = new Statistics {
    override def sizeInBytes(): OptionalLong = OptionalLong.of(math.max(plan.fileBytes, 1L))
    override def numRows(): OptionalLong = OptionalLong.of(plan.rows)
  }

  override def description(): String = {
    val c = plan.counts
    val pruned = Seq(
      "batch option" -> c.byBatchOption,
      "fragment option" -> c.byFragmentOption,
      "predicates" -> c.byPredicate,
      "stats" -> c.byStats,
      "empty" -> c.empty,
      "limit" -> c.byLimit
    ).filter(_._2 > 0).map { case (k, v) => s"$k $v" }
    val shown = 6
    val files = plan.files.take(shown).mkString(", ") +
      (if (plan.files.size > shown) s", ... ${plan.files.size - shown} more" else "")
    val listed = plan.executor match {
      case None => Seq(
          s"fragments=${c.kept}/${c.total}" + (if (pruned.isEmpty) "" else pruned.mkString(" (pruned: ", ", ", ")")),
          s"partitions=${plan.partitions.size}",
          s"files=${plan.files.size} [$files]"
        )
      case Some(e) => Seq(
          s"fragments=${c.total} (listed and pruned by the executors)",
          s"partitions=${e.slices.size} (slices of batches)",
          s"files<=${e.files}")
    }
    val parts = Seq(
      s"OmniTable ${snap.table.name} @ ${snap.snapshot.label}",
      s"groups=[${plan.groups.mkString(", ")}]") ++ listed ++ Seq(
      s"pushed=[${pushdown.predicates.map(_.toString).mkString(", ")}]"
    ) ++
      (if (pushdown.declined.isEmpty) Nil
       else Seq(s"declined=[${pushdown.declined.map(_._1.toString).mkString(", ")}]")) ++
      pushdown.limit.map(l => s"limit=$l") ++
      (if (optimizer.isEmpty) Nil else Seq(optimizer.mkString("optimizer=[", "; ", "]")))
    parts.mkString(", ")
  }

  /**
   * Scans are equal when they read the same snapshot into the same batches and the optimizer
   * marked them alike (Spark compares scans of logical plans, and reuses exchanges between
   * equal batches: [[OmniTableBatch]]).
   */
  override def equals(other: Any): Boolean = other match {
    case s: OmniTableScan => identity == s.identity
    case _ => false
  }

  override def hashCode(): Int = identity.hashCode()

  private lazy val identity: Seq[Any] = Seq(
    snap.warehouse,
    snap.table.tableId,
    snap.snapshot.version,
    snap.snapshot.segments,
    optimizer,
    OmniTableBatch.identity(snap.table.name, plan, schema, pushdown, conf, lateMaterialization)
  )

  override def toString: String = description()
}

object OmniTableScan {

  /** What was pushed into the scan; `rowFilter` is the data-column part Parquet statistics can test. */
  final case class Pushdown(
      predicates: Seq[Predicate],
      declined: Seq[(Predicate, String)],
      limit: Option[Int],
      rowFilter: Option[Filter])
}
