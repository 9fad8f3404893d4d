package io.omnitable.spark.backfill

import scala.util.control.NonFatal

import io.omnitable.spark.catalog._
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableCommitException, ProcedureErrors, WriteErrors}
import io.omnitable.spark.write.{CatalogRun, FeatureOutput, FragmentWork, SqlFeatureJob, TableFrames}
import org.apache.spark.sql.SparkSession

/** What one feature's backfill did: fragments and rows computed, the version that committed them. */
final case class FeatureBackfilled(feature: String, fragments: Int, rows: Long, version: Long)

/**
 * `CALL system.backfill`: a backfill of SQL features run entirely in the JVM, as
 * python/omnitable/exec/runner.py runs a plan: a `backfill` run row (its heartbeat refreshed
 * every 30 s while it runs: [[CatalogRun]]), then per step (one commit per
 * step, as Python's default `checkpoint_fragments`) the head read again, the plan checked to
 * still hold, one Spark job computing and writing the step's files ([[SqlFeatureJob]]), and one
 * commit ([[BackfillCommitter]]). A failed step deletes its files; committed steps stay (a later
 * call plans again and skips them). Failpoints: `backfill.before_commit`, `backfill.after_commit`
 * and the commit's.
 */
final class JvmBackfill(spark: SparkSession, reader: CatalogReader, frames: TableFrames, failpoints: Failpoints) {

  def run(
      table: String,
      branch: String,
      targets: Seq[String],
      retryErrors: Boolean = false,
      batches: Option[Seq[String]] = None,
      checkpointFragments: Option[Int] = None): Seq[FeatureBackfilled] = {
    val plan = BackfillPlanner.plan(reader, table, branch, targets, retryErrors, batches)
    if (plan.steps.isEmpty) return Nil
    val tableId = reader.loadTable(table, SnapshotSpec(branch = Some(branch))).table.tableId
    val writer = this.writer()
    val described = Map[String, Any](
      "targets" -> plan.targets,
      "batches" -> plan.batches,
      "base_version" -> plan.baseVersion,
      "steps" -> plan.steps.map(_.features.map(_.id)),
      "options" -> Map("engine" -> "spark-jvm", "checkpoint_fragments" -> checkpointFragments)
    )
    val run = CatalogRun.start(writer, tableId, "backfill", described)
    val committed = scala.collection.mutable.ArrayBuffer.empty[FeatureBackfilled] // one per feature and chunk
    val done = scala.collection.mutable.ArrayBuffer.empty[FeatureBackfilled] // one per feature and step
    try {
      plan.steps.foreach { step =>
        val chunks = BackfillJvmChunks.of(step, checkpointFragments)
        val results = chunks.flatMap { c =>
          val r = runStep(table, branch, run.runId, c)
          committed ++= r
          r
        }
        done ++= BackfillJvmChunks.merged(results)
      }
      run.succeeded(metrics(committed.toSeq))
    } catch {
      case NonFatal(e) =>
        val status = e match { // Python's RunScope: aborted on ErrorRatioExceeded
          case a: OmniTableAnalysisException if a.omniErrorClass == "OMNITABLE_ERROR_RATIO_EXCEEDED" => "aborted"
          case _ => "failed"
        }
        run.failed(Option(e.getMessage).getOrElse(e.toString), metrics(committed.toSeq), status)
        throw e
    }
    done.toSeq
  }

  private def metrics(done: Seq[FeatureBackfilled]): Map[String, Any] = Map(
    "versions" -> done.map(_.version).distinct,
    "steps" -> done.map(d => Map("feature" -> d.feature, "fragments" -> d.fragments, "rows" -> d.rows)))

