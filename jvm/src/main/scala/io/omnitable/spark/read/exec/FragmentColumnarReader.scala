package io.omnitable.spark.read.exec

import scala.collection.mutable
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.DeletionVectors
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.metrics.{CorruptFragment, ScanReport}
import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.Predicate
import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader
import org.apache.spark.sql.vectorized.{ColumnarBatch, ColumnVector}

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
 * Late materialization (`ctx.late`): an inner reader first reads only the predicate columns
 * (with their row offsets), the condition keeps the rows it holds for, and then every column is
 * read for those rows only ([[RowsCursor]]: only the pages holding them are fetched and only
 * they are decoded). The rows returned are exactly those; Spark's filter above re-checks them.
 *
 * Deleted rows (docs/spark.md, "Deleted rows"): a partition whose fragment has a deletion vector
 * marking rows of its range decodes the vector once; each batch then shows only the live rows
 * through views that pick them ([[IndexedColumnVector]], no copy), `_ai_row_offset_` keeping the
 * physical offsets, and late materialization drops deleted rows from the rows it reads. Other
 * partitions read as above.
 *
 * Dirty input (docs/spark.md, "Dirty input"): before the first row is returned, every file's
 * footer is read and checked ([[ColumnFile.validate]]) and every file's first batch decoded. A
 * corrupt file or a transient I/O error — there or later — is retried `corrupt.retries` times by
 * re-opening that file at the current row. Then, for corruption only, with `corrupt.skipFragment`
 * and no row of the fragment returned yet, the reader returns no row at all for the fragment (a
 * partial fragment would break alignment downstream) and reports it; otherwise the task fails
 * naming fragment, file, row group and cause. What is not corruption (schema drift, a missing
 * file or file system, permissions) fails at once.
 */
