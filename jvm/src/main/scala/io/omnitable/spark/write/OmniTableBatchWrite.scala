package io.omnitable.spark.write

import scala.util.Try
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{AppendCommit, CatalogWriter, DdlWriter, TableSnapshot, WrittenFragment}
import io.omnitable.spark.errors.{OmniTableCommitException, WriteErrors}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.write.{BatchWrite, DataWriterFactory, PhysicalWriteInfo, WriterCommitMessage}

/**
 * The driver side of one append (python/omnitable/ingest/spark.py is the Python twin): reserves
 * `partitions << 33` ids in a short transaction before the tasks run, then commits every
 * fragment the tasks wrote once ([[CatalogWriter.commitAppend]]), after checking that each
 * fragment's ids lie in the range reserved for it. A refused commit deletes the written files
 * (Spark calls `abort` after a failed `commit` too); an unknown outcome keeps them. A CTAS
 * (`create`) writes to a table that does not exist yet: no run is recorded and nothing reserved
 * (its ids start at 0); its commit creates the table with the batch in one transaction.
 */
private[write] final class OmniTableBatchWrite(
    snap: TableSnapshot,
    branch: String,
    catalog: CatalogWriter,
    template: WriteTask,
    replace: Boolean,
    create: Option[StagedCreate] = None)
    extends BatchWrite {

  private val batchId = WriteTask.newId()
  @volatile private var task: WriteTask = template.copy(batchId = batchId)
  @volatile private var partitions = 1
  @volatile private var keepFiles = false
  @volatile private var extra: Seq[WrittenFragment] = Nil

  @volatile private var run: Option[AppendRun] = None

  override def createBatchWriterFactory(info: PhysicalWriteInfo): DataWriterFactory = {
    partitions = math.max(1, info.numPartitions())
    if (create.isEmpty) {
      val started = AppendRun.start(catalog, snap.table.tableId, task.batchName, OmniTableBatchWrite.appId, partitions)
      run = Some(started)
      val base =
        try catalog.reserveRowIds(snap.table.tableId, snap.table.name, partitions.toLong << WriteTask.IdShift)
        catch { case NonFatal(e) => started.failed(String.valueOf(e.getMessage)); throw e }
      task = task.copy(idBase = base)
    }
    new FragmentWriterFactory(task)
  }

  override def useCommitCoordinator(): Boolean = true

  override def commit(messages: Array[WriterCommitMessage]): Unit = {
    var fragments = written(messages)
    if (fragments.isEmpty) { // no rows: one empty fragment, so the batch exists with its schema
      extra = Seq(new FragmentWriter(task, 0).writeEmpty())
      fragments = extra
    }
    val ranges = checkReserved(fragments)
    val commit = AppendCommit(
      snap.table.tableId,
      snap.table.name,
      branch,
      snap.snapshot.version,
      batchId,
      task.batchName,
      fragments,
      ranges,
      replace,
      runId = run.map(_.runId))
    val version =
      try {
        catalog.failpoints.hit("append.before_commit")
        create match {
          case Some(c) =>
            val reserved = partitions.toLong << WriteTask.IdShift
            val outcome = new DdlWriter(catalog).createWithAppend(c.table, commit, reserved)
            c.check(outcome)
            1L
          case None => catalog.commitAppend(commit)
        }
      } catch {
        case e: OmniTableCommitException if e.omniErrorClass == WriteErrors.CommitOutcomeUnknown =>
          keepFiles = true
          run.foreach(_.failed(e.getMessage))
          throw e
        case NonFatal(e) =>
          run.foreach(_.failed(String.valueOf(e.getMessage)))
          throw e
      }
    run.foreach(_.succeeded(fragments.map(_.rowCount).sum, version))
  }

  override def abort(messages: Array[WriterCommitMessage]): Unit = {
    run.foreach(_.failed("the Spark job failed before its commit; nothing was committed"))
    if (!keepFiles) FragmentWriter.deleteQuietly(task, (written(messages) ++ extra).map(_.path))
  }

  private def written(messages: Array[WriterCommitMessage]): Seq[WrittenFragment] =
    messages.toSeq.flatMap {
      case FragmentsWritten(fs) => fs
      case _ => Nil
    }

  /**
   * The id range of each fragment (from its `_ai_unique_id_` statistics), after checking that
   * they lie in the reserved range and that sequence numbers are unique (ingest/ids.py
   * `check_reserved`: tasks number rows from their partition id; the driver does not trust it).
   */
  private def checkReserved(fragments: Seq[WrittenFragment]): Seq[(Long, Long)] = {
    val lo = task.idBase
    val hi = task.idBase + (partitions.toLong << WriteTask.IdShift) - 1
    val ranges = fragments.flatMap { f =>
      f.files.flatMap(_.stats).collectFirst { case (n, st) if n == OmniTableWriteBuilder.RowId => st }
        .flatMap(st => st.min.zip(st.max)).map { case (a, b) => (f, a.toLong, b.toLong) }
    }
    ranges.find { case (_, a, b) => a < lo || b > hi }.foreach { case (f, a, b) =>
      throw WriteErrors.conflict(
        s"Cannot append: fragment ${f.fragmentId} holds generated _ai_unique_id_ values [$a, $b] outside " +
          s"the reserved range [$lo, $hi] (a task saw an unexpected partition id); nothing was committed, " +
          "retry the append")
    }
    if (fragments.map(_.seq).distinct.size != fragments.size) {
      throw WriteErrors.conflict(
        "Cannot append: two written fragments have the same sequence number (a task saw an unexpected " +
          "partition id); nothing was committed, retry the append")
    }
    ranges.map { case (_, a, b) => (a, b) }.sortBy(_._1)
  }
}

private object OmniTableBatchWrite {

  /** The Spark application's id, recorded in the run's plan. */
  def appId: Option[String] = SparkSession.getActiveSession.flatMap(s => Try(s.sparkContext.applicationId).toOption)
}
