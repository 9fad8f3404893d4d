package io.omnitable.spark.read.exec

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader
import org.apache.spark.sql.vectorized.{ColumnarBatch, ColumnVector}

/**
 * Walks `rows` rows of one column file, after skipping the first `skip` rows of the first
 * selected row group. Exposes the current decoded batch from the current position; the zip
 * takes as many rows as every file has ready and advances all cursors by that amount.
 */
private[exec] final class FileCursor(uri: String, reader: VectorizedParquetRecordReader, skip: Long, rows: Long)
    extends RowCursor {

  private val batch: ColumnarBatch = reader.resultBatch()
  private var pos = 0
  private var toSkip = skip
  private var remaining = rows

  /** Rows ready in the current batch (at least 1 while rows remain; loads the next batch). */
  override def available(): Int = {
    while (pos >= batch.numRows() || toSkip > 0) {
      if (pos >= batch.numRows()) {
        if (!reader.nextBatch()) throw OmniTableErrors.fileEndedEarly(uri, remaining)
        pos = 0
      }
      val s = math.min(toSkip, (batch.numRows() - pos).toLong).toInt
      pos += s
      toSkip -= s
    }
    math.min(batch.numRows() - pos, remaining).toInt
  }

  /** Field `i` for the next `n` rows (a view; valid until the next [[advance]] past it). */
  override def column(i: Int, n: Int): ColumnVector = OffsetColumnVector.view(batch.column(i), pos, n)

  override def advance(n: Int): Unit = {
    pos += n
    remaining -= n
  }

  override def close(): Unit = reader.close()
}
