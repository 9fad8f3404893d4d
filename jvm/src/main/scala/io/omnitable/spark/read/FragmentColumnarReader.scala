package io.omnitable.spark.read

import java.io.InterruptedIOException
import java.nio.channels.ClosedByInterruptException

import scala.collection.mutable
import scala.util.control.{ControlThrowable, NonFatal}

import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.metrics.{CorruptFragment, ScanReport, ScanReportAccumulator}
import org.apache.spark.{TaskContext, TaskKilledException}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.internal.Logging
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.vectorized.{ColumnarBatch, ColumnVector}

/** What every reader of one scan shares (serialized once per task with the reader factory). */
final case class ReaderContext(
    table: String,
    readSchema: StructType,
    batchSize: Int,
    rowFilter: Option[Filter],
    rowGroupFiltering: Boolean,
    limit: Option[Long],
    corrupt: CorruptInputPolicy,
    report: ScanReportAccumulator,
    hadoopConf: Broadcast[SerializableHadoopConf])

/** What a reader does with a file it cannot read: retry, then skip the fragment or fail. */
final case class CorruptInputPolicy(skipFragment: Boolean, retries: Int, backoffMillis: Long = 50)

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
 *
 * Dirty input (docs/spark.md, "Dirty input"): before the first row is returned, every file's
 * footer is read and checked ([[ColumnFile.validate]]) and every file's first batch decoded. Any
 * failure to open or decode a file — there or later — is retried `corrupt.retries` times by
 * re-opening that file at the current row. Then, with `corrupt.skipFragment` and no row of the
 * fragment returned yet, the reader returns no row at all for the fragment (a partial fragment
 * would break alignment downstream) and reports it; otherwise the task fails naming fragment,
 * file and row group.
 */
