package org.apache.spark.sql.execution.datasources.parquet

import org.apache.parquet.column.page.PageReadStore
import org.apache.parquet.hadoop.ParquetFileReader
import org.apache.parquet.internal.column.columnindex.OffsetIndex
import org.apache.parquet.internal.filter2.columnindex.RowRanges

/**
 * Spark's vectorized Parquet reader, decoding only chosen rows of each row group (OmniTable's
 * late materialization). After `initialize(...)` as usual, [[restrictTo]] hands it a file
 * reader and one [[RowRanges]] per row group of the footer it was initialized with: Parquet
 * then fetches only the pages that hold those rows (through the file's offset index, which the
 * file must have) and Spark decodes only those rows; batches hold exactly them, in order.
 *
 * Lives in Spark's package because the row-group reader interface it plugs in is package-private.
 */
final class OmniTableRowRangesReader(batchSize: Int)
    extends VectorizedParquetRecordReader(null, "CORRECTED", "UTC", "CORRECTED", "UTC", false, batchSize) {

  /** Reads row group `i` of `file`'s blocks through `ranges(i)` (non-empty) from now on. */
  def restrictTo(file: ParquetFileReader, ranges: IndexedSeq[RowRanges]): Unit = {
    if (reader != null) reader.close()
    file.setRequestedSchema(requestedSchema)
    reader = new SpecificParquetRecordReaderBase.ParquetRowGroupReader {
      private var next = 0
      override def readNextRowGroup(): PageReadStore =
        if (next >= ranges.size) null
        else {
          val pages = file.readFilteredRowGroup(next, ranges(next))
          next += 1
          pages
        }
      override def close(): Unit = file.close()
    }
    totalRowCount = ranges.map(_.rowCount()).sum
  }
}

object OmniTableRowRangesReader {

  /**
   * Row ranges holding exactly the rows `runs` (`(first, last)` inclusive, sorted, row
   * numbers within a row group of `rowCount` rows). Parquet builds ranges only from page
   * indexes, so the runs are presented as the "pages" of an offset index.
   */
  def rowRanges(rowCount: Long, runs: IndexedSeq[(Long, Long)]): RowRanges = {
    val index = new OffsetIndex {
      override def getPageCount: Int = runs.size
      override def getOffset(pageIndex: Int): Long = 0L
      override def getCompressedPageSize(pageIndex: Int): Int = 0
      override def getFirstRowIndex(pageIndex: Int): Long = runs(pageIndex)._1
      override def getLastRowIndex(pageIndex: Int, rowGroupRowCount: Long): Long = runs(pageIndex)._2
    }
    RowRanges.create(rowCount, java.util.stream.IntStream.range(0, runs.size).iterator(), index)
  }
}
