package io.omnitable.spark.read.plan

import scala.collection.mutable

import io.omnitable.spark.catalog.{DataPaths, FileEntry, FragmentEntry, FragmentListing, FragmentScope, TableSnapshot}
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.read.exec.{
  ColumnSource,
  FileSlice,
  Filter,
  FilterColumn,
  FragmentInputPartition,
  StatsEvaluator,
  StatsView,
  Value
}
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
    /** None: one partition per fragment. */
    maxRowsPerPartition: Option[Long])

/** Why fragments were left out, for EXPLAIN and tests. */
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

/** The planned read: input partitions plus what EXPLAIN and statistics report. */
final case class ScanPlan(
    partitions: Seq[FragmentInputPartition],
    counts: PruningCounts,
    /** Groups of the files opened, and those files (paths relative to the table). */
    groups: Seq[String],
    files: Seq[String],
    fileBytes: Long,
    rows: Long)

/**
 * Plans a read on the driver: the catalog lists only the fragments of the batch and fragment
 * options, with the files and statistics of the columns the scan needs ([[scope]]); this prunes
 * them further (exact predicates on batch name / fragment id, catalog min/max/null statistics), picks for each fragment the one file that
 * provides each requested column (docs/format.md: highest added_version), and cuts large
 * fragments into row ranges (which readers align to row groups). Pure: no Spark session, no I/O.
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
      val stats = fragmentStats(frag) _
      if (!StatsEvaluator.mightMatch(request.exactFilter, stats)) byPredicate += 1
      else if (frag.rowCount == 0) empty += 1
      else if (request.statsPruning && !StatsEvaluator.mightMatch(request.pruningFilter, stats)) byStats += 1
      else if (request.limit.exists(n => rows >= n)) byLimit += 1
      else {
        kept += frag
        rows += frag.rowCount
      }
    }
    val tableUri = snap.tableUri
    val partitions = mutable.ArrayBuffer.empty[FragmentInputPartition]
    // A file belongs to one fragment, so the files opened are just listed; files with the same
    // fields (those of one group, usually) share one read schema.
    val (paths, groups) = (mutable.ArrayBuffer.empty[String], mutable.SortedSet.empty[String])
    var bytes = 0L
    val schemas = mutable.HashMap.empty[Seq[StructField], StructType]
    kept.foreach { frag =>
      val (files, sources) = resolveFiles(frag, request.readColumns)
      files.foreach { f =>
        paths += f.path
        groups += f.groupName
        bytes += f.sizeBytes
      }
      val slices = files.map { f =>
        val fields = request.readColumns.collect {
          case s: ReadColumn.Stored if frag.fileFor(s.columnId).exists(_ eq f) =>
            s.field.copy(name = s.physicalName, nullable = true)
        }
        FileSlice(DataPaths.join(tableUri, f.path), schemas.getOrElseUpdate(fields, StructType(fields)), f.rowCount)
      }.toArray
      val ranges = request.maxRowsPerPartition.fold(Seq((0L, frag.rowCount)))(rowRanges(frag.rowCount, _))
      val alignTo = if (ranges.size > 1 && files.nonEmpty) files.indices.maxBy(files(_).sizeBytes) else -1
      ranges.foreach { case (start, end) =>
        partitions +=
          FragmentInputPartition(frag.fragmentId, frag.batchName, frag.rowCount, start, end, slices, sources, alignTo)
      }
    }
    val counts = PruningCounts(
      listing.total,
      listing.byBatchOption,
      listing.byFragmentOption,
      byPredicate,
      byStats,
      empty,
      byLimit)
    ScanPlan(partitions.toSeq, counts, groups.toSeq, paths.toSeq, bytes, rows)
  }

  /** What the catalog knows about a filter column over the whole fragment. */
  def fragmentStats(frag: FragmentEntry)(c: FilterColumn): StatsView = c.kind match {
    case FilterColumn.BatchName => StatsView.constant(Value.str(frag.batchName), frag.rowCount)
    case FilterColumn.FragmentId => StatsView.constant(Value.str(frag.fragmentId), frag.rowCount)
    case FilterColumn.Data => frag.fileFor(c.columnId) match {
        case None => StatsView.allNull(frag.rowCount)
        case Some(file) => StatsView.fromCatalog(file.columns(c.columnId), frag.rowCount, c.domain)
      }
  }

  /** The files to open for `columns` (each needed once) and where every column comes from. */
  private def resolveFiles(frag: FragmentEntry, columns: Seq[ReadColumn]): (Seq[FileEntry], Array[ColumnSource]) = {
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

  /** `[0, rows)` cut into near-equal ranges of at most `max` rows. */
  def rowRanges(rows: Long, max: Long): Seq[(Long, Long)] = {
    val n = ((rows + max - 1) / max).max(1L)
    (0L until n).map(i => (rows * i / n, rows * (i + 1) / n))
  }
}
