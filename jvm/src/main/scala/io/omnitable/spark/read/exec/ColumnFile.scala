package io.omnitable.spark.read.exec

import java.net.URI
import java.util.Locale

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapred.FileSplit
import org.apache.hadoop.mapreduce.{JobID, TaskAttemptID, TaskID, TaskType}
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl
import org.apache.parquet.HadoopReadOptions
import org.apache.parquet.column.statistics.Statistics
import org.apache.parquet.hadoop.ParquetFileReader
import org.apache.parquet.hadoop.metadata.{BlockMetaData, ColumnChunkMetaData, ParquetMetadata}
import org.apache.parquet.hadoop.util.HadoopInputFile
import org.apache.parquet.io.api.Binary
import org.apache.parquet.schema.LogicalTypeAnnotation
import org.apache.parquet.schema.PrimitiveType.PrimitiveTypeName
import org.apache.spark.sql.execution.datasources.parquet.{ParquetReadSupport, VectorizedParquetRecordReader}
import org.apache.spark.sql.types._

/**
 * One column file of a partition: its footer (read once), its row groups as row ranges of the
 * fragment, their statistics, and cursors over any row range. Row groups are chosen by handing
 * Spark's vectorized reader a footer that lists only them, so no byte-range guessing is involved.
 */
private[exec] final class ColumnFile(slice: FileSlice, baseConf: Configuration, batchSize: Int) {

  private val path = new Path(new URI(slice.uri))

  private val conf: Configuration = {
    val c = new Configuration(baseConf)
    val json = slice.requestedSchema.json
    c.set(ParquetReadSupport.SPARK_ROW_REQUESTED_SCHEMA, json)
    c.set("org.apache.spark.sql.parquet.row.attributes", json)
    c.set("parquet.read.support.class", classOf[ParquetReadSupport].getName)
    c
  }

  private lazy val inputFile: HadoopInputFile = HadoopInputFile.fromPath(path, conf)

  private var footerRead: ParquetMetadata = _

  /** The file's footer, read on first use (a failed read is retried on the next use). */
  def footer: ParquetMetadata = {
    if (footerRead == null) footerRead = guarded {
      val stream = inputFile.newStream()
      try ParquetFileReader.readFooter(inputFile, HadoopReadOptions.builder(conf, path).build(), stream)
      finally stream.close()
    }
    footerRead
  }

  lazy val blocks: IndexedSeq[BlockMetaData] = footer.getBlocks.asScala.toIndexedSeq

  /** First fragment row of each row group, plus the total row count at the end. */
  lazy val rowGroupStarts: Array[Long] = blocks.scanLeft(0L)(_ + _.getRowCount).toArray

  /** Fails unless the file holds exactly its fragment's rows (the alignment invariant). */
  def checkAlignment(fragmentRows: Long): Unit = {
    val rows = rowGroupStarts.last
    if (rows != fragmentRows) throw OmniTableErrors.misalignedFile(slice.uri, rows, fragmentRows)
  }

  /**
   * Everything that can be checked without decoding data, so that a broken file is found before
   * any row of its fragment is returned: the footer parses, the file holds exactly the fragment's
   * rows (and the catalog's row count for it), carries every column the catalog says it does,
   * and every column chunk to be read lies inside the file.
   */
  def validate(fragmentRows: Long): Unit = {
    checkAlignment(fragmentRows)
    val rows = rowGroupStarts.last
    if (rows != slice.rowCount) throw OmniTableErrors.misalignedFile(slice.uri, rows, slice.rowCount)
    val fields = footer.getFileMetaData.getSchema.getFields.asScala.map(_.getName.toLowerCase(Locale.ROOT)).toSet
    slice.requestedSchema.fieldNames.find(n => !fields.contains(n.toLowerCase(Locale.ROOT))).foreach { n =>
      throw OmniTableErrors.schemaMismatch(slice.uri, s"no column '$n', which the catalog says it carries")
    }
    val length = guarded(inputFile.getLength)
    val wanted = slice.requestedSchema.fieldNames.map(_.toLowerCase(Locale.ROOT)).toSet
    blocks.zipWithIndex.foreach { case (block, rg) =>
      block.getColumns.asScala.filter(c => wanted.contains(c.getPath.toArray.head.toLowerCase(Locale.ROOT))).foreach {
        c =>
          val (start, end) = (c.getStartingPos, c.getStartingPos + c.getTotalSize)
          if (start < 4 || c.getTotalSize < 0 || end > length) {
            throw OmniTableErrors.corruptFooter(
              slice.uri,
              s"row group $rg, column ${c.getPath.toDotString}: bytes [$start, $end) of a $length-byte file")
          }
      }
    }
  }

  /** The row group holding fragment row `row`, if the footer was read. */
  def rowGroupAt(row: Long): Option[Int] =
    if (footerRead == null || row < 0 || row >= rowGroupStarts.last) None
    else Some(rowGroupsCovering(row, row + 1)._1)

  /** Statistics of the column with `physicalName` in row group `rg` (only fields this file provides). */
  def rowGroupStats(rg: Int, column: FilterColumn): Option[StatsView] =
    if (!slice.requestedSchema.fieldNames.contains(column.physicalName)) None
    else blocks(rg).getColumns.asScala.find(_.getPath.toDotString == column.physicalName)
      .map(chunk => ColumnFile.statsOf(chunk, column, blocks(rg).getRowCount))

  /** Compressed bytes of the requested columns' chunks in row groups `from..to` (inclusive). */
  def chunkBytes(from: Int, to: Int): Long = {
    val wanted = slice.requestedSchema.fieldNames.toSet
    (from to to).iterator.flatMap(i => blocks(i).getColumns.asScala)
      .filter(c => wanted.contains(c.getPath.toArray.head)).map(_.getTotalSize).sum
  }

  /** Row-group indices `(first, last)` covering fragment rows `[start, end)` (non-empty range). */
  def rowGroupsCovering(start: Long, end: Long): (Int, Int) = {
    val first = java.util.Arrays.binarySearch(rowGroupStarts, start) match {
      case i if i >= 0 => i
      case i => -i - 2
    }
    var last = first
    while (rowGroupStarts(last + 1) < end) last += 1
    (first, last)
  }

  /** A cursor over fragment rows `[start, end)` of this file. */
  def open(start: Long, end: Long): FileCursor = guarded {
    val (first, last) = rowGroupsCovering(start, end)
    val selected = new ParquetMetadata(footer.getFileMetaData, blocks.slice(first, last + 1).asJava)
    val reader = new VectorizedParquetRecordReader(null, "CORRECTED", "UTC", "CORRECTED", "UTC", false, batchSize)
    try {
      initialize(reader, selected)
      new FileCursor(slice.uri, reader, start - rowGroupStarts(first), end - start)
    } catch {
      case NonFatal(e) => reader.close(); throw e
    }
  }

  /**
   * A cursor over the fragment rows `rows(from..)` (increasing) of this file: only row groups
   * holding some of them are read; with an offset index (page index) on every requested column
   * only the pages holding them are fetched and only those rows decoded, otherwise the row groups
   * from the first to the last wanted row are decoded and the wanted rows picked out.
   */
  def openRows(rows: Array[Long], from: Int): RowsCursor.Opened = guarded {
    val wanted = java.util.Arrays.copyOfRange(rows, from, rows.length)
    val starts = rowGroupStarts
    val perGroup = mutable.ArrayBuffer.empty[(Int, Array[Long])] // row group -> wanted rows within it
    var j = 0
    blocks.indices.foreach { rg =>
      var k = j
      while (k < wanted.length && wanted(k) < starts(rg + 1)) k += 1
      if (k > j) perGroup += rg -> wanted.slice(j, k).map(_ - starts(rg))
      j = k
    }
    val names = slice.requestedSchema.fieldNames.map(_.toLowerCase(Locale.ROOT)).toSet
    def chunks(rg: Int) =
      blocks(rg).getColumns.asScala.filter(c => names.contains(c.getPath.toArray.head.toLowerCase(Locale.ROOT)))
    val indexed = perGroup.forall { case (rg, _) => chunks(rg).forall(_.getOffsetIndexReference != null) }
    if (wanted.isEmpty || !indexed) {
      val (first, last) = if (wanted.isEmpty) (0, -1) else rowGroupsCovering(wanted.head, wanted.last + 1)
      val inner = if (wanted.isEmpty) None else Some(open(wanted.head, wanted.last + 1))
      RowsCursor.Opened(
        new RowsCursor.Picking(inner, wanted),
        if (last < first) 0L else chunkBytes(first, last),
        last - first + 1L)
    } else {
      val selected = perGroup.map(_._1)
      val footerOfSelected = new ParquetMetadata(footer.getFileMetaData, selected.map(blocks(_)).asJava)
      val fileReader = new ParquetFileReader(
        inputFile,
        footerOfSelected,
        HadoopReadOptions.builder(conf, path).build(),
        inputFile.newStream())
      val reader = new RowRangesParquetReader(batchSize)
      try {
        val ranges = perGroup.map { case (rg, rel) =>
          RowRangesParquetReader.rowRanges(blocks(rg).getRowCount, RowsCursor.runs(rel))
        }
        val bytes = perGroup.map { case (rg, rel) =>
          chunks(rg).map(c => RowsCursor.pageBytes(c, fileReader.readOffsetIndex(c), rel)).sum
        }.sum
        initialize(reader, footerOfSelected)
        reader.restrictTo(fileReader, ranges.toIndexedSeq)
        RowsCursor.Opened(new FileCursor(slice.uri, reader, 0, wanted.length.toLong), bytes, selected.size.toLong)
      } catch {
        case NonFatal(e) =>
          reader.close()
          fileReader.close()
          throw e
      }
    }
  }

  /**
   * `(bytes of the pages holding any of `rows`, bytes of all pages)` of the requested columns'
   * chunks in the row groups `rows` falls in; without offset indexes every page counts.
   */
  def pagesHolding(rows: Array[Long]): (Long, Long) = guarded {
    if (rows.isEmpty) (0L, 0L)
    else {
      val (first, last) = rowGroupsCovering(rows.head, rows.last + 1)
      val total = chunkBytes(first, last)
      val names = slice.requestedSchema.fieldNames.map(_.toLowerCase(Locale.ROOT)).toSet
      val reader =
        new ParquetFileReader(inputFile, footer, HadoopReadOptions.builder(conf, path).build(), inputFile.newStream())
      try {
        val starts = rowGroupStarts
        val holding = (first to last).iterator.map { rg =>
          val lo = java.util.Arrays.binarySearch(rows, starts(rg)) match { case i if i >= 0 => i; case i => -i - 1 }
          val hi = java.util.Arrays.binarySearch(rows, starts(rg + 1)) match { case i if i >= 0 => i; case i => -i - 1 }
          val rel = java.util.Arrays.copyOfRange(rows, lo, hi).map(_ - starts(rg))
          blocks(rg).getColumns.asScala.filter(c => names.contains(c.getPath.toArray.head.toLowerCase(Locale.ROOT)))
            .map { c =>
              if (rel.isEmpty) 0L
              else if (c.getOffsetIndexReference == null) c.getTotalSize
              else RowsCursor.pageBytes(c, reader.readOffsetIndex(c), rel)
            }.sum
        }.sum
        (holding, total)
      } finally reader.close()
    }
  }

  private def initialize(reader: VectorizedParquetRecordReader, selected: ParquetMetadata): Unit = {
    val attempt = new TaskAttemptID(new TaskID(new JobID(), TaskType.MAP, 0), 0)
    reader.initialize(
      new FileSplit(path, 0, Long.MaxValue, Array.empty[String]),
      new TaskAttemptContextImpl(conf, attempt),
      Some(inputFile),
      Some(inputFile.newStream()),
      Some(selected)
    )
  }

  private def guarded[T](body: => T): T =
    try body
    catch {
      case e: io.omnitable.spark.errors.OmniTableReadException => throw e
      case NonFatal(e) => throw OmniTableErrors.fileReadFailed(slice.uri, e)
    }
}

