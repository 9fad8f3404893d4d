package io.omnitable.spark.write

import scala.collection.mutable
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{FileColumnStats, KeyHash, KeyIndex, WrittenFile, WrittenFragment}
import io.omnitable.spark.errors.WriteErrors
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.TaskAttemptID
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{
  BoundReference,
  Cast,
  JoinedRow,
  SpecificInternalRow,
  UnsafeProjection
}
import org.apache.spark.sql.connector.write.{DataWriter, DataWriterFactory, WriterCommitMessage}
import org.apache.spark.sql.execution.datasources.parquet.{ParquetOutputWriter, ParquetWriteSupport}
import org.apache.spark.sql.types.{ByteType, IntegerType, LongType, ShortType, StructField, StructType}

/** Makes one [[FragmentWriter]] per task (serialized to executors with its [[WriteTask]]). */
private[write] final class FragmentWriterFactory(task: WriteTask) extends DataWriterFactory {
  override def createWriter(partitionId: Int, taskId: Long): DataWriter[InternalRow] =
    new FragmentWriter(task, partitionId)
}

/**
 * Writes one task's rows as fragments of the batch, exactly as python/omnitable/format/writer.py
 * lays them out (docs/format.md): every `targetFragmentRows` rows a new fragment
 * `data/<slug>-<batch8>/<fragment_id>/` with one Parquet file `<group>-<file_id>.parquet` per
 * column group, physical column names, `_ai_unique_id_` in the `base` file, numbered
 * `idBase + (partition << 33)` onwards (or the data's own, `WriteTask.suppliedIds`). Files go straight to their final, unique paths; nothing is
 * visible until the driver commits. `abort` deletes what this attempt wrote. With `WriteTask.key`
 * (a MERGE inserting into a keyed table) each fragment also gets its key index
 * (`_key_index.arrow`, [[KeyIndex.write]], byte-equal to Python's) when it is finished; a NULL key
 * fails the task. A file of `optional` columns (a feature's outputs a MERGE inserts,
 * [[WriteSchema.insertTargets]]) holding only NULLs is deleted when its fragment is finished.
 */
private[write] final class FragmentWriter(task: WriteTask, partition: Int) extends DataWriter[InternalRow] {

  /** Each group's row in file order, from the id and the input row (cast to the stored types where needed). */
  private val projections: Seq[(String, Seq[TargetColumn], GroupRows)] = task.groups.map { case (g, cols) =>
    (g, cols, GroupRows(task.inputSchema, cols))
  }

  /** The supplied id of a row, widened to BIGINT ([[WriteSchema.suppliedIds]] allows integers only). */
  private val suppliedId: InternalRow => Long =
    if (task.suppliedIds < 0) _ => 0L
    else {
      val i = task.suppliedIds
      task.inputSchema(i).dataType match {
        case IntegerType => _.getInt(i).toLong
        case ShortType => _.getShort(i).toLong
        case ByteType => _.getByte(i).toLong
        case _ => _.getLong(i)
      }
    }

  private var nextId = task.idBase + (partition.toLong << WriteTask.IdShift)
  private val idLimit = task.idBase + ((partition.toLong + 1) << WriteTask.IdShift)
  private var seq = partition.toLong << WriteTask.SeqShift
  private val done = mutable.ArrayBuffer.empty[WrittenFragment]
  private val written = mutable.ArrayBuffer.empty[String] // fragment directories, for abort
  private var open: Option[OpenFragment] = None

  override def write(row: InternalRow): Unit = {
    val fragment = open.getOrElse { val f = new OpenFragment; open = Some(f); f }
    val supplied = task.suppliedIds
    if (supplied >= 0) {
      if (row.isNullAt(supplied)) throw FragmentWriter.nullId(task)
      fragment.add(suppliedId(row), row)
    } else {
      if (nextId >= idLimit) {
        throw new IllegalStateException(s"Cannot write partition $partition: more than 2^${WriteTask.IdShift} rows")
      }
      fragment.add(nextId, row)
      nextId += 1
    }
    if (fragment.rows >= task.settings.targetFragmentRows) closeFragment()
  }

  /** Writes an empty fragment (an append of no rows still creates its batch, as in Python). */
  def writeEmpty(): WrittenFragment = {
    val f = new OpenFragment
    open = Some(f)
    closeFragment()
    done.last
  }

  override def commit(): WriterCommitMessage = {
    closeFragment()
    FragmentsWritten(done.toSeq)
  }

  override def abort(): Unit = {
    open.foreach(f =>
      try f.close()
      catch { case NonFatal(_) => })
    open = None
    FragmentWriter.deleteQuietly(task, written.toSeq)
  }

  override def close(): Unit = open.foreach(f =>
    try f.close()
    catch { case NonFatal(_) => })

  private def closeFragment(): Unit = open.foreach { f =>
    open = None
    done += f.finish()
  }

  /** One fragment being written: a Parquet writer and statistics per group. */
  private final class OpenFragment {
    val fragmentId: String = WriteTask.newId()
    val path: String = s"${task.batchDirectory}/$fragmentId"
    written += path
    var rows = 0L
    private val keys = task.key.map(_ => mutable.ArrayBuffer.empty[KeyHash])
    private val files = projections.map { case (g, cols, proj) =>
      val fileId = WriteTask.newId()
      val rel = s"$path/$g-$fileId.parquet"
      val schema = StructType(cols.map(c => StructField(c.physicalName, c.dataType, nullable = c.input >= 0)))
      val conf = new Configuration(task.hadoopConf.value)
      ParquetWriteSupport.setSchema(schema, conf)
      val ctx = new TaskAttemptContextImpl(conf, new TaskAttemptID())
      val writer = new ParquetOutputWriter(FragmentWriter.uri(task, rel), ctx)
      OpenFile(
        fileId,
        g,
        rel,
        cols,
        proj,
        writer,
        cols.map(c => new ColumnStatsBuilder(c.dataType)).toArray,
        cols.map(_.nullable).toArray)
    }

    def add(id: Long, row: InternalRow): Unit = {
      task.key.foreach { k =>
        k.columns.foreach { case (name, at, _) => if (row.isNullAt(at)) throw WriteErrors.nullKey(k.table, name) }
        keys.get += KeyHash.ofRow(row, k.ordinals, k.types)
      }
      files.foreach { f =>
        val out = f.projection(id, row)
        var i = 0
        while (i < f.stats.length) {
          if (!f.nullable(i) && out.isNullAt(i)) throw FragmentWriter.nullInColumn(task, f.columns(i).name)
          f.stats(i).add(out, i)
          i += 1
        }
        f.writer.write(out)
      }
      rows += 1
    }

    def close(): Unit = files.foreach(_.writer.close())

    /**
     * Closes the files and describes the fragment; a file of `optional` columns only whose rows
     * are all NULL in them is deleted instead (its columns stay without a file: `missing`).
     */
    def finish(): WrittenFragment = {
      close()
      val (dropped, kept) =
        files.partition(f => f.columns.forall(_.optional) && f.stats.forall(_.result.nullCount.contains(rows)))
      dropped.foreach { f =>
        val p = new Path(FragmentWriter.uri(task, f.path))
        if (!p.getFileSystem(task.hadoopConf.value).delete(p, false)) {
          throw new IllegalStateException(s"Cannot delete the file of NULLs ${f.path} of batch '${task.batchName}'")
        }
      }
      val out = kept.map { f =>
        val p = new Path(FragmentWriter.uri(task, f.path))
        val size = p.getFileSystem(task.hadoopConf.value).getFileStatus(p).getLen
        val colStats: Seq[(String, FileColumnStats)] = f.columns.zip(f.stats).map { case (c, s) => c.name -> s.result }
        WrittenFile(
          f.fileId,
          fragmentId,
          f.group,
          f.path,
          rows,
          size,
          colStats,
          f.columns.map(c => c.name -> c.columnId).toMap)
      }
      keys.foreach(k => KeyIndex.write(task.tableUri, path, k.toIndexedSeq, task.hadoopConf.value))
      WrittenFragment(fragmentId, task.batchId, rows, path, { val s = seq; seq += 1; s }, out)
    }
  }
}