private[exec] final class FragmentColumnarReader(part: FragmentInputPartition, ctx: ReaderContext)
    extends PartitionReader[ColumnarBatch]
    with Logging {

  private val files: Array[ColumnFile] = part.files.indices.map(newFile).toArray
  private lazy val appendName = ConstantVectors.string(part.batchName, ctx.settings.batchSize)
  private lazy val fragmentId = ConstantVectors.string(part.fragmentId, ctx.settings.batchSize)

  private var sets: Iterator[RowSet] = _
  private var set: RowSet = RowSet.Range(0, 0)
  private val cursors = new Array[RowCursor](files.length)
  private var consumed = 0L // rows of `set` returned so far
  private var emitted = 0L
  private var current: ColumnarBatch = _
  private var skipped, reported = false

  private var bytesRead, filesOpened, rowGroupsRead, rowGroupsSkipped = 0L
  // the partition's rows, once aligned to row groups (`part.alignTo`)
  private var rowStart = part.rowStart
  private var rowEnd = part.rowEnd
  private var inner: Option[FragmentColumnarReader] = None
  // the deleted rows of the fragment, if its vector marks any row of the partition's range
  private var deleted: java.util.BitSet = _

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
    if (sets == null) sets = start().iterator
    var batch: ColumnarBatch = null
    while (batch == null) {
      if (ctx.settings.limit.exists(emitted >= _)) return false
      while (consumed == set.size) {
        closeCursors()
        if (!sets.hasNext) return false
        set = sets.next()
        consumed = 0
        openSet()
      }
      val cap = if (files.isEmpty && deleted == null) Int.MaxValue.toLong else ctx.settings.batchSize.toLong
      var n = math.min(set.size - consumed, cap)
      ctx.settings.limit.foreach(l => n = math.min(n, l - emitted))
      var i = 0
      while (i < cursors.length) { n = math.min(n, available(i).toLong); i += 1 }
      val live = liveRows(n.toInt)
      if (live == null || live.nonEmpty) batch = assemble(n.toInt, live)
      cursors.foreach(_.advance(n.toInt))
      consumed += n
    }
    current = batch
    emitted += batch.numRows()
    true
  }

  /**
   * Which of the next `n` rows of `set` are not deleted (indices among them), or null when none
   * is deleted: then the batch is assembled as without a vector.
   */
  private def liveRows(n: Int): Array[Int] =
    if (deleted == null) null
    else {
      val live = new mutable.ArrayBuilder.ofInt
      var k = 0
      while (k < n) {
        if (!deleted.get(rowAt(k).toInt)) live += k
        k += 1
      }
      val out = live.result()
      if (out.length == n) null else out
    }

  override def get(): ColumnarBatch = current

  override def close(): Unit = {
    closeCursors()
    inner.foreach(_.close())
    if (!reported) {
      reported = true
      ctx.report.add(ScanReport(fragmentsRead, filesOpened, bytesRead, rowGroupsRead, rowGroupsSkipped))
    }
  }

  /** 1 once a partition starting a fragment was opened and not skipped (a fragment counts once). */
  private def fragmentsRead: Long =
    if (!ctx.inner && sets != null && !skipped && part.rowStart == 0) 1L else 0L

  override def currentMetricsValues(): Array[CustomTaskMetric] = {
    val in = inner.map(_.counters).getOrElse(Array(0L, 0L, 0L, 0L))
    Array(
      ReadMetrics.task(ReadMetrics.BytesRead, bytesRead + in(0)),
      ReadMetrics.task(ReadMetrics.FilesOpened, filesOpened + in(1)),
      ReadMetrics.task(ReadMetrics.RowGroupsRead, rowGroupsRead + in(2)),
      ReadMetrics.task(ReadMetrics.RowGroupsSkipped, rowGroupsSkipped + in(3)),
      ReadMetrics.task(ReadMetrics.FragmentsRead, fragmentsRead),
      ReadMetrics.task(ReadMetrics.CorruptFragments, if (skipped) 1L else 0L)
    )
  }

  private def counters: Array[Long] = Array(bytesRead, filesOpened, rowGroupsRead, rowGroupsSkipped)

  /** The next `n` rows of `set` as one batch; with `live` (see [[liveRows]]) only those of them. */
  private def assemble(n: Int, live: Array[Int]): ColumnarBatch = {
    val count = if (live == null) n else live.length
    val vectors = new Array[ColumnVector](part.sources.length)
    var k = 0
    while (k < vectors.length) {
      vectors(k) = part.sources(k) match {
        case ColumnSource.FromFile(f, i) =>
          val all = cursors(f).column(i, n)
          if (live == null) all else new IndexedColumnVector(all, live, 0, count)
        case ColumnSource.Nulls => new NullColumnVector(ctx.readSchema(k).dataType, count)
        case ColumnSource.AppendName => appendName
        case ColumnSource.FragmentId => fragmentId
        case ColumnSource.RowOffset if live != null => new LongSliceColumnVector(live.map(rowAt(_)), 0)
        case ColumnSource.RowOffset => set match {
            case RowSet.Range(start, _) => new RowOffsetColumnVector(start + consumed)
            case RowSet.Rows(rows) => new LongSliceColumnVector(rows, consumed.toInt)
          }
      }
      k += 1
    }
    new ColumnarBatch(vectors, count)
  }

  private def newFile(i: Int): ColumnFile =
    new ColumnFile(part.files(i), ctx.hadoopConf.value.value, ctx.settings.batchSize)

  /** Validates every file (footer, row counts, chunk bounds), then plans the rows to read. */
  private def start(): Seq[RowSet] = {
    files.indices.foreach { i =>
      retrying(i, -1)(files(i).validate(part.fragmentRows)) { files(i) = newFile(i) }
      filesOpened += 1
    }
    if (part.alignTo >= 0) {
      val starts = files(part.alignTo).rowGroupStarts
      rowStart = RowRanges.alignToRowGroup(starts, part.rowStart)
      rowEnd = RowRanges.alignToRowGroup(starts, part.rowEnd)
    }
    deleted = part.deletes.map(DeletionVectors.decode(_, part.fragmentRows, ctx.table, part.fragmentId))
      .filter(bits => bits.nextSetBit(rowStart.toInt) match { case -1 => false; case r => r < rowEnd })
      .orNull
    if (deleted != null && deleted.nextClearBit(rowStart.toInt) >= rowEnd) return Nil // every row deleted
    val ranges = planRanges().filter { case (s, e) => e > s }
    val whole = ranges.map { case (s, e) => RowSet.Range(s, e) }
    ctx.late match {
      case Some(late) if ranges.nonEmpty =>
        val rows = survivors(late, ranges)
        if (paysOff(rows, ranges.map { case (s, e) => e - s }.sum)) Seq(RowSet.Rows(rows)) else whole
      case _ => whole
    }
  }

  /**
   * Late materialization, phase 2 or not: reading only the pages holding `rows` pays when it
   * skips a good share of the bytes, or when so few rows pass that skipping the decoding of the
   * others pays alone (measured: `benchmarks/optimizer.py`). Otherwise the fragment is read as
   * usual (all rows; Spark's filter drops them) — only the predicate columns were read twice.
   */
  private def paysOff(rows: Array[Long], total: Long): Boolean =
    rows.isEmpty || rows.length <= LateMaterialization.DecodeOnlyMaxFraction * total || {
      val (holding, all) = files.indices.map { i =>
        retrying(i, -1)(files(i).pagesHolding(rows)) { files(i) = newFile(i) }
      }.foldLeft((0L, 0L)) { case ((h, a), (x, y)) => (h + x, a + y) }
      holding <= LateMaterialization.MaxBytesFraction * all
    }

  /**
   * Late materialization, phase 1: the rows of `ranges` for which the condition holds, read
   * with an inner reader of the predicate columns only (plus their row offsets).
   */
  private def survivors(late: LateMaterialization, ranges: Seq[(Long, Long)]): Array[Long] = {
    // the inner reader reads deleted rows too: they are dropped from its survivors below
    val aligned = part.copy(rowStart = rowStart, rowEnd = rowEnd, alignTo = -1, deletes = None)
    val (innerPart, innerSchema) = LatePartitions.predicatePart(aligned, ctx.readSchema, late.predicateColumns)
    val reader = new FragmentColumnarReader(
      innerPart,
      ctx.copy(readSchema = innerSchema, settings = ctx.settings.copy(limit = None), late = None, inner = true))
    inner = Some(reader)
    val predicate = Predicate.create(late.condition)
    predicate.initialize(Option(TaskContext.get()).map(_.partitionId()).getOrElse(0))
    val offsetColumn = late.predicateColumns.length
    val out = new mutable.ArrayBuilder.ofLong
    while (reader.next()) {
      val batch = reader.get()
      val offsets = batch.column(offsetColumn)
      var i = 0
      while (i < batch.numRows()) {
        if (predicate.eval(batch.getRow(i))) out += offsets.getLong(i)
        i += 1
      }
    }
    if (reader.wasSkipped) throw FragmentSkipped // the inner reader reported it
    if (deleted == null) out.result() else out.result().filter(row => !deleted.get(row.toInt))
  }

  private def wasSkipped: Boolean = skipped

  private def openSet(): Unit = files.indices.foreach(i => cursors(i) = retrying(i, rowAt(0))(openCursor(i))(reopen(i)))

  /** Fragment row of the `k`-th row from the current position of `set` (-1 past its end). */
  private def rowAt(k: Long): Long = set match {
    case RowSet.Range(start, end) => if (start + consumed + k < end) start + consumed + k else -1
    case RowSet.Rows(rows) => if (consumed + k < rows.length) rows((consumed + k).toInt) else -1
  }

  /** A cursor over file `i` for the rest of `set`. */
  private def openCursor(i: Int): RowCursor = {
    val f = files(i)
    set match {
      case RowSet.Range(start, end) =>
        val from = start + consumed
        val (first, last) = f.rowGroupsCovering(from, end)
        val cursor = f.open(from, end)
        rowGroupsRead += last - first + 1
        bytesRead += f.chunkBytes(first, last)
        cursor
      case RowSet.Rows(rows) =>
        val opened = f.openRows(rows, consumed.toInt)
        rowGroupsRead += opened.rowGroups
        bytesRead += opened.bytes
        opened.cursor
    }
  }

  /** Rows file `i` has decoded from the current row on (decodes its next batch if needed). */
  private def available(i: Int): Int = retrying(i, rowAt(0))(cursors(i).available()) {
    reopen(i)
    cursors(i) = openCursor(i)
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
   * with corruption or a transient I/O error ([[CorruptInputPolicy.classify]]); then skips the
   * fragment (corruption only, with `skip_fragment`) or fails with the cause.
   */
  private def retrying[T](i: Int, row: Long)(op: => T)(recover: => Unit): T = {
    var failures = 0
    var result: Option[T] = None
    while (result.isEmpty)
      try {
        if (failures > 0) recover
        result = Some(op)
      } catch {
        case e: Throwable if CorruptInputPolicy.isHandled(e) =>
          failures += 1
          val failure = CorruptInputPolicy.classify(e)
          if (failure == ReadFailure.Environment || failures > ctx.settings.corrupt.retries)
            giveUp(i, row, failures, e, failure)
          logWarning(
            s"Retrying column file ${part.files(i).uri} of fragment ${part.fragmentId} " +
              s"(attempt ${failures + 1} of ${ctx.settings.corrupt.retries + 1}): ${OmniTableErrors.describe(e)}")
          Thread.sleep(ctx.settings.corrupt.backoffMillis * failures)
      }
    result.get
  }

  private def giveUp(i: Int, row: Long, attempts: Int, e: Throwable, failure: ReadFailure): Nothing = {
    val uri = part.files(i).uri
    val rowGroup = files(i).rowGroupAt(row)
    if (failure != ReadFailure.Corrupt)
      throw OmniTableErrors.unreadableFragment(part.fragmentId, uri, rowGroup, attempts, e)
    val wholeFragment = part.rowStart == 0 && part.rowEnd == part.fragmentRows
    if (ctx.settings.corrupt.skipFragment && (emitted == 0 || ctx.inner) && wholeFragment) {
      val error = OmniTableErrors.describe(e)
      logWarning(
        s"Skipping fragment ${part.fragmentId} of table ${ctx.table} (on_corrupt=skip_fragment): column file " +
          s"$uri${rowGroup.fold("")(rg => s", row group $rg")} is unreadable after $attempts attempt(s): $error")
      logDebug(s"Why fragment ${part.fragmentId} was skipped", e)
      ctx.report.add(ScanReport(corrupt = Vector(CorruptFragment(ctx.table, part.fragmentId, uri, rowGroup, error))))
      throw FragmentSkipped
    }
    val hint =
      if (!ctx.settings.corrupt.skipFragment) {
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

  private def closeQuietly(c: RowCursor): Unit =
    if (c != null) {
      try c.close()
      catch { case NonFatal(e) => logDebug(s"Ignoring an error closing a column file: $e") }
    }

  /** The partition's row range minus the row groups that statistics rule out, in order. */
  private def planRanges(): Seq[(Long, Long)] = {
    val whole = Seq((rowStart, rowEnd))
    ctx.settings.rowFilter match {
      case Some(filter) if ctx.settings.rowGroupFiltering && files.nonEmpty =>
        val excluded = mutable.ArrayBuffer.empty[(Long, Long)]
        files.foreach { f =>
          val starts = f.rowGroupStarts
          f.blocks.indices.foreach { rg =>
            val (lo, hi) = (starts(rg), starts(rg + 1))
            if (lo < rowEnd && hi > rowStart) {
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

  /**
   * `row` moved to the first row-group start at or after it (`starts`: each row group's first
   * row, then the row count). Partitions of one fragment move both ends of their ranges this way
   * on the same file, so the moved ranges still tile the fragment, a row group is decoded by one
   * partition only, and a range inside one row group becomes empty.
   */
  def alignToRowGroup(starts: Array[Long], row: Long): Long =
    java.util.Arrays.binarySearch(starts, row) match {
      case i if i >= 0 => row
      case i => starts(math.min(-i - 1, starts.length - 1))
    }

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
