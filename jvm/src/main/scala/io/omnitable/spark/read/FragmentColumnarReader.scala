package io.omnitable.spark.read

import scala.collection.mutable

import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.vectorized.{ColumnarBatch, ColumnVector}

/** What every reader of one scan shares (serialized once per task with the reader factory). */
final case class ReaderContext(
    readSchema: StructType,
    batchSize: Int,
    rowFilter: Option[Filter],
    rowGroupFiltering: Boolean,
    limit: Option[Long],
    hadoopConf: Broadcast[SerializableHadoopConf])

/**
 * The merge-on-read zip (DESIGN.md §6): reads one fragment row range by opening one Parquet
 * reader per needed column file and zipping their column vectors into one `ColumnarBatch` —
 * no key join, no copy. Files are aligned row by row but their row groups (hence decoded
 * batches) may start at different rows, so each output batch holds as many rows as every file
 * has ready and shows each file's vectors through an offset view. Columns no file carries read
 * as NULL; `_ai_append_name_`, `_ai_fragment_` and `_ai_row_offset_` are computed vectors.
 *
 * With pushed data filters, row groups whose Parquet statistics rule the filter out (in the
 * file that carries the column) are skipped in every file, which keeps the zip aligned.
 */
private[read] final class FragmentColumnarReader(part: FragmentInputPartition, ctx: ReaderContext)
    extends PartitionReader[ColumnarBatch] {

  private val files = part.files.map(new ColumnFile(_, ctx.hadoopConf.value.value, ctx.batchSize))
  private lazy val appendName = ConstantVectors.string(part.batchName, ctx.batchSize)
  private lazy val fragmentId = ConstantVectors.string(part.fragmentId, ctx.batchSize)

  private var ranges: Iterator[(Long, Long)] = _
  private var cursors: Array[FileCursor] = Array.empty
  private var rangeRemaining = 0L
  private var nextRow = 0L
  private var emitted = 0L
  private var current: ColumnarBatch = _

  private var bytesRead, filesOpened, rowGroupsRead, rowGroupsSkipped = 0L

  override def next(): Boolean = {
    if (ranges == null) ranges = planRanges().iterator
    if (ctx.limit.exists(emitted >= _)) return false
    while (rangeRemaining == 0) {
      closeCursors()
      if (!ranges.hasNext) return false
      openRange(ranges.next())
    }
    val cap = if (cursors.isEmpty) Int.MaxValue.toLong else ctx.batchSize.toLong
    var n = math.min(rangeRemaining, cap)
    ctx.limit.foreach(l => n = math.min(n, l - emitted))
    var i = 0
    while (i < cursors.length) { n = math.min(n, cursors(i).available().toLong); i += 1 }
    current = assemble(n.toInt)
    cursors.foreach(_.advance(n.toInt))
    rangeRemaining -= n
    nextRow += n
    emitted += n
    true
  }

  override def get(): ColumnarBatch = current

  override def close(): Unit = closeCursors()

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    ReadMetrics.task(ReadMetrics.BytesRead, bytesRead),
    ReadMetrics.task(ReadMetrics.FilesOpened, filesOpened),
    ReadMetrics.task(ReadMetrics.RowGroupsRead, rowGroupsRead),
    ReadMetrics.task(ReadMetrics.RowGroupsSkipped, rowGroupsSkipped)
  )

  private def assemble(n: Int): ColumnarBatch = {
    val vectors = new Array[ColumnVector](part.sources.length)
    var k = 0
    while (k < vectors.length) {
      vectors(k) = part.sources(k) match {
        case ColumnSource.FromFile(f, i) => cursors(f).column(i, n)
        case ColumnSource.Nulls => new NullColumnVector(ctx.readSchema(k).dataType, n)
        case ColumnSource.AppendName => appendName
        case ColumnSource.FragmentId => fragmentId
        case ColumnSource.RowOffset => new RowOffsetColumnVector(nextRow)
      }
      k += 1
    }
    new ColumnarBatch(vectors, n)
  }

  private def openRange(range: (Long, Long)): Unit = {
    val (start, end) = range
    cursors = files.map { f =>
      val (first, last) = f.rowGroupsCovering(start, end)
      rowGroupsRead += last - first + 1
      bytesRead += f.chunkBytes(first, last)
      f.open(start, end)
    }
    rangeRemaining = end - start
    nextRow = start
  }

  private def closeCursors(): Unit = {
    cursors.foreach(_.close())
    cursors = Array.empty
  }

  /** The partition's row range minus the row groups that statistics rule out, in order. */
  private def planRanges(): Seq[(Long, Long)] = {
    files.foreach(_.checkAlignment(part.fragmentRows))
    filesOpened += files.length
    val whole = Seq((part.rowStart, part.rowEnd))
    ctx.rowFilter match {
      case Some(filter) if ctx.rowGroupFiltering && files.nonEmpty =>
        val excluded = mutable.ArrayBuffer.empty[(Long, Long)]
        files.foreach { f =>
          val starts = f.rowGroupStarts
          f.blocks.indices.foreach { rg =>
            val (lo, hi) = (starts(rg), starts(rg + 1))
            if (lo < part.rowEnd && hi > part.rowStart) {
              val view: FilterColumn => StatsView = c =>
                c.kind match {
                  case FilterColumn.Data => f.rowGroupStats(rg, c).getOrElse(StatsView.unknown(hi - lo))
                  case FilterColumn.BatchName => StatsView.constant(Value.str(part.batchName), hi - lo)
                  case FilterColumn.FragmentId => StatsView.constant(Value.str(part.fragmentId), hi - lo)
                }
              if (!StatsEvaluator.mightMatch(filter, view)) {
                excluded += ((lo, hi))
                rowGroupsSkipped += 1
              }
            }
          }
        }
        RowRanges.subtract(whole, excluded.toSeq)
      case _ => whole
    }
  }
}

/** Arithmetic on sorted lists of half-open row ranges. */
private[read] object RowRanges {

  /** `ranges` minus the union of `holes`, sorted, without empty ranges. */
  def subtract(ranges: Seq[(Long, Long)], holes: Seq[(Long, Long)]): Seq[(Long, Long)] = {
    val sortedHoles = holes.sortBy(_._1)
    ranges.flatMap { case (start, end) =>
      val out = mutable.ArrayBuffer.empty[(Long, Long)]
      var cur = start
      sortedHoles.foreach { case (hs, he) =>
        if (he > cur && hs < end) {
          if (hs > cur) out += ((cur, hs))
          cur = math.max(cur, he)
        }
      }
      if (cur < end) out += ((cur, end))
      out.toSeq
    }
  }
}
