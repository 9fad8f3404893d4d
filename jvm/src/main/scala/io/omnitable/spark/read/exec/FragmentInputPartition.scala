package io.omnitable.spark.read.exec

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
 * Rows `[rowStart, rowEnd)` of one fragment. Carries everything an executor needs and nothing
 * driver-local: absolute file URIs, row range, per-file schemas and per-column sources (in the
 * order of the scan's read schema). A fragment split into several partitions names in `alignTo`
 * the file (its largest) whose row-group boundaries the reader moves both ends of the range to
 * ([[RowRanges.alignToRowGroup]]), so each of that file's row groups is read by one partition
 * only; -1: the range is read as given.
 */
final case class FragmentInputPartition(
    fragmentId: String,
    batchName: String,
    fragmentRows: Long,
    rowStart: Long,
    rowEnd: Long,
    files: Array[FileSlice],
    sources: Array[ColumnSource],
    alignTo: Int = -1) extends InputPartition {

  def rows: Long = rowEnd - rowStart
}
