package io.omnitable.spark.write

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{KeyHash, KeyIndex, RowLevelCommit, SystemColumns, WrittenFile, WrittenFragment}
import io.omnitable.spark.errors.{UpdateErrors, WriteErrors}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.types.UTF8String

/**
 * What one task of an UPDATE / MERGE wrote: rewritten column files, how many rows they update,
 * the fragments of a MERGE's inserted batch, and (a MERGE into a keyed table) the offsets of the
 * rows it updated by fragment id: the rows whose keys the upsert found ([[KeyChecks.Found]]).
 */
final case class ColumnFilesWritten(
    files: Seq[WrittenFile],
    rows: Long,
    inserted: Seq[WrittenFragment] = Nil,
    matched: Map[String, java.util.BitSet] = Map.empty)

/**
 * The row changes of `UPDATE` and `MERGE … WHEN MATCHED THEN UPDATE` ([[RowChanges]]): an updated
 * row's new values of the written columns (`task.columns`, at `ordinals` in Spark's rows), located
 * by (`_ai_fragment_`, `_ai_row_offset_`) and streamed into the fragment's rewrite
 * ([[FragmentRewriteStream]]: one file per column group among the written columns) as they come:
 * the write clusters rows by fragment and sorts them by offset, so one task rewrites a fragment in
 * one pass, and a fragment is finished when the next one starts (or the task commits). Setting a system
 * column (`_ai_unique_id_`, `_ai_append_name_`) fails the task; so do re-inserted rows
 * (`OMNITABLE_UNSUPPORTED_DML`). The rows of `MERGE … WHEN NOT MATCHED THEN INSERT` go to a
 * [[FragmentWriter]] of the new batch (`inserts`; None: inserted rows fail the task), as an
 * append's task writes them.
 *
 * @param fragments the fragments of the snapshot by id: path, rows, providers of the written columns, batch name
 * @param inserts the new batch of a MERGE's inserted rows (its ids reserved and batch id set by the driver)
 * @param appendNameKept the plan proved every updated row keeps its `_ai_append_name_`
 *   (`optimizer.WriteOnlyAssignedColumns`): the rows carry NULL there, not checked
 */
