package io.omnitable.spark.read.exec

import org.apache.parquet.hadoop.metadata.ColumnChunkMetaData
import org.apache.parquet.internal.column.columnindex.OffsetIndex
import org.apache.spark.sql.vectorized.ColumnVector

/** Cursors over chosen rows of a column file (late materialization), see [[ColumnFile.openRows]]. */
private[exec] object RowsCursor {

  /** A cursor, the compressed bytes it reads and the row groups it touches. */
  final case class Opened(cursor: RowCursor, bytes: Long, rowGroups: Long)

  /** Consecutive runs `(first, last)` (inclusive) of increasing rows. */
  def runs(rows: Array[Long]): IndexedSeq[(Long, Long)] = {
    val out = IndexedSeq.newBuilder[(Long, Long)]
    var i = 0
    while (i < rows.length) {
      var j = i
      while (j + 1 < rows.length && rows(j + 1) == rows(j) + 1) j += 1
      out += ((rows(i), rows(j)))
      i = j + 1
    }
    out.result()
  }

  /** Compressed bytes of `chunk`'s pages holding any of `rows` (plus its dictionary page, if any). */
  def pageBytes(chunk: ColumnChunkMetaData, index: OffsetIndex, rows: Array[Long]): Long = {
    var bytes = 0L
    var k = 0
    var p = 0
    while (p < index.getPageCount) {
      val last = index.getLastRowIndex(p, Long.MaxValue)
      while (k < rows.length && rows(k) < index.getFirstRowIndex(p)) k += 1
      if (k < rows.length && rows(k) <= last) bytes += index.getCompressedPageSize(p)
      p += 1
    }
    val dictionary = if (index.getPageCount > 0) index.getOffset(0) - chunk.getStartingPos else 0L
    if (bytes > 0) bytes + math.max(dictionary, 0L) else 0L
  }

  /**
   * Picks `wanted` (increasing fragment rows) out of `inner`, a cursor over the rows from
   * `wanted.head` to `wanted.last` of a file decoded in full (no offset index to do better).
   */
  final class Picking(inner: Option[FileCursor], wanted: Array[Long]) extends RowCursor {
    private var row = wanted.headOption.getOrElse(0L) // fragment row at inner's position
    private var next = 0 // index in `wanted` of the first row not yet in a window
    private var window = 0 // rows of inner's current batch that the current picks come from
    private var picks: Array[Int] = Array.emptyIntArray
    private var taken = 0

    override def available(): Int = {
      while (taken == picks.length) {
        val in = inner.getOrElse(throw new IllegalStateException("no rows were asked for"))
        if (window > 0) {
          in.advance(window)
          row += window
        }
        window = in.available()
        var k = next
        while (k < wanted.length && wanted(k) < row + window) k += 1
        picks = Array.tabulate(k - next)(t => (wanted(next + t) - row).toInt)
        next = k
        taken = 0
      }
      picks.length - taken
    }

    override def column(i: Int, n: Int): ColumnVector =
      new IndexedColumnVector(inner.get.column(i, window), picks, taken, n)

    override def advance(n: Int): Unit = taken += n

    override def close(): Unit = inner.foreach(_.close())
  }
}
