package io.omnitable.spark.catalog

import org.apache.spark.sql.types.DataType

/** Names shared with the Python side (python/omnitable/catalog/records.py). */
object SystemColumns {
  val RowId = "_ai_unique_id_"
  val AppendName = "_ai_append_name_"

  /** Metadata columns (SELECT them by name; not part of `SELECT *`). */
  val Fragment = "_ai_fragment_"
  val RowOffset = "_ai_row_offset_"
  val MainBranch = "main"
}

/**
 * A row of `tables`. `location` is relative to the data root (or an absolute URI); `properties`
 * are the table's properties (`create_table(properties=...)`), values as text (JSON numbers and
 * booleans as written, strings unquoted).
 */
final case class TableEntry(tableId: String, name: String, location: String, properties: Map[String, String])

/** A visible, non-dropped row of `columns`; `dataType` is `ddl` parsed by Spark. */
final case class ColumnEntry(
    columnId: Int,
    name: String,
    physicalName: String,
    ddl: String,
    dataType: DataType,
    nullable: Boolean,
    position: Int,
    state: String,
    groupName: String,
    feature: Option[String])

/** One `(branch, upto)` segment of a snapshot (docs/catalog.md, "Resolving a snapshot"). */
final case class Segment(branch: String, upto: Long)

/**
 * A resolved snapshot name. `branch` is set when the snapshot is a branch head (or a version
 * read through a branch); `label` says how the user named it, for EXPLAIN and errors.
 */
final case class SnapshotId(version: Long, segments: Seq[Segment], label: String)

/** Statistics of one column in one file, still in the catalog's text encoding. */
final case class FileColumnStats(nullCount: Option[Long], min: Option[String], max: Option[String])

/** A visible row of `files`, with the columns of its column set (`column_sets`) and their statistics. */
final case class FileEntry(
    fileId: String,
    fragmentId: String,
    groupName: String,
    path: String,
    rowCount: Long,
    sizeBytes: Long,
    addedVersion: Long,
    columns: Map[Int, FileColumnStats])

/** Statistics left out of a listing (its columns are not a predicate column of the scan). */
object FileColumnStats {
  val Unknown: FileColumnStats = FileColumnStats(None, None, None)
}

/**
 * The part of a snapshot a scan reads, pushed into the catalog's SQL (None: no restriction):
 * the fragments of `batches` (append names), of `fragments` (ids) and of `slice` (batch ids, as
 * an executor lists its share of a scan planned there); of each fragment's visible files, the
 * columns of `columns` their sets carry (files carrying none of them are left out), with
 * statistics for `statsColumns` only ([[FileColumnStats.Unknown]] for the others).
 */
final case class FragmentScope(
    batches: Option[Seq[String]] = None,
    fragments: Option[Seq[String]] = None,
    columns: Option[Set[Int]] = None,
    statsColumns: Option[Set[Int]] = None,
    slice: Option[BatchSlice] = None)

/**
 * Some fragments of a snapshot named by their batches: every fragment of `batchIds`, or with
 * `seqRange = Some((from, until))` the fragments of the one batch of `batchIds` whose `seq` is
 * in `[from, until)`. Batch ids (not names) are what one append wrote, so slices of a snapshot
 * never overlap.
 */
final case class BatchSlice(batchIds: Seq[String], seqRange: Option[(Long, Long)] = None) {
  require(batchIds.nonEmpty, "a batch slice names at least one batch")
  require(seqRange.isEmpty || batchIds.size == 1, "a sequence range applies to one batch")
  require(batchIds.size <= BatchSlice.MaxBatches, s"a batch slice names at most ${BatchSlice.MaxBatches} batches")
}

object BatchSlice {

  /** The most batches one slice names (they are sent as SQL parameters). */
  val MaxBatches = 1000
}

/** A visible batch as its row stores it (counts kept by every commit), in table order. */
final case class BatchOutline(batchId: String, name: String, rows: Long, fragments: Long)

