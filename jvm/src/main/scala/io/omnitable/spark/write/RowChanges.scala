package io.omnitable.spark.write

import io.omnitable.spark.catalog.RowLevelCommit
import io.omnitable.spark.errors.WriteErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.write.{LogicalWriteInfo, RowLevelOperation}

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

  /**
   * Refuse, before a job runs, a statement whose row changes are not supported: today UPDATE and
   * MERGE (`OMNITABLE_UNSUPPORTED_DML`); DELETE needs none.
   */
  def check(command: RowLevelOperation.Command, table: String): Unit = command match {
    case RowLevelOperation.Command.DELETE =>
    case other => throw unsupported(table, other.toString)
  }

  /** The row changes of a statement `command` on `table` whose written rows are `info.schema`. */
  def factory(command: RowLevelOperation.Command, table: String, info: LogicalWriteInfo): RowChangesFactory =
    Unsupported(table, command.toString)

  private def unsupported(table: String, what: String) = WriteErrors.unsupportedDml(
    table,
    what,
    "DELETE FROM runs in Spark; for UPDATE and MERGE use Table.update / Table.upsert in Python")

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