private[exec] object ColumnFile {

  /** Parquet row-group statistics as a [[StatsView]] in the column's domain (None bounds if unusable). */
  def statsOf(chunk: ColumnChunkMetaData, column: FilterColumn, rows: Long): StatsView = {
    val st: Statistics[_] = chunk.getStatistics
    if (st == null || st.isEmpty) return StatsView.unknown(rows)
    val nulls = if (st.isNumNullsSet) Some(st.getNumNulls) else None
    val floating = column.domain.contains(Domain.FloatingDomain)
    if (!st.hasNonNullValue) return StatsView(None, None, nulls, rows, mayHoldNaN = floating)
    val annotation = chunk.getPrimitiveType.getLogicalTypeAnnotation
    def value(v: Any): Option[Value] = (chunk.getPrimitiveType.getPrimitiveTypeName, column.dataType, v) match {
      case (PrimitiveTypeName.INT32, ByteType | ShortType | IntegerType | DateType, i: Integer) if signed(annotation) =>
        Some(Value.Integral(i.longValue()))
      case (PrimitiveTypeName.INT64, LongType, l: java.lang.Long) if signed(annotation) => Some(Value.Integral(l))
      case (PrimitiveTypeName.INT64, TimestampType | TimestampNTZType, l: java.lang.Long) if micros(annotation) =>
        Some(Value.Integral(l))
      case (PrimitiveTypeName.FLOAT, FloatType, f: java.lang.Float) if !f.isNaN => Some(Value.Floating(f.doubleValue()))
      case (PrimitiveTypeName.DOUBLE, DoubleType, d: java.lang.Double) if !d.isNaN => Some(Value.Floating(d))
      case (PrimitiveTypeName.BOOLEAN, BooleanType, b: java.lang.Boolean) => Some(Value.Bool(b))
      case (PrimitiveTypeName.BINARY, s: StringType, b: Binary) if s == StringType && isString(annotation) =>
        Some(Value.Str(b.getBytes))
      case _ => None
    }
    val min = value(st.genericGetMin)
    val max = value(st.genericGetMax)
    if (min.isEmpty || max.isEmpty) StatsView(None, None, nulls, rows, mayHoldNaN = floating)
    else StatsView(min, max, nulls, rows, mayHoldNaN = floating)
  }

  private def signed(a: LogicalTypeAnnotation): Boolean = a match {
    case null => true
    case i: LogicalTypeAnnotation.IntLogicalTypeAnnotation => i.isSigned
    case _: LogicalTypeAnnotation.DateLogicalTypeAnnotation => true
    case _ => false
  }

  private def micros(a: LogicalTypeAnnotation): Boolean = a match {
    case t: LogicalTypeAnnotation.TimestampLogicalTypeAnnotation => t.getUnit == LogicalTypeAnnotation.TimeUnit.MICROS
    case _ => false
  }

  private def isString(a: LogicalTypeAnnotation): Boolean =
    a.isInstanceOf[LogicalTypeAnnotation.StringLogicalTypeAnnotation]
}
