package io.omnitable.spark.write

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}

import scala.util.Try
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{
  AppendCommit,
  CatalogWriter,
  DdlWriter,
  FinishedRun,
  NewColumn,
  TableSnapshot,
  WrittenFragment
}
import io.omnitable.spark.errors.{OmniTableCommitException, WriteErrors}
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.write.{BatchWrite, DataWriterFactory, PhysicalWriteInfo, WriterCommitMessage}

/**
 * The driver side of one append (python/omnitable/ingest/spark.py is the Python twin): reserves
 * `partitions << 33` ids in a short transaction before the tasks run (none when the data supplies
 * `_ai_unique_id_`), then commits every fragment the tasks wrote once
 * ([[CatalogWriter.commitAppend]] through [[RowIdChecks.commit]]), after checking that each
 * fragment's ids lie in the range reserved for it, or that supplied ids are unique and new
 * ([[RowIdChecks]]). A refused commit deletes the written files
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
    create: Option[StagedCreate] = None,
    newColumns: Seq[NewColumn] = Nil)
    extends BatchWrite {

  @volatile private var batchId = WriteTask.newId()
  @volatile private var task: WriteTask = template.copy(batchId = batchId)
  @volatile private var partitions = 1
  @volatile private var keepFiles = false
  @volatile private var extra: Seq[WrittenFragment] = Nil

  @volatile private var run: Option[CatalogRun] = None
  @volatile private var startedAt = CatalogWriter.utcNow() // a CTAS's run: recorded at its commit

  override def createBatchWriterFactory(info: PhysicalWriteInfo): DataWriterFactory = {
    partitions = math.max(1, info.numPartitions())
    startedAt = CatalogWriter.utcNow()
    if (create.isEmpty) {
      val started = AppendRun.start(catalog, snap.table.tableId, task.batchName, OmniTableBatchWrite.appId, partitions)
      run = Some(started)
      val base =
        if (task.suppliedIds >= 0) 0L // supplied ids: nothing to reserve
        else
          try catalog.reserveRowIds(snap.table.tableId, snap.table.name, partitions.toLong << WriteTask.IdShift)
          catch { case NonFatal(e) => started.failed(String.valueOf(e.getMessage)); throw e }
      task = task.copy(idBase = base)
    }
    batchId = OmniTableBatchWrite.unusedBatchId(task)
    task = task.copy(batchId = batchId)
    new FragmentWriterFactory(task)
  }

  override def useCommitCoordinator(): Boolean = true

  override def commit(messages: Array[WriterCommitMessage]): Unit = {
    var fragments = written(messages)
    if (fragments.isEmpty) { // no rows: one empty fragment, so the batch exists with its schema
      extra = Seq(new FragmentWriter(task, 0).writeEmpty())
      fragments = extra
    }
    val supplied = task.suppliedIds >= 0
    val checks = new RowIdChecks(snap, task, SparkSession.active)
    val ranges = if (supplied) { checkSequences(fragments); Nil }
    else checkReserved(fragments)
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
      runId = run.map(_.runId),
      newColumns = newColumns
    )
    val version =
      try {
        val ids = if (supplied) checks.written(fragments) else None
        val withIds = commit.copy(supplied = ids.map(_.bounds))
        ids.foreach(checks.checkExisting(catalog, withIds, _))
        catalog.failpoints.hit("append.before_commit")
        create match {
          case Some(c) =>
            val reserved = if (supplied) 0L else partitions.toLong << WriteTask.IdShift
            val rows = fragments.map(_.rowCount).sum
            val ran = FinishedRun(
              CatalogWriter.newRunId("ingest"),
              AppendRun.plan(task.batchName, OmniTableBatchWrite.appId, partitions),
              startedAt,
              Map("rows" -> rows, "version" -> 1L))
            val outcome = new DdlWriter(catalog).createWithAppend(c.table, withIds, reserved, Some(ran))
            c.check(outcome)
            1L
          case None => checks.commit(catalog, withIds, ids)
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
    run.foreach(_.succeeded(AppendRun.metrics(fragments.map(_.rowCount).sum, version)))
  }

  override def abort(messages: Array[WriterCommitMessage]): Unit = {
    run.foreach(_.failed("the Spark job failed before its commit; nothing was committed"))
    if (!keepFiles) OmniTableBatchWrite.deleteBatch(task, (written(messages) ++ extra).map(_.path))
  }

  private def written(messages: Array[WriterCommitMessage]): Seq[WrittenFragment] =
    messages.toSeq.flatMap {
      case FragmentsWritten(fs) => fs
      case _ => Nil
    }

  private def checkReserved(fragments: Seq[WrittenFragment]): Seq[(Long, Long)] =
    OmniTableBatchWrite.checkReserved(task, partitions, fragments)

  private def checkSequences(fragments: Seq[WrittenFragment]): Unit = OmniTableBatchWrite.checkSequences(fragments)
}

private[write] object OmniTableBatchWrite {

  /**
   * The id range of each fragment (from its `_ai_unique_id_` statistics), after checking that
   * they lie in the reserved range and that sequence numbers are unique (ingest/ids.py
   * `check_reserved`: tasks number rows from their partition id; the driver does not trust it).
   */
  def checkReserved(task: WriteTask, partitions: Int, fragments: Seq[WrittenFragment]): Seq[(Long, Long)] = {
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
    checkSequences(fragments)
    ranges.map { case (_, a, b) => (a, b) }.sortBy(_._1)
  }

  def checkSequences(fragments: Seq[WrittenFragment]): Unit =
    if (fragments.map(_.seq).distinct.size != fragments.size) {
      throw WriteErrors.conflict(
        "Cannot append: two written fragments have the same sequence number (a task saw an unexpected " +
          "partition id); nothing was committed, retry the append")
    }

  /** The Spark application's id, recorded in the run's plan. */
  def appId: Option[String] = SparkSession.getActiveSession.flatMap(s => Try(s.sparkContext.applicationId).toOption)

  /** Seconds after an abort at which the batch directory is deleted again (see [[deleteBatch]]). */
  private val SweepDelaysSeconds = Seq(5L, 30L)

  private lazy val sweeper: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "omnitable-abort-sweeper")
    t.setDaemon(true)
    t
  }

  /**
   * A batch id whose directory does not exist yet, so that the directory belongs to this write
   * alone and [[deleteBatch]] may remove it whole (ids are random; this rules out a prefix clash).
   */
  def unusedBatchId(task: WriteTask, candidates: Iterator[String] = Iterator.continually(WriteTask.newId())): String = {
    def taken(id: String): Boolean = Try {
      val p = new Path(FragmentWriter.uri(task, task.copy(batchId = id).batchDirectory))
      p.getFileSystem(task.hadoopConf.value).exists(p)
    }.getOrElse(false)
    candidates.find(id => !taken(id)).get
  }

  /**
   * Deletes what an aborted append wrote: the fragments of the tasks that reported, then the whole
   * batch directory (it holds only this write's files). A task the scheduler had already allowed to
   * commit may still be closing its files when the job fails; its message never reaches the driver,
   * so the directory is deleted again a few seconds later, and once more after that.
   */
  def deleteBatch(task: WriteTask, fragmentPaths: Seq[String]): Unit = {
    val all = fragmentPaths :+ task.batchDirectory
    FragmentWriter.deleteQuietly(task, all)
    SweepDelaysSeconds.foreach { s =>
      sweeper.schedule(
        (() => FragmentWriter.deleteQuietly(task, Seq(task.batchDirectory))): Runnable,
        s,
        TimeUnit.SECONDS)
    }
  }
}
