package io.omnitable.spark.read.plan

import scala.collection.mutable

import io.omnitable.spark.catalog.{
  DataPaths,
  FileEntry,
  FragmentEntry,
  FragmentListing,
  FragmentScope,
  Segment,
  TableSnapshot
}
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.read.exec.{
  ColumnSource,
  FileSlice,
  Filter,
  FilterColumn,
  FragmentInputPartition,
  PackedInputPartition,
  SliceInputPartition,
  SliceResolver,
  StatsEvaluator,
  StatsView,
  Value
}
import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.types.{StructField, StructType}

/** What a scan asks for, after pushdown. */
final case class ScanRequest(
    readColumns: Seq[ReadColumn],
    batches: Option[Seq[String]],
    fragments: Option[Seq[String]],
    /** Complete filters on per-fragment constants: pruning with them is exact. */
    exactFilter: Filter,
    /** Every converted filter (exact or not): fragments it rules out cannot match. */
    pruningFilter: Filter,
    statsPruning: Boolean,
    limit: Option[Int],
    /** None: fragments are not cut into row ranges. */
    maxRowsPerPartition: Option[Long],
    /** None: one input partition per fragment (or row range). */
    packing: Option[Packing] = None)

/**
 * How consecutive fragments are packed into one input partition, as Spark packs the files of
 * its file sources: each fragment costs the bytes of the files it reads plus `openCostBytes` per
 * file; the target size is `maxPartitionBytes`, lowered to spread the scan's total cost over
 * `minPartitions` partitions (never below `openCostBytes`); a partition holds at most `maxRows`
 * rows. A fragment cut into row ranges, or larger than the target, is alone in its partitions.
 */
final case class Packing(maxPartitionBytes: Long, openCostBytes: Long, minPartitions: Int, maxRows: Long) {

  /** The target size of a partition of a scan whose fragments cost `totalCost` together. */
  def targetBytes(totalCost: Long): Long =
    math.min(maxPartitionBytes, math.max(openCostBytes, totalCost / math.max(minPartitions, 1)))
}

/** Why fragments were left out, for EXPLAIN and tests (`empty`: no rows, or every row deleted). */
final case class PruningCounts(
    total: Int,
    byBatchOption: Int,
    byFragmentOption: Int,
    byPredicate: Int,
    byStats: Int,
    empty: Int,
    byLimit: Int) {
  def kept: Int = total - byBatchOption - byFragmentOption - byPredicate - byStats - empty - byLimit
}

/**
 * A scan planned on the executors ([[ExecutorPlanning]]): its slices, in table order, how a task
 * lists and plans its slice, and how many files the driver counted (an upper bound of those read).
 * `snapshot` names what the slices are slices of (warehouse, table id, version, segments): two
 * snapshots with the same batches have the same slices but not the same rows.
 */
final case class ExecutorPlan(
    slices: IndexedSeq[SliceInputPartition],
    resolver: SliceResolver,
    files: Long,
    snapshot: (String, String, Long, Seq[Segment]))

/**
 * The planned read: input partitions plus what EXPLAIN and statistics report. A scan planned on
 * the executors (`executor`) has no partitions of fragments and no files listed: its
 * counts are the snapshot's fragments, the groups those of its columns, `fileBytes` and `rows`
 * upper bounds from the catalog's stored counts.
 */
final case class ScanPlan(
    partitions: Seq[PackedInputPartition],
    counts: PruningCounts,
    /** Groups of the files opened, and those files (paths relative to the table). */
    groups: Seq[String],
    files: Seq[String],
    fileBytes: Long,
    /** Rows of the fragments read, deleted rows not counted. */
    rows: Long,
    executor: Option[ExecutorPlan] = None) {

  /** The fragments (or row ranges) read, in table order (none listed for a scan planned on the executors). */
  def fragments: Seq[FragmentInputPartition] = partitions.flatMap(_.fragments)

  /** What Spark's tasks read: the packed partitions, or the slices executors list. */
  def inputPartitions: Seq[InputPartition] = executor.fold[Seq[InputPartition]](partitions)(_.slices)
}

/**
 * Plans a read on the driver: the catalog lists only the fragments of the batch and fragment
 * options, with the files and statistics of the columns the scan needs ([[scope]]); this prunes
 * them further (exact predicates on batch name / fragment id, catalog min/max/null statistics), picks for each fragment the one file that
 * provides each requested column (docs/format.md: highest added_version), cuts large
 * fragments into row ranges (which readers align to row groups) and packs consecutive small
 * fragments into one input partition ([[Packing]]). Pure: no Spark session, no I/O.
 */