/** Makes one column group's row (in file order, stored types) from the generated id and the input row. */
private[write] sealed abstract class GroupRows {
  def apply(id: Long, row: InternalRow): InternalRow
}

private[write] object GroupRows {

  /** A view of the input row where no column needs a cast, else a projection (a copy) that casts. */
  def apply(input: StructType, cols: Seq[TargetColumn]): GroupRows =
    if (cols.forall(c => c.input < 0 || input(c.input).dataType == c.dataType)) {
      new View(new ColumnsRow(cols.map(_.input).toArray, cols.map(_.dataType).toArray))
    } else {
      val exprs = cols.map { c =>
        if (c.input < 0) BoundReference(0, LongType, nullable = false)
        else {
          val f = input(c.input)
          val ref = BoundReference(c.input + 1, f.dataType, f.nullable)
          if (f.dataType == c.dataType) ref else Cast(ref, c.dataType, Some("UTC"), ansiEnabled = true)
        }
      }
      new Projected(UnsafeProjection.create(exprs))
    }

  private final class View(row: ColumnsRow) extends GroupRows {
    override def apply(id: Long, input: InternalRow): InternalRow = row.set(id, input)
  }

  /** The id and the input row joined (the id first), then projected to the group's columns. */
  private final class Projected(projection: UnsafeProjection) extends GroupRows {
    private val idRow = new SpecificInternalRow(Seq(LongType))
    private val joined = new JoinedRow()
    override def apply(id: Long, input: InternalRow): InternalRow = {
      idRow.setLong(0, id)
      projection(joined(idRow, input))
    }
  }
}

/** One column file being written: its projection from the input row, Parquet writer and statistics. */
private[write] final case class OpenFile(
    fileId: String,
    group: String,
    path: String,
    columns: Seq[TargetColumn],
    projection: GroupRows,
    writer: ParquetOutputWriter,
    stats: Array[ColumnStatsBuilder],
    nullable: Array[Boolean])

private[write] object FragmentWriter {

  def nullInColumn(task: WriteTask, column: String): IllegalArgumentException = new IllegalArgumentException(
    s"Cannot append batch '${task.batchName}': column '$column' is not nullable but the data has a null " +
      "value in it; nothing was committed")

  /** ingest/spark.py `_written_ids`'s message; the task fails, so nothing is committed. */
  def nullId(task: WriteTask): IllegalArgumentException = new IllegalArgumentException(
    s"[OMNITABLE_INVALID_ROW_IDS] Cannot append batch '${task.batchName}': the DataFrame has rows with a " +
      "null _ai_unique_id_; supply a non-null BIGINT id for every row (or leave the column out); nothing " +
      "was committed")

  def uri(task: WriteTask, rel: String): String = task.tableUri.stripSuffix("/") + "/" + rel

  /** Delete fragment directories (relative paths) and everything in them; failures are ignored. */
  def deleteQuietly(task: WriteTask, fragmentPaths: Seq[String]): Unit = fragmentPaths.foreach { rel =>
    try {
      val p = new Path(uri(task, rel))
      p.getFileSystem(task.hadoopConf.value).delete(p, true)
    } catch { case NonFatal(_) => }
  }
}
