package io.omnitable.spark.write

import scala.collection.mutable
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{DataPaths, FileColumnStats, WrittenFile}
import io.omnitable.spark.read.exec.{AlignedFilesReader, FileSlice, SerializableHadoopConf}
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.TaskAttemptID
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.SpecificInternalRow
import org.apache.spark.sql.execution.datasources.parquet.{ParquetOutputWriter, ParquetWriteSupport}
import org.apache.spark.sql.types.{DataType, StructField, StructType}
import org.apache.spark.sql.vectorized.ColumnarBatch

/** A stored column an update writes: its name, id, name inside the files, group and type. */
final case class UpdateColumn(name: String, columnId: Int, physicalName: String, group: String, dataType: DataType)

/**
 * One fragment an update rewrites: where it lives (relative to the table), its physical row
 * count, and for each updated column id the file (relative path) providing it now, if any.
 */
final case class FragmentRewrite(
    fragmentId: String,
    path: String,
    rowCount: Long,
    providers: Map[Int, String])

/**
 * What every task of an update needs: the table's data directory, the updated columns (the order
 * of the new values' rows) and the Hadoop configuration to write Parquet with.
 */
final case class RewriteTask(tableUri: String, columns: Seq[UpdateColumn], hadoopConf: SerializableHadoopConf) {

  /** The updated columns by group, in the order of their first appearance (update.py `_write`). */
  def groups: Seq[(String, Seq[(UpdateColumn, Int)])] = {
    val indexed = columns.zipWithIndex
    indexed.map(_._1.group).distinct.map(g => g -> indexed.filter(_._1.group == g))
  }
}

/**
 * The executor side of an update (python/omnitable/dataops/update.py `_rewrite`): for one
 * fragment and each column group among the updated columns, one new file carrying exactly the
 * updated columns of that group for every row of the fragment — the current values (read from the
 * files providing them now; NULL where none does), and the new ones at the updated offsets —
 * laid out as every JVM-written column file (`<fragment>/<group>-<file_id>.parquet`, physical
 * names, statistics as the catalog encodes them). Files go to their final, unique paths and are
 * invisible until the driver commits them; on failure the files written so far are deleted.
 */
object ColumnRewriter {

  /**
   * Rewrite `frag`: `offsets` (ascending, distinct physical row positions) get `values(i)` (one
   * row per offset, the task's columns in order, already of the columns' types).
   */
  def rewrite(task: RewriteTask, frag: FragmentRewrite, offsets: Array[Long], values: Array[InternalRow])
      : Seq[WrittenFile] = {
    require(offsets.length == values.length, "one row of values per offset")
    val out = stream(task, frag)
    try {
      val ordinals = task.columns.indices.toArray
      offsets.indices.foreach(i => out.put(offsets(i), values(i), ordinals))
      out.finish()
    } catch {
      case NonFatal(e) =>
        out.abort()
        throw e
    }
  }

  /** A rewrite of `frag` fed row by row, by ascending offset ([[FragmentRewriteStream]]). */
  def stream(task: RewriteTask, frag: FragmentRewrite): FragmentRewriteStream = new FragmentRewriteStream(task, frag)

  /** Delete written files (paths relative to the table); failures are ignored. */
  def deleteQuietly(task: RewriteTask, paths: Seq[String]): Unit = paths.foreach { rel =>
    try {
      val p = new Path(DataPaths.join(task.tableUri, rel))
      p.getFileSystem(task.hadoopConf.value).delete(p, false)
    } catch { case NonFatal(_) => }
  }
}

/**
 * One fragment's rewrite ([[ColumnRewriter]]) fed in one pass, row by row by ascending offset, so
 * an UPDATE's task writes each updated row as it arrives (no buffering, no second sort): `put`
 * carries the current values of the rows before `offset` into the new files, then writes the new
 * ones; `finish` carries the rest and returns the files. The current values are read only when a
 * row is not updated: an UPDATE of every row of a fragment does not read its old files. `abort`
 * (or any failure) deletes what was written.
 */
final class FragmentRewriteStream private[write] (task: RewriteTask, frag: FragmentRewrite) {

  private val groups: Seq[GroupRewrite] = {
    val opened = mutable.ArrayBuffer.empty[GroupRewrite]
    try task.groups.foreach { case (g, cols) => opened += new GroupRewrite(task, frag, g, cols) }
    catch {
      case NonFatal(e) =>
        opened.foreach(_.abort())
        throw e
    }
    opened.toSeq
  }
  private var next = 0L // the lowest offset `put` accepts next

  /** Row `offset` gets the values at `ordinals` of `values` (one per task column, of its type). */
  def put(offset: Long, values: InternalRow, ordinals: Array[Int]): Unit = {
    if (offset < next) {
      throw new IllegalStateException(
        if (offset == next - 1) s"Cannot update fragment ${frag.fragmentId}: a row was updated twice in one statement"
        else s"Cannot update fragment ${frag.fragmentId}: row offset $offset came after ${next - 1} (not ascending)")
    }
    if (offset >= frag.rowCount) {
      throw new IllegalArgumentException(
        s"Cannot update fragment ${frag.fragmentId}: row offset $offset is not below its ${frag.rowCount} rows")
    }
    groups.foreach(_.put(offset, values, ordinals))
    next = offset + 1
  }