object ScanPlanner {

  /**
   * What `request` needs from the catalog: the fragments of its batch and fragment options, the
   * files of its stored and predicate columns, the statistics of its predicate columns.
   */
  def scope(request: ScanRequest): FragmentScope = {
    val predicate = (request.exactFilter.columns ++ request.pruningFilter.columns).collect {
      case c if c.kind == FilterColumn.Data => c.columnId
    }.toSet
    val stored = request.readColumns.collect { case s: ReadColumn.Stored => s.columnId }.toSet
    FragmentScope(request.batches, request.fragments, Some(stored ++ predicate), Some(predicate))
  }

  /** Plans `request` over `listing` (the catalog's answer to [[scope]]`(request)`, or a wider one). */
  def plan(snap: TableSnapshot, listing: FragmentListing, request: ScanRequest): ScanPlan = {
    if (listing.missingFragments.nonEmpty)
      throw OmniTableErrors.fragmentNotFound(snap.table.name, snap.snapshot.label, listing.missingFragments)
    var byPredicate, byStats, empty, byLimit = 0
    val kept = mutable.ArrayBuffer.empty[FragmentEntry]
    var rows = 0L
    listing.fragments.foreach { frag =>
      checkDeletes(snap, frag)
      val stats = fragmentStats(frag) _
      if (!StatsEvaluator.mightMatch(request.exactFilter, stats)) byPredicate += 1
      else if (frag.liveRows == 0) empty += 1
      else if (request.statsPruning && !StatsEvaluator.mightMatch(request.pruningFilter, stats)) byStats += 1
      else if (request.limit.exists(n => rows >= n)) byLimit += 1
      else {
        kept += frag
        rows += frag.liveRows
      }
    }
    val read = new ReadLayout(snap.tableUri, request.readColumns)
    kept.foreach(read.add(_, request.maxRowsPerPartition))
    val partitions = pack(read.slices.toIndexedSeq, read.sliceBytes.result(), request.packing)
    val counts = PruningCounts(
      listing.total,
      listing.byBatchOption,
      listing.byFragmentOption,
      byPredicate,
      byStats,
      empty,
      byLimit)
    ScanPlan(partitions, counts, read.groups.toSeq, read.paths.toSeq, read.bytes, rows)
  }

  /** Fails unless `frag`'s deletion vector (if any) deletes between 1 and all of its rows. */
  private def checkDeletes(snap: TableSnapshot, frag: FragmentEntry): Unit = frag.deletes.foreach { d =>
    if (d.deletedCount <= 0 || d.deletedCount > frag.rowCount) {
      throw OmniTableErrors.corruptDeletionVector(
        snap.table.name,
        frag.fragmentId,
        d.vectorId,
        s"its deleted_count ${d.deletedCount} is not between 1 and the fragment's ${frag.rowCount} rows")
    }
  }

  /**
   * What the catalog knows about a filter column over the whole fragment. Deleted rows are
   * counted as rows: the view over-approximates the live rows, so pruning with it stays safe.
   */
  def fragmentStats(frag: FragmentEntry)(c: FilterColumn): StatsView = c.kind match {
    case FilterColumn.BatchName => StatsView.constant(Value.str(frag.batchName), frag.rowCount)
    case FilterColumn.FragmentId => StatsView.constant(Value.str(frag.fragmentId), frag.rowCount)
    case FilterColumn.Data => frag.fileFor(c.columnId) match {
        case None => StatsView.allNull(frag.rowCount)
        case Some(file) => StatsView.fromCatalog(file.columns(c.columnId), frag.rowCount, c.domain)
      }
  }

  /** The files to open for `columns` (each needed once) and where every column comes from. */
  private[plan] def resolveFiles(
      frag: FragmentEntry,
      columns: Seq[ReadColumn]): (Seq[FileEntry], Array[ColumnSource]) = {
    val files = mutable.ArrayBuffer.empty[FileEntry]
    val fieldCount = mutable.ArrayBuffer.empty[Int]
    val sources = columns.map {
      case s: ReadColumn.Stored => frag.fileFor(s.columnId) match {
          case None => ColumnSource.Nulls
          case Some(f) =>
            val i = files.indexWhere(_ eq f) match {
              case -1 => files += f; fieldCount += 0; files.size - 1
              case k => k
            }
            val field = fieldCount(i)
            fieldCount(i) = field + 1
            ColumnSource.FromFile(i, field)
        }
      case ReadColumn.AppendName => ColumnSource.AppendName
      case ReadColumn.FragmentId => ColumnSource.FragmentId
      case ReadColumn.RowOffset => ColumnSource.RowOffset
    }
    (files.toSeq, sources.toArray)
  }