  private def runStep(table: String, branch: String, runId: String, planned: BackfillStep)
      : Seq[FeatureBackfilled] = {
    val h = BackfillPlanner.head(reader, table, branch)
    checkPlanHolds(h, planned)
    val step = withRecordedErrors(h, planned)
    if (step.work.isEmpty) return Nil
    val work = step.work.map { case (n, fs) => n -> fs.map(f => FragmentWork(f.fragmentId, f.path, f.rowCount)) }
    val outputs =
      SqlFeatureJob.run(spark, frames, table, h.snap, branch, h.snap.snapshot.version, step.features, work)
    val version =
      try {
        checkOutputs(step, outputs)
        checkErrorRatio(h, step, outputs)
        val batchOf = h.fragments.map(f => f.fragmentId -> f.batchName).toMap
        ErrorTable.record(spark, writer(), h.snap, step.features, batchOf, outputs, runId)
        val commit = BackfillCommit(
          h.snap.table.tableId,
          branch,
          h.snap.snapshot.version,
          runId,
          step.features,
          outputs.map(o => backfillFile(h, step, o)),
          expected(h, step, outputs))
        failpoints.hit("backfill.before_commit")
        new BackfillCommitter(reader, failpoints).commit(commit)
      } catch {
        case e: OmniTableCommitException if e.omniErrorClass == WriteErrors.CommitOutcomeUnknown => throw e
        case NonFatal(e) =>
          deleteFiles(h, step, outputs)
          throw e
      }
    failpoints.hit("backfill.after_commit") // committed: the files stay whatever happens now
    step.features.map { f =>
      val frags = step.work(f.name)
      FeatureBackfilled(f.id, frags.size, frags.map(_.rowCount).sum, version)
    }
  }

  /**
   * runner.py `_run_chunk`: a fragment retried for its failed records whose file has no row in the
   * error table (nothing recorded to retry) is skipped; features left without work drop out.
   */
  private def withRecordedErrors(h: HeadState, step: BackfillStep): BackfillStep =
    if (step.retry.isEmpty) step
    else {
      val recorded = ErrorTable.filesWithRows(spark, h.snap, step.retry.values.flatMap(_.values).toSeq)
      val work = step.work.map { case (n, fs) =>
        n -> fs.filter(f => step.retry.get(n).flatMap(_.get(f.fragmentId)).forall(recorded.contains))
      }.filter(_._2.nonEmpty)
      step.copy(features = step.features.filter(f => work.contains(f.name)), work = work)
    }

  private def deleteFiles(h: HeadState, step: BackfillStep, outputs: Seq[FeatureOutput]): Unit =
    outputs.headOption.foreach { _ =>
      val conf = spark.sparkContext.hadoopConfiguration
      outputs.foreach { o =>
        try {
          val p = new org.apache.hadoop.fs.Path(DataPaths.join(h.snap.tableUri, o.file.path))
          p.getFileSystem(conf).delete(p, false)
        } catch { case NonFatal(_) => }
      }
    }

