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
    val written = mutable.ArrayBuffer.empty[WrittenFile]
    try {
      task.groups.foreach { case (group, cols) => written += rewriteGroup(task, frag, group, cols, offsets, values) }
      written.toSeq
    } catch {
      case NonFatal(e) =>
        deleteQuietly(task, written.map(_.path).toSeq)
        throw e
    }
  }

  /** Delete written files (paths relative to the table); failures are ignored. */
  def deleteQuietly(task: RewriteTask, paths: Seq[String]): Unit = paths.foreach { rel =>
    try {
      val p = new Path(DataPaths.join(task.tableUri, rel))
      p.getFileSystem(task.hadoopConf.value).delete(p, false)
    } catch { case NonFatal(_) => }
  }

  private def rewriteGroup(
      task: RewriteTask,
      frag: FragmentRewrite,
      group: String,
      cols: Seq[(UpdateColumn, Int)],
      offsets: Array[Long],
      values: Array[InternalRow]): WrittenFile = {
    // the files providing the group's columns now, and where each column sits in them
    val byFile = cols.flatMap { case (c, _) => frag.providers.get(c.columnId).map(_ -> c) }.groupBy(_._1).toSeq
      .sortBy(_._1).map { case (f, cs) => f -> cs.map(_._2) }
    val source: Map[Int, (Int, Int)] = byFile.zipWithIndex.flatMap { case ((_, cs), fi) =>
      cs.zipWithIndex.map { case (c, field) => c.columnId -> (fi, field) }
    }.toMap
    val slices = byFile.map { case (f, cs) =>
      FileSlice(
        DataPaths.join(task.tableUri, f),
        StructType(cs.map(c => StructField(c.physicalName, c.dataType))),
        frag.rowCount)
    }
    val fileId = WriteTask.newId()
    val rel = s"${frag.path}/$group-$fileId.parquet"
    val conf: Configuration = task.hadoopConf.value
    val schema = StructType(cols.map { case (c, _) => StructField(c.physicalName, c.dataType, nullable = true) })
    val writeConf = new Configuration(conf)
    ParquetWriteSupport.setSchema(schema, writeConf)
    val uri = DataPaths.join(task.tableUri, rel)
    val writer = new ParquetOutputWriter(uri, new TaskAttemptContextImpl(writeConf, new TaskAttemptID()))
    val stats = cols.map { case (c, _) => new ColumnStatsBuilder(c.dataType) }.toArray
    val out = new SpecificInternalRow(cols.map(_._1.dataType))
    var next = 0 // the next offset to apply
    try {
      val reader = new AlignedFilesReader(slices, frag.rowCount, conf)
      try reader.foreachBatch { (first, n, batches) =>
          var i = 0
          while (i < n) {
            val row = first + i
            val changed = next < offsets.length && offsets(next) == row
            var j = 0
            while (j < cols.length) {
              val (c, k) = cols(j)
              val v =
                if (changed) (if (values(next).isNullAt(k)) null else values(next).get(k, c.dataType))
                else source.get(c.columnId) match {
                  case Some((fi, field)) =>
                    val r = batches(fi).getRow(i)
                    if (r.isNullAt(field)) null else r.get(field, c.dataType)
                  case None => null
                }
              out.update(j, v)
              stats(j).add(out, j)
              j += 1
            }
            writer.write(out)
            if (changed) next += 1
            i += 1
          }
        }
      finally reader.close()
    } finally writer.close()
    if (next != offsets.length) {
      deleteQuietly(task, Seq(rel))
      throw new IllegalArgumentException(
        s"Cannot update fragment ${frag.fragmentId}: row offsets ${offsets.drop(next).take(3).mkString(", ")} " +
          s"are not below its ${frag.rowCount} rows (or not ascending)")
    }
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
}