  /**
   * `slices` (in table order, `bytes` the bytes each reads) as input partitions: one each
   * without `packing`, else consecutive whole fragments packed next-fit up to the target size
   * and row cap of [[Packing]] (Spark's rule for file splits, keeping the table order).
   */
  def pack(
      slices: IndexedSeq[FragmentInputPartition],
      bytes: Array[Long],
      packing: Option[Packing]): IndexedSeq[PackedInputPartition] = packing match {
    case None => slices.map(s => PackedInputPartition(Array(s)))
    case Some(p) =>
      val costs = slices.indices.map(i => bytes(i) + p.openCostBytes * slices(i).files.length)
      val target = p.targetBytes(costs.sum)
      val out = mutable.ArrayBuffer.empty[PackedInputPartition]
      val current = mutable.ArrayBuffer.empty[FragmentInputPartition]
      var (cost, rows) = (0L, 0L)
      def close(): Unit = if (current.nonEmpty) {
        out += PackedInputPartition(current.toArray)
        current.clear()
        cost = 0L
        rows = 0L
      }
      slices.indices.foreach { i =>
        val s = slices(i)
        if (!s.wholeFragment || cost + costs(i) > target || rows + s.rows > p.maxRows) close()
        current += s
        cost += costs(i)
        rows += s.rows
        if (!s.wholeFragment) close()
      }
      close()
      out.toIndexedSeq
  }

  /** `[0, rows)` cut into near-equal ranges of at most `max` rows. */
  def rowRanges(rows: Long, max: Long): Seq[(Long, Long)] = {
    val n = ((rows + max - 1) / max).max(1L)
    (0L until n).map(i => (rows * i / n, rows * (i + 1) / n))
  }
}

/**
 * The fragment row ranges of a scan, built fragment by fragment in table order, with the files
 * they open. A file belongs to one fragment, so the files opened are just listed; files with the
 * same fields (those of one group, usually) share one read schema, and fragments with the same
 * column sources one array.
 */
private final class ReadLayout(tableUri: String, columns: Seq[ReadColumn]) {
  val slices = mutable.ArrayBuffer.empty[FragmentInputPartition]

  /** Bytes of the files each slice reads (pro rata of its rows). */
  val sliceBytes = mutable.ArrayBuilder.make[Long]
  val paths = mutable.ArrayBuffer.empty[String]
  val groups = mutable.SortedSet.empty[String]
  var bytes = 0L
  private val schemas = mutable.HashMap.empty[Seq[StructField], StructType]
  private val layouts = mutable.HashMap.empty[Seq[ColumnSource], Array[ColumnSource]]

  /** Adds `frag`, cut into ranges of at most `maxRows` rows if given. */
  def add(frag: FragmentEntry, maxRows: Option[Long]): Unit = {
    val (files, fileSources) = ScanPlanner.resolveFiles(frag, columns)
    val sources = layouts.getOrElseUpdate(fileSources.toSeq, fileSources)
    files.foreach { f =>
      paths += f.path
      groups += f.groupName
      bytes += f.sizeBytes
    }
    val fileSlices = files.map { f =>
      val fields = columns.collect {
        case s: ReadColumn.Stored if frag.fileFor(s.columnId).exists(_ eq f) =>
          s.field.copy(name = s.physicalName, nullable = true)
      }
      FileSlice(DataPaths.join(tableUri, f.path), schemas.getOrElseUpdate(fields, StructType(fields)), f.rowCount)
    }.toArray
    val fragmentBytes = files.map(_.sizeBytes).sum
    val ranges = maxRows.fold(Seq((0L, frag.rowCount)))(ScanPlanner.rowRanges(frag.rowCount, _))
    val alignTo = if (ranges.size > 1 && files.nonEmpty) files.indices.maxBy(files(_).sizeBytes) else -1
    ranges.foreach { case (start, end) =>
      slices +=
        FragmentInputPartition(
          frag.fragmentId,
          frag.batchName,
          frag.rowCount,
          start,
          end,
          fileSlices,
          sources,
          alignTo,
          frag.deletes)
      sliceBytes += (if (frag.rowCount == 0) 0L else (BigInt(fragmentBytes) * (end - start) / frag.rowCount).toLong)
    }
  }
}
