package io.omnitable.spark.write

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{RowLevelCommit, SystemColumns, WrittenFile}
import io.omnitable.spark.errors.{UpdateErrors, WriteErrors}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.types.StructType

/** What one task of an UPDATE / MERGE wrote: rewritten column files, and how many rows they update. */
final case class ColumnFilesWritten(files: Seq[WrittenFile], rows: Long)

/**
 * The row changes of `UPDATE` and `MERGE … WHEN MATCHED THEN UPDATE` ([[RowChanges]]): an updated
 * row's new values of the written columns (`task.columns`, at `ordinals` in Spark's rows) are kept
 * by (`_ai_fragment_`, `_ai_row_offset_`); when the task commits, every fragment it saw is
 * rewritten once ([[ColumnRewriter]]: one file per column group among the written columns). The
 * write clusters rows by fragment, so one fragment is rewritten by one task. Setting a system
 * column (`_ai_unique_id_`, `_ai_append_name_`) fails the task; so do re-inserted and inserted rows
 * (`OMNITABLE_UNSUPPORTED_DML`).
 *
 * @param fragments the fragments of the snapshot by id: path, rows, providers of the written columns, batch name
 */
final case class ColumnChangesFactory(
    table: String,
    command: String,
    task: RewriteTask,
    ordinals: Seq[Int],
    rowSchema: StructType,
    metadataSchema: StructType,
    fragments: Map[String, (FragmentRewrite, String)])
    extends RowChangesFactory {

  override def create(partitionId: Int, taskId: Long): RowChanges = new ColumnChanges(this)

  override def toCommit(written: Seq[Serializable], commit: RowLevelCommit): RowLevelCommit = {
    val parts = written.collect { case w: ColumnFilesWritten => w }
    val files = parts.flatMap(_.files)
    if (files.isEmpty) return commit
    val rows = parts.map(_.rows).sum
    val deleted = commit.summary.getOrElse("rows", 0L)
    commit.copy(
      op = "update",
      files = files,
      updatedColumns = task.columns.map(_.name),
      summary = Map(
        "columns" -> task.columns.map(_.name).asJava,
        "rows" -> rows,
        "fragments" -> files.map(_.fragmentId).distinct.size,
        "files" -> files.size,
        "user" -> sys.props.getOrElse("user.name", "")
      ) ++
        (if (commit.deletions.nonEmpty) Map("deleted" -> deleted) else Map.empty)
    )
  }

  override def abort(written: Seq[Serializable]): Unit =
    ColumnRewriter.deleteQuietly(task, written.collect { case w: ColumnFilesWritten => w.files.map(_.path) }.flatten)
}

private[write] final class ColumnChanges(f: ColumnChangesFactory) extends RowChanges {

  private val fragmentAt = f.metadataSchema.fieldIndex(SystemColumns.Fragment)
  private val offsetAt = f.metadataSchema.fieldIndex(SystemColumns.RowOffset)
  private val rowIdAt = Some(f.rowSchema.fieldNames.indexOf(SystemColumns.RowId)).filter(_ >= 0)
  private val appendNameAt = Some(f.rowSchema.fieldNames.indexOf(SystemColumns.AppendName)).filter(_ >= 0)
  private val pending = mutable.LinkedHashMap.empty[String, mutable.ArrayBuffer[(Long, InternalRow)]]
  private val written = mutable.ArrayBuffer.empty[WrittenFile]
  private var rows = 0L

  override def update(metadata: InternalRow, id: InternalRow, row: InternalRow): Unit = {
    val fragment = metadata.getUTF8String(fragmentAt).toString
    val (_, batch) = f.fragments.getOrElse(fragment, throw new IllegalStateException(s"unknown fragment $fragment"))
    rowIdAt.foreach { i =>
      if (row.isNullAt(i) || row.getLong(i) != id.getLong(0))
        throw UpdateErrors.systemColumn(f.table, SystemColumns.RowId)
    }
    appendNameAt.foreach { i =>
      if (row.isNullAt(i) || row.getUTF8String(i).toString != batch) {
        throw UpdateErrors.systemColumn(f.table, SystemColumns.AppendName)
      }
    }
    val values = new GenericInternalRow(f.ordinals.zip(f.task.columns).map { case (o, c) =>
      if (row.isNullAt(o)) null else InternalRow.copyValue(row.get(o, c.dataType))
    }.toArray[Any])
    pending.getOrElseUpdate(fragment, mutable.ArrayBuffer.empty) += metadata.getLong(offsetAt) -> values
  }

  override def reinsert(metadata: InternalRow, row: InternalRow): Unit =
    throw unsupported(s"${f.command} (a re-inserted row)")

  override def insert(row: InternalRow): Unit =
    throw unsupported(s"${f.command} … WHEN NOT MATCHED THEN INSERT")

  private def unsupported(what: String) = WriteErrors.unsupportedDml(
    f.table,
    what,
    RowChanges.MergeForms)

  override def commit(): Option[Serializable] = {
    pending.foreach { case (fragment, changes) =>
      val sorted = changes.sortBy(_._1)
      if (sorted.map(_._1).distinct.size != sorted.size) {
        throw new IllegalStateException(s"Cannot update fragment $fragment: a row was updated twice in one statement")
      }
      written ++=
        ColumnRewriter.rewrite(f.task, f.fragments(fragment)._1, sorted.map(_._1).toArray, sorted.map(_._2).toArray)
      rows += sorted.size
    }
    pending.clear()
    if (written.isEmpty) None else Some(ColumnFilesWritten(written.toSeq, rows))
  }

  override def abort(): Unit = {
    pending.clear()
    ColumnRewriter.deleteQuietly(f.task, written.map(_.path).toSeq)
  }

  override def close(): Unit = pending.clear()
}
