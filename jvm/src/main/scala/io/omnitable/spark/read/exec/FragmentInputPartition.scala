package io.omnitable.spark.read.exec

import io.omnitable.spark.catalog.{BatchSlice, DeletionVectorEntry}
import org.apache.spark.sql.connector.read.InputPartition
import org.apache.spark.sql.types.StructType

/**
 * One column file a partition reads: its absolute URI, the fields to read from it (Parquet
 * field names = physical names, logical types) and its row count (= the fragment's).
 */
final case class FileSlice(uri: String, requestedSchema: StructType, rowCount: Long)

/** Where one output column of a partition comes from. */
sealed trait ColumnSource extends Serializable

object ColumnSource {

  /** Field `field` of file `file` (indices into [[FragmentInputPartition.files]] / its schema). */
  final case class FromFile(file: Int, field: Int) extends ColumnSource

  /** No visible file of the fragment carries the column: NULL. */
  case object Nulls extends ColumnSource
  case object AppendName extends ColumnSource
  case object FragmentId extends ColumnSource
  case object RowOffset extends ColumnSource
}

/**
 * Rows `[rowStart, rowEnd)` of one fragment, read by one [[FragmentColumnarReader]]. Carries
 * everything an executor needs and nothing driver-local: absolute file URIs, row range,
 * per-file schemas and per-column sources (in the order of the scan's read schema; fragments
 * with the same layout share one array). A fragment split into several ranges names in
 * `alignTo` the file (its largest) whose row-group boundaries the reader moves both ends of the
 * range to ([[RowRanges.alignToRowGroup]]), so each of that file's row groups is read by one
 * range only; -1: the range is read as given. `deletes` is the fragment's deletion vector (still
 * encoded, so a partition of a fragment without deleted rows carries nothing more): the reader
 * returns none of the rows it marks.
 */
final case class FragmentInputPartition(
    fragmentId: String,
    batchName: String,
    fragmentRows: Long,
    rowStart: Long,
    rowEnd: Long,
    files: Array[FileSlice],
    sources: Array[ColumnSource],
    alignTo: Int = -1,
    deletes: Option[DeletionVectorEntry] = None) {

  def rows: Long = rowEnd - rowStart

  /** Whether this reads the whole fragment (it was not cut into row ranges). */
  def wholeFragment: Boolean = rowStart == 0 && rowEnd == fragmentRows
}

/**
 * What one Spark task reads: fragments (or one row range of a fragment) in table order, one
 * after another ([[PackedColumnarReader]]). The planner packs consecutive small fragments
 * together up to a target size (docs/spark.md, "Partitions"); a row range is always alone.
 */
final case class PackedInputPartition(fragments: Array[FragmentInputPartition]) extends InputPartition {
  def rows: Long = fragments.iterator.map(_.rows).sum
}

/**
 * What one task of a scan planned on the executors reads (docs/spark.md, "Planning on the
 * executors"): the fragments of `slice`, which the task lists from the catalog when it starts
 * ([[SliceResolver]]), in table order; with `rowPiece = Some(i)` the slice is one fragment and
 * the task reads its `i`-th row range (the ranges a driver-planned scan would cut it into).
 */
final case class SliceInputPartition(slice: BatchSlice, rowPiece: Option[Int] = None) extends InputPartition

/** Lists and plans a [[SliceInputPartition]] on the executor running it (serialized with the reader factory). */
trait SliceResolver extends Serializable {
  def resolve(part: SliceInputPartition): PackedInputPartition
}