final case class ColumnChangesFactory(
    table: String,
    command: String,
    task: RewriteTask,
    ordinals: Seq[Int],
    rowSchema: StructType,
    metadataSchema: StructType,
    fragments: Map[String, (FragmentRewrite, String)],
    inserts: Option[WriteTask] = None,
    appendNameKept: Boolean = false)
    extends RowChangesFactory {

  override def create(partitionId: Int, taskId: Long): RowChanges = new ColumnChanges(this, partitionId)

  /** The fragments the tasks wrote for the inserted batch. */
  def inserted(written: Seq[Serializable]): Seq[WrittenFragment] =
    written.collect { case w: ColumnFilesWritten => w.inserted }.flatten

  /** A MERGE into a keyed table (its inserted rows get key index files): an upsert. */
  def keyed: Boolean = inserts.exists(_.key.isDefined)

  /**
   * The keys of the rows a keyed MERGE updated and where it found them (fragment id, offset): the
   * updated offsets the tasks recorded, looked up in each fragment's key index.
   */
  def found(written: Seq[Serializable]): IndexedSeq[KeyChecks.Found] = {
    val matched = written.collect { case w: ColumnFilesWritten => w.matched }.flatten
    matched.flatMap { case (id, offsets) =>
      val (rewrite, _) = fragments(id)
      val index = KeyIndex.load(KeyIndex.uri(task.tableUri, rewrite.path), rewrite.rowCount, task.hadoopConf.value)
      (0 until index.size).filter(i => offsets.get(index.offset(i).toInt)).map { i =>
        KeyChecks.Found(KeyHash(index.h1(i), index.h2(i)), id, index.offset(i))
      }
    }.toIndexedSeq
  }

  override def toCommit(written: Seq[Serializable], commit: RowLevelCommit): RowLevelCommit = {
    val parts = written.collect { case w: ColumnFilesWritten => w }
    val files = parts.flatMap(_.files)
    if (files.isEmpty) return commit
    // one task rewrites a fragment (the plan clusters its rows, or the scan read it whole)
    parts.flatMap(_.files.map(_.fragmentId).distinct).groupBy(identity).collectFirst {
      case (id, seen) if seen.size > 1 =>
        throw new IllegalStateException(s"Cannot update fragment $id of $table: its rows came to ${seen.size} tasks")
    }
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

  override def abort(written: Seq[Serializable]): Unit = {
    ColumnRewriter.deleteQuietly(task, written.collect { case w: ColumnFilesWritten => w.files.map(_.path) }.flatten)
    inserts.foreach(t => OmniTableBatchWrite.deleteBatch(t, inserted(written).map(_.path)))
  }
}

private[write] final class ColumnChanges(f: ColumnChangesFactory, partition: Int) extends RowChanges {

  private val fragmentAt = f.metadataSchema.fieldIndex(SystemColumns.Fragment)
  private val offsetAt = f.metadataSchema.fieldIndex(SystemColumns.RowOffset)
  private val rowIdAt = Some(f.rowSchema.fieldNames.indexOf(SystemColumns.RowId)).filter(_ >= 0)
  private val appendNameAt =
    Some(f.rowSchema.fieldNames.indexOf(SystemColumns.AppendName)).filter(_ >= 0 && !f.appendNameKept)
  private val ordinals = f.ordinals.toArray
  private val written = mutable.ArrayBuffer.empty[WrittenFile]
  private val seen = mutable.HashSet.empty[String] // the fragments this task rewrote or rewrites
  private var current: UTF8String = _ // the fragment `stream` rewrites
  private var batch: UTF8String = _ // its batch name
  private var stream: FragmentRewriteStream = _
  private var rows = 0L
  private var inserter: FragmentWriter = _ // the inserted batch's writer, opened at the first inserted row
  private val matched = mutable.Map.empty[String, java.util.BitSet] // a keyed MERGE's updated offsets
  private var currentMatched: java.util.BitSet = _ // those of the fragment `stream` rewrites

  override def update(metadata: InternalRow, id: InternalRow, row: InternalRow): Unit = {
    val fragment = metadata.getUTF8String(fragmentAt)
    if (current == null || current != fragment) start(fragment)
    rowIdAt.foreach { i =>
      if (row.isNullAt(i) || row.getLong(i) != id.getLong(0))
        throw UpdateErrors.systemColumn(f.table, SystemColumns.RowId)
    }
    appendNameAt.foreach { i =>
      if (row.isNullAt(i) || row.getUTF8String(i) != batch) {
        throw UpdateErrors.systemColumn(f.table, SystemColumns.AppendName)
      }
    }
    val offset = metadata.getLong(offsetAt)
    stream.put(offset, row, ordinals)
    if (f.keyed) currentMatched.set(offset.toInt)
    rows += 1
  }

  /**
   * Finish the fragment being rewritten and start `fragment`'s rewrite. The write requires rows
   * clustered by fragment and sorted by offset, so a fragment comes once, its rows in order.
   */
  private def start(fragment: UTF8String): Unit = {
    finishCurrent()
    val id = fragment.toString
    val (rewrite, name) = f.fragments.getOrElse(id, throw new IllegalStateException(s"unknown fragment $id"))
    if (!seen.add(id)) throw new IllegalStateException(s"Cannot update fragment $id: its rows came out of order")
    stream = ColumnRewriter.stream(f.task, rewrite)
    current = fragment.clone()
    if (f.keyed) currentMatched = matched.getOrElseUpdate(id, new java.util.BitSet)
    batch = UTF8String.fromString(name)
  }

  private def finishCurrent(): Unit = if (stream != null) {
    val s = stream
    stream = null
    written ++= s.finish()
  }

  override def reinsert(metadata: InternalRow, row: InternalRow): Unit =
    throw unsupported(s"${f.command} (a re-inserted row)")

  override def insert(row: InternalRow): Unit = {
    if (inserter == null) {
      val task = f.inserts.getOrElse(throw unsupported(s"${f.command} … WHEN NOT MATCHED THEN INSERT"))
      inserter = new FragmentWriter(task, partition)
    }
    inserter.write(row)
  }

  private def unsupported(what: String) = WriteErrors.unsupportedDml(
    f.table,
    what,
    RowChanges.MergeForms)

  override def commit(): Option[Serializable] = {
    finishCurrent()
    val inserted = Option(inserter).map(_.commit()).collect { case FragmentsWritten(fs) => fs }.getOrElse(Nil)
    if (written.isEmpty && inserted.isEmpty) None
    else Some(ColumnFilesWritten(written.toSeq, rows, inserted, matched.toMap))
  }

  override def abort(): Unit = {
    abortCurrent()
    ColumnRewriter.deleteQuietly(f.task, written.map(_.path).toSeq)
    Option(inserter).foreach(_.abort())
  }

  override def close(): Unit = { // a fragment left unfinished: its files are not committed
    abortCurrent()
    Option(inserter).foreach(_.close())
  }

  private def abortCurrent(): Unit = if (stream != null) {
    val s = stream
    stream = null
    s.abort()
  }
}
