package io.omnitable.spark.read.plan

import scala.collection.mutable

import io.omnitable.spark.catalog.{BatchOutline, BatchSlice, CatalogReader, ScanOutline, TableSnapshot}
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}
import io.omnitable.spark.read.exec.{PackedInputPartition, SliceInputPartition, SliceResolver}

/**
 * Planning a full scan on the executors (docs/spark.md, "Planning on the executors"). A plan on
 * the driver lists every fragment and file the scan reads: at 300,000 fragments that is
 * 600,000 catalog rows and seconds of driver time before the first task starts. Instead, the
 * driver reads the visible batches (one row each, with their stored row and fragment counts) and
 * the count and bytes of the files carrying the scan's columns, and cuts the table into slices
 * of whole batches; each task lists its slice's fragments and files when it starts, and plans
 * them with [[ScanPlanner.plan]], the driver's own code: the same pruning, the same files, the
 * same rows in the same order.
 *
 * Partitions follow [[Packing]] at batch grain: consecutive batches are packed next-fit up to
 * the target size and row cap, estimating a batch's cost from its rows (the scan's bytes per
 * row, over the whole snapshot) and its fragments (open cost per file). A batch costing more than
 * twice the target, or holding more than twice the row cap, is cut at fragment boundaries (its
 * fragments' sequence numbers and row counts are read for that), and a fragment of such a batch
 * holding more rows than the cap is read in the row ranges a driver plan would cut it into. So
 * no task reads more than about twice what a driver-planned task would.
 */
private[plan] object ExecutorPlanning {

  /** A cost estimate per batch: bytes of its files plus the open cost of each file. */
  private final case class Costs(bytesPerRow: Double, openPerFragment: Double) {
    def of(rows: Long, fragments: Long): Double = rows * bytesPerRow + fragments * openPerFragment
  }

  /**
   * Whether `request` may be planned on the executors: a read of every batch without a limit,
   * whose fragments the planner may pack (with `split_fragments=false` each fragment has its own
   * partition, which only a listing gives).
   */
  def applies(request: ScanRequest): Boolean =
    request.batches.isEmpty && request.fragments.isEmpty && request.limit.isEmpty && request.packing.isDefined

  /**
   * `request` of `handle`'s snapshot planned on the executors, if it [[applies]], the catalog's
   * address can go to executors and the snapshot holds at least `minFragments` fragments.
   * Reads one row per visible batch (and nothing more when there are fewer fragments), the
   * scan's files counted and summed, and the fragments of the batches cut into several slices.
   */
  def plan(handle: TableHandle, request: ScanRequest, minFragments: Long): Option[ScanPlan] = for {
    packing <- request.packing if applies(request)
    warehouse <- handle.reader.executorWarehouse
    snap = handle.snapshot
    stored = request.readColumns.collect { case s: ReadColumn.Stored => s.columnId }.toSet
    outline <- handle.reader.scanOutline(snap, Some(stored), minFragments)
  } yield {
    val slices = this.slices(outline, packing, request.maxRowsPerPartition, handle.reader.fragmentSeqs(snap, _))
    val groups = snap.columns.filter(c => stored.contains(c.columnId)).map(_.groupName).distinct.sorted
    val resolver = new ExecutorSlicePlanner(warehouse, snap.copy(columns = Nil), request.copy(packing = None))
    ScanPlan(
      Nil,
      PruningCounts(outline.fragments.toInt, 0, 0, 0, 0, 0, 0),
      groups,
      Nil,
      outline.bytes,
      outline.rows,
      Some(ExecutorPlan(
        slices,
        resolver,
        outline.files,
        (snap.warehouse, snap.table.tableId, snap.snapshot.version, snap.snapshot.segments)))
    )
  }

  /**
   * The slices of `outline` ([[SliceInputPartition]]s in table order) under `packing`, with
   * `seqs` giving the `(seq, rows)` of the visible fragments of the batches that need cutting.
   */
  def slices(
      outline: ScanOutline,
      packing: Packing,
      maxRowsPerFragment: Option[Long],
      seqs: Seq[String] => Map[String, IndexedSeq[(Long, Long)]]): IndexedSeq[SliceInputPartition] = {
    val batches = outline.batches // a batch whose counts say empty is still listed by its task
    val totalRows = batches.iterator.map(_.rows).sum
    val totalFragments = batches.iterator.map(_.fragments).sum
    val costs = Costs(
      if (totalRows == 0) 0.0 else outline.bytes.toDouble / totalRows,
      if (totalFragments == 0) 0.0 else packing.openCostBytes * outline.files.toDouble / totalFragments)
    val target = packing.targetBytes(batches.iterator.map(b => costs.of(b.rows, b.fragments)).sum.toLong).toDouble
    def tooLarge(b: BatchOutline) = costs.of(b.rows, b.fragments) > 2 * target || b.rows > 2 * packing.maxRows
    val cut = batches.filter(tooLarge).map(_.batchId)
    val cutSeqs = if (cut.isEmpty) Map.empty[String, IndexedSeq[(Long, Long)]] else seqs(cut)
    val out = mutable.ArrayBuffer.empty[SliceInputPartition]
    val current = mutable.ArrayBuffer.empty[String]
    var (cost, rows) = (0.0, 0L)
    def close(): Unit = if (current.nonEmpty) {
      out += SliceInputPartition(BatchSlice(current.toSeq))
      current.clear()
      cost = 0.0
      rows = 0L
    }
    batches.foreach { b =>
      if (tooLarge(b)) {
        close()
        out ++= cutBatch(
          b.batchId,
          cutSeqs.getOrElse(b.batchId, IndexedSeq.empty),
          costs,
          target,
          packing,
          maxRowsPerFragment)
      } else {
        val c = costs.of(b.rows, b.fragments)
        if (cost + c > target || rows + b.rows > packing.maxRows || current.size == BatchSlice.MaxBatches) close()
        current += b.batchId
        cost += c
        rows += b.rows
      }
    }
    close()
    out.toIndexedSeq
  }

  /**
   * Batch `batchId` (its fragments' `(seq, rows)` in seq order) as slices of consecutive
   * fragments packed next-fit; a fragment over the row cap alone, in its row ranges (slices of
   * the same sequence range). The slices of the first fragment start at the smallest sequence
   * number and those of the last end past the largest.
   */
  private def cutBatch(
      batchId: String,
      fragments: IndexedSeq[(Long, Long)],
      costs: Costs,
      target: Double,
      packing: Packing,
      maxRowsPerFragment: Option[Long]): Seq[SliceInputPartition] = {
    if (fragments.isEmpty) return Seq(SliceInputPartition(BatchSlice(Seq(batchId))))
    val starts = mutable.ArrayBuffer.empty[(Int, Option[Int])] // first fragment of each slice, row piece
    var (cost, rows) = (0.0, 0L)
    fragments.indices.foreach { i =>
      val (_, n) = fragments(i)
      val pieces = maxRowsPerFragment.fold(1L)(max => ScanPlanner.rowRanges(n, max).size.toLong)
      if (pieces > 1) {
        (0 until pieces.toInt).foreach(p => starts += ((i, Some(p))))
        cost = Double.MaxValue // the next fragment starts a slice
      } else {
        val c = costs.of(n, 1)
        if (starts.isEmpty || cost + c > target || rows + n > packing.maxRows) {
          starts += ((i, None))
          cost = 0.0
          rows = 0L
        }
        cost += c
        rows += n
      }
    }
    starts.indices.map { k =>
      val (first, piece) = starts(k)
      val from = if (first == 0) Long.MinValue else fragments(first)._1
      val until = piece match {
        case Some(_) => if (first + 1 < fragments.size) fragments(first + 1)._1 else Long.MaxValue
        case None => starts.lift(k + 1).fold(Long.MaxValue)(s => fragments(s._1)._1)
      }
      SliceInputPartition(BatchSlice(Seq(batchId), Some((from, until))), piece)
    }
  }
}