/**
 * What the driver reads to plan a full scan on the executors (docs/spark.md, "Planning on the
 * executors"): the visible batches in table order, and the number and bytes of the
 * visible files of the column sets that carry the scan's columns (a file per fragment and set;
 * a column carried by two sets of a fragment counts twice, so `bytes` bounds the read from above).
 */
final case class ScanOutline(batches: IndexedSeq[BatchOutline], files: Long, bytes: Long) {
  def fragments: Long = batches.iterator.map(_.fragments).sum
  def rows: Long = batches.iterator.map(_.rows).sum
}

object FragmentScope {
  val All: FragmentScope = FragmentScope()
}

/**
 * The visible fragments of a [[FragmentScope]] in table order, how many visible fragments the
 * snapshot has, how many the batch option and then the fragment option left out, and the
 * requested fragment ids the snapshot does not have.
 */
final case class FragmentListing(
    fragments: Seq[FragmentEntry],
    total: Int,
    byBatchOption: Int,
    byFragmentOption: Int,
    missingFragments: Seq[String])

/**
 * The visible deletion vector of a fragment (schema.sql, `deletion_vectors`): `deletedCount`
 * rows are deleted; `vector` is still encoded ([[DeletionVectors.decode]] reads it where the rows
 * are read, so planning never holds bitmaps).
 */
final case class DeletionVectorEntry(vectorId: String, deletedCount: Long, vector: String)

/** A visible fragment with its visible files and, if some of its rows are deleted, its deletion vector. */
final case class FragmentEntry(
    fragmentId: String,
    batchId: String,
    batchName: String,
    rowCount: Long,
    path: String,
    files: Seq[FileEntry],
    deletes: Option[DeletionVectorEntry] = None) {

  /** Rows not deleted (the catalog's `deleted_count` subtracted). */
  def liveRows: Long = rowCount - deletes.fold(0L)(_.deletedCount)

  /** For each column id, the file providing it (computed once: scans ask per column and fragment). */
  private lazy val providers: Map[Int, FileEntry] = {
    val best = scala.collection.mutable.HashMap.empty[Int, FileEntry]
    files.foreach { f =>
      f.columns.keysIterator.foreach { id =>
        best.get(id) match {
          case Some(b)
              if b.addedVersion > f.addedVersion ||
                (b.addedVersion == f.addedVersion && b.fileId.compareTo(f.fileId) >= 0) =>
          case _ => best(id) = f
        }
      }
    }
    best.toMap
  }

  /** The file providing `columnId`: the visible one carrying it with the highest added_version. */
  def fileFor(columnId: Int): Option[FileEntry] = providers.get(columnId)
}

/**
 * A table at one snapshot, as far as schema and planning need: where its data is, its columns
 * and the snapshot's segments. Fragments are loaded separately (only when a scan is planned).
 *
 * @param dataRoot the warehouse data root as a URI (`file:/abs/dir/`, `s3://bucket/wh`, ...)
 */
final case class TableSnapshot(
    warehouse: String,
    dataRoot: String,
    table: TableEntry,
    snapshot: SnapshotId,
    columns: Seq[ColumnEntry],
    /** How many batches are visible (their names are read only where needed: [[CatalogReader.batchNames]]). */
    batchCount: Int) {

  /** The stored `_ai_unique_id_` column (column 0 of group `base`). */
  def rowIdColumn: ColumnEntry = columns.find(_.name == SystemColumns.RowId).getOrElse(
    throw io.omnitable.spark.errors.OmniTableErrors.corruptCatalog(
      warehouse,
      s"table '${table.name}' has no ${SystemColumns.RowId} column"))

  /** User columns in position order (system columns excluded). */
  def userColumns: Seq[ColumnEntry] = columns.filterNot(_.name == SystemColumns.RowId)

  /** The table's data directory as a URI string (no trailing slash). */
  def tableUri: String = DataPaths.join(dataRoot, table.location)
}
