package io.omnitable.spark.write

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{RowLevelCommit, SystemColumns}
import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.read.exec.SerializableHadoopConf
import io.omnitable.spark.read.plan.{OmniTableBatch, TableHandle}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, RowLevelOperation}
import org.apache.spark.sql.types.{StructField, StructType}

/**
 * What a row-level statement writes besides deletions (docs/spark.md, "Row-level DML"): the new
 * values of UPDATE and MERGE ... UPDATE (`update`, `reinsert`) and the rows of MERGE ... INSERT
 * (`insert`), one instance per task, fed by [[OmniTableDeltaWriter]] (which records deletes
 * itself). `commit` returns what the task wrote, sent to the driver next to its deletes; `abort`
 * removes it. The seam UPDATE / MERGE plug into: [[RowChanges.factory]] picks the implementation.
 */
trait RowChanges {
  def update(metadata: InternalRow, id: InternalRow, row: InternalRow): Unit
  def reinsert(metadata: InternalRow, row: InternalRow): Unit
  def insert(row: InternalRow): Unit

  /** What the task wrote (None: nothing); the driver hands it to [[RowChangesFactory.toCommit]]. */
  def commit(): Option[Serializable]
  def abort(): Unit
  def close(): Unit
}

/**
 * Driver side of [[RowChanges]]: built when the write is planned, sent to every task
 * (`create`), and on the driver turns the tasks' results into the commit's parts (`toCommit`)
 * or removes what they wrote when the job fails (`abort`).
 */
trait RowChangesFactory extends Serializable {
  def create(partitionId: Int, taskId: Long): RowChanges

  /** `commit` with the tasks' `written` results added (none: unchanged). */
  def toCommit(written: Seq[Serializable], commit: RowLevelCommit): RowLevelCommit

  /** Remove what the tasks wrote (`written`), best effort: the job failed or the commit was refused. */
  def abort(written: Seq[Serializable]): Unit
}

object RowChanges {

  /** The forms of MERGE INTO an OmniTable table that Spark runs, for errors refusing the others. */
  val MergeForms: String =
    "MERGE INTO supports WHEN MATCHED [AND cond] THEN UPDATE SET col = expr, ... | UPDATE SET *, WHEN " +
      "MATCHED [AND cond] THEN DELETE and WHEN NOT MATCHED [AND cond] THEN INSERT (cols) VALUES (...) | " +
      "INSERT * clauses (the inserted rows become one named batch), WHEN NOT MATCHED BY SOURCE [AND cond] " +
      "THEN UPDATE SET col = expr, ... | DELETE clauses; or use Table.upsert in Python"

  /**
   * Refuse, before a job runs, a statement whose row changes are not supported
   * (`OMNITABLE_UNSUPPORTED_DML`). UPDATE and MERGE are column rewrites ([[ColumnChanges]]: a MERGE
   * inserting rows fails its tasks; the session extension refuses that form at analysis already);
   * DELETE needs no row changes.
   */
  def check(command: RowLevelOperation.Command, table: String): Unit = command match {
    case RowLevelOperation.Command.DELETE | RowLevelOperation.Command.UPDATE | RowLevelOperation.Command.MERGE =>
    case other => throw unsupported(table, other.toString)
  }

  /**
   * The row changes of a statement `command` on `handle`'s table whose written rows are
   * `info.schema`; `assigned`: the user columns it assigns, when known (see [[columnChanges]]);
   * `appendNameKept`: the plan proved the rows keep their `_ai_append_name_` (NULL in the rows).
   */
  def factory(
      command: RowLevelOperation.Command,
      handle: TableHandle,
      info: LogicalWriteInfo,
      assigned: Option[Set[String]] = None,
      inserts: Boolean = false,
      appendNameKept: Boolean = false): RowChangesFactory =
    command match {
      case RowLevelOperation.Command.DELETE => Unsupported(handle.snapshot.table.name, command.toString)
      case _ =>
        val changes = columnChanges(command, handle, info, assigned.filter(_.nonEmpty))
          .copy(appendNameKept = appendNameKept)
        if (inserts) changes.copy(inserts = Some(insertTask(handle, info))) else changes
    }

  /**
   * The new batch of a MERGE's `WHEN NOT MATCHED … INSERT` rows, prepared before any job runs:
   * named as INSERT INTO names its batch (write option `append_name`, else the session setting
   * `spark.omnitable.write.appendName`; `OMNITABLE_MISSING_APPEND_NAME` without one), laid out
   * with the append's settings. Into a keyed table (a MERGE the session extension recognised as
   * keyed: ON the key equality, `optimizer.KeyedMerge`) the task also writes each fragment's key
   * index ([[KeySpec]]). The driver reserves its ids and picks its batch id ([[OmniTableDeltaBatchWrite]]).
   */
  private def insertTask(handle: TableHandle, info: LogicalWriteInfo): WriteTask = {
    val snap = handle.snapshot
    val key = keySpec(snap.table.name, snap.table.properties, info.schema())
    val spark = SparkSession.active
    val conf = spark.sessionState.conf
    val settings = WriteSettings.resolve(
      snap.table.name,
      info.options().asCaseSensitiveMap().asScala.toMap,
      k => Option(conf.getConfString(k, null)),
      snap.table.properties)
    val groups = WriteSchema.insertTargets(snap, info.schema())
    val baseSchema = StructType(groups.head._2.map(c => StructField(c.physicalName, c.dataType)))
    val jc = OmniTableWriteBuilder.parquetConf(spark, baseSchema, settings)
    jc.setBoolean(s"parquet.enable.dictionary#${snap.rowIdColumn.physicalName}", false)
    WriteTask(
      snap.tableUri,
      settings.appendName,
      "",
      info.schema(),
      groups,
      0L,
      settings,
      new SerializableHadoopConf(jc),
      key = key)
  }