  /** runner.py `_check_plan_holds`: planned fragments still visible, the files the step replaces unchanged. */
  private def checkPlanHolds(h: HeadState, step: BackfillStep): Unit = {
    val ids = step.features.map(_.id).mkString(", ")
    val live = h.fragments.map(_.fragmentId).toSet
    val gone = step.fragments.filterNot(f => live.contains(f.fragmentId))
    if (gone.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot run backfill step of $ids: ${gone.size} planned fragment(s) were removed by a concurrent commit " +
          s"(batch '${gone.head.batchName}' replaced or compacted) after the plan; nothing of this chunk was committed. " +
          "Re-plan and run again.")
    }
    val changed = step.targets.toSeq.filter { case ((fid, col), planned) =>
      !h.byName.contains(col) || h.provider(fid, col).map(_.file.fileId) != planned
    }
    if (changed.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot run backfill step of $ids: the file(s) it patches or replaces for column(s) " +
          s"${changed.map(_._1._2).distinct.sorted.mkString(", ")} in ${changed.map(_._1._1).distinct.size} fragment(s) " +
          "were replaced by a concurrent commit after the plan; nothing of this chunk was committed. Re-plan and run again.")
    }
  }

  private def writer(): CatalogWriter = new CatalogWriter(reader.address, failpoints = failpoints)

  /** Every planned (feature, fragment) has a file. */
  private def checkOutputs(step: BackfillStep, outputs: Seq[FeatureOutput]): Unit = {
    val produced = outputs.map(o => (o.feature, o.file.fragmentId)).toSet
    val missing = for {
      (n, fs) <- step.work.toSeq
      f <- fs if !produced.contains((n, f.fragmentId))
    } yield f.fragmentId
    if (missing.nonEmpty) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot commit backfill step of ${step.features.map(_.id).mkString(", ")}: no output for fragment(s) " +
          s"${missing.distinct.sorted.take(3).mkString(", ")} (a fragment was not read completely)")
    }
  }

  /**
   * runner.py `_check_error_ratio`: more than `backfill.max_error_ratio` (the session's
   * `spark.omnitable.` setting, else the table property, else 0.01) of a feature's records failed.
   */
  private def checkErrorRatio(h: HeadState, step: BackfillStep, outputs: Seq[FeatureOutput]): Unit = {
    val key = "backfill.max_error_ratio"
    val maxRatio = spark.conf.getOption(s"spark.omnitable.$key")
      .orElse(h.snap.table.properties.get(key))
      .map(_.trim.stripPrefix("\"").stripSuffix("\"").toDouble)
      .getOrElse(0.01)
    step.features.foreach { f =>
      val mine = outputs.filter(_.feature == f.name)
      val failed = mine.map(_.typeErrors.size).sum
      val records = mine.map(_.file.rowCount).sum
      if (failed > 0 && failed > maxRatio * records) {
        val sample = mine.flatMap(_.typeErrors).head
        throw ProcedureErrors.errorRatioExceeded(
          s"Cannot commit backfill of ${f.id}: $failed of $records records failed " +
            s"(${percent(failed.toDouble / math.max(1L, records))}), above max_error_ratio=${percent(maxRatio)}; " +
            s"nothing of this step was committed. First failure: type CAST_INVALID: " +
            s"${ErrorTable.message(f, sample.value).take(300)}. Fix the feature and bump its version, or raise " +
            "max_error_ratio.")
      }
    }
  }

  /** Python's `{x:.2%}`. */
  private def percent(x: Double): String =
    new java.math.BigDecimal(x * 100).setScale(2, java.math.RoundingMode.HALF_EVEN).toPlainString + "%"

  /** The new file with its read set (the inputs' providers at the step's version) and the group files it replaces (runner.py `_owned_files`). */
  private def backfillFile(h: HeadState, step: BackfillStep, o: FeatureOutput): BackfillFile = {
    val f = step.features.find(_.name == o.feature).get
    val fid = o.file.fragmentId
    val inputs = f.inputs.filter(h.byName.contains).map { i =>
      val p = h.provider(fid, i)
      LineageInput(i, p.map(_.file.fileId), p.map(_.file.addedVersion))
    }
    val file = o.file.copy(columnIds = f.outputNames.flatMap(n => step.columnIds.get(n).map(n -> _)).toMap)
    BackfillFile(f, file, inputs, h.ownedFiles.getOrElse((fid, f.name), Nil), o.typeErrors.size)
  }

  /** The read set (role input) and planned targets (role target) of the step's files. */
  private def expected(h: HeadState, step: BackfillStep, outputs: Seq[FeatureOutput]): Seq[ExpectedFile] =
    outputs.flatMap { o =>
      val f = step.features.find(_.name == o.feature).get
      val fid = o.file.fragmentId
      f.inputs.filter(h.byName.contains).map(i =>
        ExpectedFile(fid, i, h.provider(fid, i).map(_.file.fileId), "input")) ++
        f.outputNames.flatMap(c => step.targets.get((fid, c)).map(t => ExpectedFile(fid, c, t, "target")))
    }
}

/** runner.py `_run_step`'s checkpoint chunks: a step cut into consecutive runs of fragments, each committed alone. */
private[backfill] object BackfillJvmChunks {

  /** The step's fragments (first seen first) in chunks of `size` (None: the whole step); each chunk keeps only its fragments' work, targets and retries. */
  def of(step: BackfillStep, size: Option[Int]): Seq[BackfillStep] = {
    val fragments = step.fragments
    size.filter(_ < fragments.size).fold(Seq(step)) { n =>
      fragments.grouped(n).toSeq.map { chunk =>
        val ids = chunk.map(_.fragmentId).toSet
        val work =
          step.work.map { case (f, fs) => f -> fs.filter(fr => ids.contains(fr.fragmentId)) }.filter(_._2.nonEmpty)
        step.copy(
          features = step.features.filter(f => work.contains(f.name)),
          work = work,
          targets = step.targets.filter { case ((fid, _), _) => ids.contains(fid) },
          retry = step.retry.map { case (f, m) => f -> m.filter { case (fid, _) => ids.contains(fid) } }
        )
      }
    }
  }

  /** One result per feature of a step: fragments and rows summed over its chunks, the last chunk's version. */
  def merged(results: Seq[FeatureBackfilled]): Seq[FeatureBackfilled] =
    results.groupBy(_.feature).values.map { rs =>
      FeatureBackfilled(rs.head.feature, rs.map(_.fragments).sum, rs.map(_.rows).sum, rs.map(_.version).max)
    }.toSeq.sortBy(r => results.indexWhere(_.feature == r.feature))
}