private[read] final class FragmentColumnarReader(part: FragmentInputPartition, ctx: ReaderContext)
    extends PartitionReader[ColumnarBatch]
    with Logging {

  private val files: Array[ColumnFile] = part.files.indices.map(newFile).toArray
  private lazy val appendName = ConstantVectors.string(part.batchName, ctx.batchSize)
  private lazy val fragmentId = ConstantVectors.string(part.fragmentId, ctx.batchSize)

  private var ranges: Iterator[(Long, Long)] = _
  private val cursors = new Array[FileCursor](files.length)
  private var rangeEnd = 0L
  private var rangeRemaining = 0L
  private var nextRow = 0L
  private var emitted = 0L
  private var current: ColumnarBatch = _
  private var skipped, reported = false

  private var bytesRead, filesOpened, rowGroupsRead, rowGroupsSkipped = 0L

  override def next(): Boolean =
    if (skipped) false
    else {
      try advance()
      catch {
        case FragmentSkipped =>
          skipped = true
          closeCursors()
          false
      }
    }

  private def advance(): Boolean = {
    if (ranges == null) ranges = start().iterator
    if (ctx.limit.exists(emitted >= _)) return false
    while (rangeRemaining == 0) {
      closeCursors()
      if (!ranges.hasNext) return false
      openRange(ranges.next())
    }
    val cap = if (files.isEmpty) Int.MaxValue.toLong else ctx.batchSize.toLong
    var n = math.min(rangeRemaining, cap)
    ctx.limit.foreach(l => n = math.min(n, l - emitted))
    var i = 0
    while (i < cursors.length) { n = math.min(n, available(i).toLong); i += 1 }
    current = assemble(n.toInt)
    cursors.foreach(_.advance(n.toInt))
    rangeRemaining -= n
    nextRow += n
    emitted += n
    true
  }

  override def get(): ColumnarBatch = current

  override def close(): Unit = {
    closeCursors()
    if (!reported) {
      reported = true
      ctx.report.add(ScanReport(fragmentsRead, filesOpened, bytesRead, rowGroupsRead, rowGroupsSkipped))
    }
  }

  /** 1 once a partition starting a fragment was opened and not skipped (a fragment counts once). */
  private def fragmentsRead: Long = if (ranges != null && !skipped && part.rowStart == 0) 1L else 0L

  override def currentMetricsValues(): Array[CustomTaskMetric] = Array(
    ReadMetrics.task(ReadMetrics.BytesRead, bytesRead),
    ReadMetrics.task(ReadMetrics.FilesOpened, filesOpened),
    ReadMetrics.task(ReadMetrics.RowGroupsRead, rowGroupsRead),
    ReadMetrics.task(ReadMetrics.RowGroupsSkipped, rowGroupsSkipped),
    ReadMetrics.task(ReadMetrics.FragmentsRead, fragmentsRead),
    ReadMetrics.task(ReadMetrics.CorruptFragments, if (skipped) 1L else 0L)
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

  private def newFile(i: Int): ColumnFile = new ColumnFile(part.files(i), ctx.hadoopConf.value.value, ctx.batchSize)

  /** Validates every file (footer, row counts, chunk bounds), then plans the row ranges to read. */
  private def start(): Seq[(Long, Long)] = {
    files.indices.foreach { i =>
      retrying(i, -1)(files(i).validate(part.fragmentRows)) { files(i) = newFile(i) }
      filesOpened += 1
    }
    planRanges()
  }

  private def openRange(range: (Long, Long)): Unit = {
    val (start, end) = range
    rangeEnd = end
    rangeRemaining = end - start
    nextRow = start
    files.indices.foreach(i => cursors(i) = retrying(i, start)(openCursor(i, start))(reopen(i)))
  }

  private def openCursor(i: Int, start: Long): FileCursor = {
    val f = files(i)
    val (first, last) = f.rowGroupsCovering(start, rangeEnd)
    val cursor = f.open(start, rangeEnd)
    rowGroupsRead += last - first + 1
    bytesRead += f.chunkBytes(first, last)
    cursor
  }

  /** Rows file `i` has decoded from the current row on (decodes its next batch if needed). */
  private def available(i: Int): Int = retrying(i, nextRow)(cursors(i).available()) {
    reopen(i)
    cursors(i) = openCursor(i, nextRow)
  }

  /** A fresh reader of file `i` (re-reads and re-checks its footer), without a cursor yet. */
  private def reopen(i: Int): Unit = {
    closeQuietly(cursors(i))
    cursors(i) = null
    files(i) = newFile(i)
    files(i).validate(part.fragmentRows)
    filesOpened += 1
  }

  /**
   * `op` on file `i` (at fragment row `row`, -1 if none), retried after `recover` while it fails
   * with an error a corrupt or unreachable file can cause; then skips the fragment or fails.
   */
  private def retrying[T](i: Int, row: Long)(op: => T)(recover: => Unit): T = {
    var failures = 0
    var result: Option[T] = None
    while (result.isEmpty)
      try {
        if (failures > 0) recover
        result = Some(op)
      } catch {
        case e: Throwable if CorruptInputPolicy.isUnreadable(e) =>
          failures += 1
          if (failures > ctx.corrupt.retries) giveUp(i, row, failures, e)
          logWarning(
            s"Retrying column file ${part.files(i).uri} of fragment ${part.fragmentId} " +
              s"(attempt ${failures + 1} of ${ctx.corrupt.retries + 1}): ${OmniTableErrors.describe(e)}")
          Thread.sleep(ctx.corrupt.backoffMillis * failures)
      }
    result.get
  }

  private def giveUp(i: Int, row: Long, attempts: Int, e: Throwable): Nothing = {
    val uri = part.files(i).uri
    val rowGroup = files(i).rowGroupAt(row)
    val wholeFragment = part.rowStart == 0 && part.rowEnd == part.fragmentRows
    if (ctx.corrupt.skipFragment && emitted == 0 && wholeFragment) {
      val error = OmniTableErrors.describe(e)
      logWarning(
        s"Skipping fragment ${part.fragmentId} of table ${ctx.table} (on_corrupt=skip_fragment): column file " +
          s"$uri${rowGroup.fold("")(rg => s", row group $rg")} is unreadable after $attempts attempt(s): $error")
      logDebug(s"Why fragment ${part.fragmentId} was skipped", e)
      ctx.report.add(ScanReport(corrupt = Vector(CorruptFragment(ctx.table, part.fragmentId, uri, rowGroup, error))))
      throw FragmentSkipped
    }
    val hint =
      if (!ctx.corrupt.skipFragment) {
        "Set the read option on_corrupt=skip_fragment to skip (and report) fragments with unreadable files."
      } else if (!wholeFragment) {
        s"on_corrupt=skip_fragment cannot skip it: this partition reads only rows [${part.rowStart}, " +
          s"${part.rowEnd}) of the fragment."
      } else {
        s"on_corrupt=skip_fragment cannot skip it: $emitted rows of the fragment were already returned " +
          "(only corruption found before a fragment's first rows can be skipped; docs/spark.md, 'Dirty input')."
      }
    throw OmniTableErrors.corruptFragment(part.fragmentId, uri, rowGroup, attempts, e, hint)
  }

  private def closeCursors(): Unit =
    cursors.indices.foreach { i =>
      closeQuietly(cursors(i))
      cursors(i) = null
    }

  private def closeQuietly(c: FileCursor): Unit =
    if (c != null) {
      try c.close()
      catch { case NonFatal(e) => logDebug(s"Ignoring an error closing a column file: $e") }
    }

  /** The partition's row range minus the row groups that statistics rule out, in order. */
  private def planRanges(): Seq[(Long, Long)] = {
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

/** Thrown inside a reader to abandon its fragment; never leaves the reader. */
private[read] object FragmentSkipped extends ControlThrowable

private[read] object CorruptInputPolicy {

  /**
   * Whether `e` is what a corrupt, truncated or unreachable file can cause (I/O errors, Parquet
   * decoding errors, broken format invariants, runtime errors of a decoder fed garbage) rather
   * than the task being killed or the JVM failing.
   */
  def isUnreadable(e: Throwable): Boolean = e match {
    case _: TaskKilledException => false
    case _: InterruptedIOException | _: ClosedByInterruptException => false
    case _ if Option(TaskContext.get()).exists(_.isInterrupted()) => false
    case NonFatal(_) => true
    case _ => false
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