  /** Carry the rows after the last `put` and close the files: one per column group. */
  def finish(): Seq[WrittenFile] =
    try groups.map(_.finish())
    catch {
      case NonFatal(e) =>
        abort()
        throw e
    }

  /** Close and delete the files (best effort). */
  def abort(): Unit = groups.foreach(_.abort())
}

/** One column group's new file of a [[FragmentRewriteStream]]. */
private final class GroupRewrite(
    task: RewriteTask,
    frag: FragmentRewrite,
    group: String,
    cols: Seq[(UpdateColumn, Int)]) {
  private val conf: Configuration = task.hadoopConf.value
  // the files providing the group's columns now, and where each column sits in them
  private val byFile = cols.flatMap { case (c, _) => frag.providers.get(c.columnId).map(_ -> c) }.groupBy(_._1).toSeq
    .sortBy(_._1).map { case (f, cs) => f -> cs.map(_._2) }
  private val source: Array[(Int, Int)] = {
    val at = byFile.zipWithIndex.flatMap { case ((_, cs), fi) =>
      cs.zipWithIndex.map { case (c, field) => c.columnId -> (fi, field) }
    }.toMap
    cols.map { case (c, _) => at.getOrElse(c.columnId, (-1, -1)) }.toArray
  }
  private val types = cols.map(_._1.dataType).toArray
  private val valueAt = cols.map(_._2).toArray // where the column's new value is in `ordinals`
  private val fileId = WriteTask.newId()
  private val rel = s"${frag.path}/$group-$fileId.parquet"
  private val uri = DataPaths.join(task.tableUri, rel)
  private val writer = {
    val schema = StructType(cols.map { case (c, _) => StructField(c.physicalName, c.dataType, nullable = true) })
    val writeConf = new Configuration(conf)
    ParquetWriteSupport.setSchema(schema, writeConf)
    new ParquetOutputWriter(uri, new TaskAttemptContextImpl(writeConf, new TaskAttemptID()))
  }
  private val stats = types.map(t => new ColumnStatsBuilder(t))
  private val out = new SpecificInternalRow(types.toSeq)
  private var row = 0L // the next row to write
  private var reader: AlignedFilesReader = _ // the current values, opened when first needed
  private var batches: Seq[ColumnarBatch] = Nil
  private var batchStart = 0L
  private var batchEnd = 0L
  private var closed = false

  def put(offset: Long, values: InternalRow, ordinals: Array[Int]): Unit = {
    carry(offset)
    var j = 0
    while (j < types.length) {
      val o = ordinals(valueAt(j))
      out.update(j, if (values.isNullAt(o)) null else values.get(o, types(j)))
      j += 1
    }
    emit()
    row = offset + 1
  }

  def finish(): WrittenFile = {
    carry(frag.rowCount)
    close()
    val p = new Path(uri)
    val size = p.getFileSystem(conf).getFileStatus(p).getLen
    val colStats: Seq[(String, FileColumnStats)] = cols.zip(stats).map { case ((c, _), s) => c.name -> s.result }
    WrittenFile(
      fileId,
      frag.fragmentId,
      group,
      rel,
      frag.rowCount,
      size,
      colStats,
      cols.map { case (c, _) =>
        c.name -> c.columnId
      }.toMap)
  }

  def abort(): Unit = {
    try close()
    catch { case NonFatal(_) => }
    ColumnRewriter.deleteQuietly(task, Seq(rel))
  }

  /** Write the current values of rows `[row, end)`. */
  private def carry(end: Long): Unit = while (row < end) {
    if (byFile.nonEmpty && row >= batchEnd) seek() // no provider: every carried value is NULL
    val i = (row - batchStart).toInt
    var j = 0
    while (j < types.length) {
      val (fi, field) = source(j)
      val v =
        if (fi < 0) null
        else {
          val r = batches(fi).getRow(i)
          if (r.isNullAt(field)) null else r.get(field, types(j))
        }
      out.update(j, v)
      j += 1
    }
    emit()
    row += 1
  }

  /** Move the reader to the batch holding `row`. */
  private def seek(): Unit = {
    if (reader == null) reader = new AlignedFilesReader(byFile.indices.map(slice), frag.rowCount, conf)
    while (row >= batchEnd) {
      batches = reader.nextBatch().getOrElse(throw new IllegalStateException(
        s"fragment ${frag.fragmentId}: its files end before row $row of ${frag.rowCount}"))
      batchStart = reader.firstRow
      batchEnd = batchStart + reader.batchRows
    }
  }

  private def slice(fi: Int): FileSlice = {
    val (f, cs) = byFile(fi)
    FileSlice(
      DataPaths.join(task.tableUri, f),
      StructType(cs.map(c => StructField(c.physicalName, c.dataType))),
      frag.rowCount)
  }

  private def emit(): Unit = {
    var j = 0
    while (j < types.length) { stats(j).add(out, j); j += 1 }
    writer.write(out)
  }

  private def close(): Unit = if (!closed) {
    closed = true
    try if (reader != null) reader.close()
    finally writer.close()
  }
}