  /** The key columns of a keyed table (property `table.key`: a JSON list of names, or one name); empty when not keyed. */
  def keyColumns(properties: Map[String, String]): Seq[String] = properties.get("table.key") match {
    case None => Nil
    case Some(raw) =>
      try {
        val node = new com.fasterxml.jackson.databind.ObjectMapper().readTree(raw)
        if (node.isArray) node.elements().asScala.map(_.asText()).toSeq else Seq(node.asText())
      } catch { case scala.util.control.NonFatal(_) => Seq(raw) }
  }

  /** The key of a keyed table in the rows `schema` a MERGE inserts (None: not keyed). */
  private def keySpec(table: String, properties: Map[String, String], schema: StructType): Option[KeySpec] = {
    val key = keyColumns(properties)
    if (key.isEmpty) None
    else Some(KeySpec(
      table,
      key.map { k =>
        val at = schema.fieldNames.indexWhere(_.equalsIgnoreCase(k))
        if (at < 0) throw new IllegalStateException(s"the rows a MERGE inserts into $table have no key column $k")
        (k, at, schema(at).dataType)
      }
    ))
  }

  /**
   * [[ColumnChanges]] writing the `assigned` columns of Spark's rows, or (unknown) every
   * non-system column of them: an update rewrites the files of those columns in the touched
   * fragments, so knowing the assigned ones makes it column-only.
   */
  private def columnChanges(
      command: RowLevelOperation.Command,
      handle: TableHandle,
      info: LogicalWriteInfo,
      assigned: Option[Set[String]]): ColumnChangesFactory = {
    val snap = handle.snapshot
    val rowSchema = info.schema()
    val lowered = assigned.map(_.map(_.toLowerCase(java.util.Locale.ROOT)))
    val written = rowSchema.fields.zipWithIndex.filterNot { case (f, _) =>
      f.name == SystemColumns.RowId || f.name == SystemColumns.AppendName ||
      lowered.exists(!_.contains(f.name.toLowerCase(java.util.Locale.ROOT)))
    }.flatMap { case (f, i) =>
      snap.userColumns.find(_.name.equalsIgnoreCase(f.name)).map { c =>
        UpdateColumn(c.name, c.columnId, c.physicalName, c.groupName, c.dataType) -> i
      }
    }
    val spark = SparkSession.active
    val conf = spark.sessionState.conf
    val settings = WriteSettings.resolve(
      snap.table.name,
      info.options().asCaseSensitiveMap().asScala.toMap,
      k => Option(conf.getConfString(k, null)),
      snap.table.properties,
      named = false)
    val schema = StructType(written.map { case (c, _) => StructField(c.physicalName, c.dataType) })
    val hadoop = OmniTableBatch.readerSettings(spark, OmniTableWriteBuilder.parquetConf(spark, schema, settings))
    val task = RewriteTask(snap.tableUri, written.map(_._1).toSeq, new SerializableHadoopConf(hadoop))
    val fragments = handle.reader.loadFragments(snap).map { f =>
      val providers = task.columns.flatMap(c => f.fileFor(c.columnId).map(c.columnId -> _.path)).toMap
      f.fragmentId -> (FragmentRewrite(f.fragmentId, f.path, f.rowCount, providers), f.batchName)
    }.toMap
    val metadata = info.metadataSchema().orElseThrow(() =>
      new IllegalStateException(s"Spark gave no metadata schema for a $command on ${snap.table.name}"))
    ColumnChangesFactory(
      snap.table.name,
      command.toString,
      task,
      written.map(_._2).toSeq,
      rowSchema,
      metadata,
      fragments)
  }

  private def unsupported(table: String, what: String) = WriteErrors.unsupportedDml(
    table,
    what,
    "DELETE FROM, UPDATE and MERGE INTO … WHEN MATCHED run in Spark; use Table.update / Table.upsert in Python")

  /** Row changes of statements that have none to write: any change fails the task. */
  final case class Unsupported(table: String, command: String) extends RowChangesFactory with RowChanges {
    override def create(partitionId: Int, taskId: Long): RowChanges = this
    override def toCommit(written: Seq[Serializable], commit: RowLevelCommit): RowLevelCommit = commit
    override def abort(written: Seq[Serializable]): Unit = ()
    override def update(metadata: InternalRow, id: InternalRow, row: InternalRow): Unit =
      throw unsupported(table, s"$command (an updated row)")
    override def reinsert(metadata: InternalRow, row: InternalRow): Unit =
      throw unsupported(table, s"$command (a re-inserted row)")
    override def insert(row: InternalRow): Unit = throw unsupported(table, s"$command (an inserted row)")
    override def commit(): Option[Serializable] = None
    override def abort(): Unit = ()
    override def close(): Unit = ()
  }
}