/**
 * Lists and plans one slice on the executor running its task: the catalog reader of
 * `warehouse` (an address without a literal password: [[CatalogReader.executorWarehouse]]) lists
 * the slice's fragments of `snap` with their files and statistics, [[ScanPlanner.plan]] plans
 * `request` over them (no packing: the task reads them all, in table order).
 */
private[plan] final class ExecutorSlicePlanner(warehouse: String, snap: TableSnapshot, request: ScanRequest)
    extends SliceResolver {

  override def resolve(part: SliceInputPartition): PackedInputPartition = {
    val listing =
      try new CatalogReader(warehouse).listSlice(snap, ScanPlanner.scope(request).copy(slice = Some(part.slice)))
      catch {
        case e: OmniTableAnalysisException if e.omniErrorClass != "OMNITABLE_SNAPSHOT_GONE" =>
          throw OmniTableErrors.executorPlanningFailed(snap.table.name, snap.warehouse, e)
        case e: java.sql.SQLException => // a connection the pool could not open
          throw OmniTableErrors.executorPlanningFailed(snap.table.name, snap.warehouse, e)
      }
    val sliced = part.rowPiece.fold(request.copy(maxRowsPerPartition = None))(_ => request)
    val fragments = ScanPlanner.plan(snap, listing, sliced).fragments
    part.rowPiece match {
      case None => PackedInputPartition(fragments.toArray)
      case Some(p) => PackedInputPartition(fragments.lift(p).toArray) // pruned: nothing to read
    }
  }
}
