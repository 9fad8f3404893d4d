package io.omnitable.spark.read.exec

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.vectorized.{ColumnarBatch, ColumnVector}

/**
 * Every row of one fragment from some of its column files, in order, batch by batch: for each
 * batch, one [[ColumnarBatch]] per file (its requested fields, aligned: row `i` of every batch is
 * the same fragment row). What an update reads to carry a fragment's current values into the
 * file it rewrites (the files are checked to hold exactly the fragment's rows first).
 */
final class AlignedFilesReader(files: Seq[FileSlice], fragmentRows: Long, conf: Configuration, batchSize: Int = 4096)
    extends AutoCloseable {

  private val cursors: Seq[RowCursor] = {
    val opened = scala.collection.mutable.ArrayBuffer.empty[RowCursor]
    try {
      files.foreach { s =>
        val f = new ColumnFile(s, conf, batchSize)
        f.validate(fragmentRows)
        if (fragmentRows > 0) opened += f.open(0, fragmentRows)
      }
      opened.toSeq
    } catch {
      case NonFatal(e) =>
        opened.foreach(c => scala.util.Try(c.close()))
        throw e
    }
  }

  private var row = 0L // the first row of the current batch
  private var rows = 0 // the rows of the current batch (not yet advanced past)

  /** Calls `fn(firstRow, rows, batches)` for consecutive batches covering rows `[0, fragmentRows)`. */
  def foreachBatch(fn: (Long, Int, Seq[ColumnarBatch]) => Unit): Unit = {
    var next = nextBatch()
    while (next.isDefined) {
      fn(row, rows, next.get)
      next = nextBatch()
    }
  }

  /**
   * Pull-style reading: the batches (one per file, aligned) of the next [[batchRows]] rows from
   * [[firstRow]] on; None after the last row. A batch is valid until the next call.
   */
  def nextBatch(): Option[Seq[ColumnarBatch]] = {
    if (rows > 0) { cursors.foreach(_.advance(rows)); row += rows; rows = 0 }
    if (row >= fragmentRows) return None
    val n = cursors.map(_.available()).foldLeft(math.min(batchSize.toLong, fragmentRows - row).toInt)(math.min)
    rows = n
    Some(cursors.zip(files).map { case (c, s) =>
      new ColumnarBatch(s.requestedSchema.indices.map(i => c.column(i, n)).toArray[ColumnVector], n)
    })
  }

  /** The fragment row of the first row of the batch [[nextBatch]] returned last. */
  def firstRow: Long = row

  /** The rows of the batch [[nextBatch]] returned last. */
  def batchRows: Int = rows

  override def close(): Unit = cursors.foreach(c =>
    try c.close()
    catch { case NonFatal(_) => })
}
