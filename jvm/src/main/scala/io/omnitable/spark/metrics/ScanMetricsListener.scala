package io.omnitable.spark.metrics

import java.lang.ref.WeakReference

import scala.collection.mutable

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode
import org.apache.spark.{SparkContext, Success}
import org.apache.spark.internal.Logging
import org.apache.spark.omnitable.SparkInternals
import org.apache.spark.scheduler.{SparkListener, SparkListenerJobStart, SparkListenerTaskEnd}

/**
 * Collects what Spark reports about reads, per task, for tests, benchmarks and the backfill
 * runner: the task's standard input metrics (`bytesRead` — bytes the task read through Hadoop
 * file systems, as for any Spark file source — and `recordsRead`) and, for tasks that read an
 * omnitable scan, that scan's [[ScanReport]] (fragments, files, column-chunk bytes, row groups,
 * corrupt fragments skipped). Totals are kept overall and per job tag: a task counts for every
 * tag of the job that ran its stage (`SparkContext.addJobTag`, property `spark.job.tags`), except
 * the per-session and per-execution tags Spark adds itself (`spark-session-<uuid>[-execution-root-id-<n>]`).
 *
 * Use it through the companion object (`install`, `reset`, `snapshot`) or, from Python and on
 * Spark Connect, through SQL ([[ScanMetricsFunction]]):
 * {{{
 *   SELECT metrics FROM omnitable_scan_metrics('reset')
 *   SELECT metrics FROM omnitable_scan_metrics()
 * }}}
 * Only successful tasks add metrics (a retried task counts once); failed ones count in
 * `failedTasks`.
 */
final class ScanMetricsListener private () extends SparkListener {
  import ScanMetricsListener._

  private val total = new Totals
  private val byTag = mutable.LinkedHashMap.empty[String, Totals]
  private val stageTags = mutable.LinkedHashMap.empty[Int, Set[String]]

  override def onJobStart(jobStart: SparkListenerJobStart): Unit = {
    val tags = Option(jobStart.properties).flatMap(p => Option(p.getProperty(JobTagsProperty))).toSeq
      .flatMap(_.split(JobTagsSeparator)).map(_.trim).filter(t => t.nonEmpty && !SparkInternalTag.matches(t)).toSet
    if (tags.nonEmpty) synchronized {
      jobStart.stageIds.foreach(s => stageTags(s) = stageTags.getOrElse(s, Set.empty) ++ tags)
      while (stageTags.size > MaxStagesRemembered) stageTags.remove(stageTags.head._1)
    }
  }

  override def onTaskEnd(taskEnd: SparkListenerTaskEnd): Unit = {
    val succeeded = taskEnd.reason == Success && taskEnd.taskMetrics != null
    val scans = if (!succeeded) Nil
    else taskEnd.taskInfo.accumulables.toSeq.collect {
      case info if info.name.contains(ScanReport.AccumulatorName) && info.update.exists(_.isInstanceOf[ScanReport]) =>
        info.id -> info.update.get.asInstanceOf[ScanReport]
    }
    val sqlMetrics = if (!succeeded) Nil else sqlMetricUpdates(taskEnd)
    synchronized {
      val buckets = total +:
        stageTags.getOrElse(taskEnd.stageId, Set.empty).toSeq.sorted
          .map(t => byTag.getOrElseUpdate(t, new Totals))
      buckets.foreach { b =>
        if (!succeeded) b.failedTasks += 1
        else {
          b.tasks += 1
          b.bytesRead += taskEnd.taskMetrics.inputMetrics.bytesRead
          b.recordsRead += taskEnd.taskMetrics.inputMetrics.recordsRead
          b.memoryBytesSpilled += taskEnd.taskMetrics.memoryBytesSpilled
          b.diskBytesSpilled += taskEnd.taskMetrics.diskBytesSpilled
          if (scans.nonEmpty) b.omnitableTasks += 1
          scans.foreach { case (id, r) => b.scanIds += id; b.report = b.report + r }
          sqlMetrics.foreach { case (name, v) => b.sqlMetrics(name) = b.sqlMetrics.getOrElse(name, 0L) + v }
        }
      }
    }
  }

  /** The task's updates of SQL metrics (plan node metrics such as "data sent to Python workers"). */
  private def sqlMetricUpdates(taskEnd: SparkListenerTaskEnd): Seq[(String, Long)] =
    taskEnd.taskInfo.accumulables.toSeq.collect {
      case info if SparkInternals.isSqlMetric(info) && info.name.isDefined =>
        info.update match {
          case Some(v: java.lang.Long) => Some(info.name.get -> math.max(0L, v.longValue))
          case _ => None
        }
    }.flatten

  private def clear(): Unit = synchronized {
    total.clear()
    byTag.clear()
  }

  private def json(): String = synchronized {
    val root = Mapper.createObjectNode()
    total.writeTo(root.putObject("total"))
    val tags = root.putObject("byJobTag")
    byTag.foreach { case (tag, t) => t.writeTo(tags.putObject(tag)) }
    Mapper.writeValueAsString(root)
  }
}

object ScanMetricsListener extends Logging {

  private val JobTagsProperty = "spark.job.tags" // SparkContext.SPARK_JOB_TAGS
  private val JobTagsSeparator = "," // SparkContext.SPARK_JOB_TAGS_SEP
  private val MaxStagesRemembered = 100000

  /** Tags Spark adds to every job of a session and SQL execution (not worth a bucket each). */
  private val SparkInternalTag = "spark-session-[0-9a-f-]{36}(-execution-root-id-[0-9]+)?".r
  private val DrainTimeoutMillis = 30000L
  private val Mapper = new ObjectMapper()

  /** Sums over tasks. */
  private final class Totals {
    var tasks, failedTasks, omnitableTasks, bytesRead, recordsRead = 0L
    var memoryBytesSpilled, diskBytesSpilled = 0L
    val scanIds: mutable.Set[Long] = mutable.Set.empty
    var report: ScanReport = ScanReport.Empty
    val sqlMetrics: mutable.TreeMap[String, Long] = mutable.TreeMap.empty

    def clear(): Unit = {
      tasks = 0; failedTasks = 0; omnitableTasks = 0; bytesRead = 0; recordsRead = 0
      memoryBytesSpilled = 0; diskBytesSpilled = 0
      scanIds.clear()
      report = ScanReport.Empty
      sqlMetrics.clear()
    }

    def writeTo(o: ObjectNode): Unit = {
      o.put("bytesRead", bytesRead)
      o.put("recordsRead", recordsRead)
      o.put("memoryBytesSpilled", memoryBytesSpilled)
      o.put("diskBytesSpilled", diskBytesSpilled)
      o.put("tasks", tasks)
      o.put("failedTasks", failedTasks)
      o.put("omnitableTasks", omnitableTasks)
      o.put("omnitableScans", scanIds.size)
      o.put("fragmentsRead", report.fragmentsRead)
      o.put("filesOpened", report.filesOpened)
      o.put("omnitableBytesRead", report.chunkBytesRead)
      o.put("rowGroupsRead", report.rowGroupsRead)
      o.put("rowGroupsSkipped", report.rowGroupsSkipped)
      val sql = o.putObject("sqlMetrics")
      sqlMetrics.foreach { case (name, v) => sql.put(name, v) }
      val corrupt = o.putArray("corruptFragments")
      report.corrupt.foreach { c =>
        val e = corrupt.addObject()
        e.put("table", c.table)
        e.put("fragment", c.fragment)
        e.put("file", c.file)
        c.rowGroup.foreach(rg => e.put("rowGroup", rg))
        e.put("error", c.error)
      }
    }
  }

  private var installed: Option[(WeakReference[SparkContext], ScanMetricsListener)] = None

  private def active: Option[(SparkContext, ScanMetricsListener)] = synchronized {
    installed.flatMap { case (ref, l) => Option(ref.get()).filterNot(_.isStopped).map(_ -> l) }
  }

  /**
   * Adds the listener to `sc` unless it is already there (idempotent). Counting starts now;
   * a new SparkContext gets a new, empty listener.
   */
  def install(sc: SparkContext): Unit = synchronized {
    if (!active.exists(_._1 eq sc)) {
      val listener = new ScanMetricsListener
      sc.addSparkListener(listener)
      installed = Some(new WeakReference(sc) -> listener)
    }
  }

  /** Forgets everything counted so far (after delivering the events already posted). */
  def reset(): Unit = active.foreach { case (sc, l) =>
    drain(sc)
    l.clear()
  }

  /**
   * The totals since install or the last reset, as JSON: `{"total": {...}, "byJobTag": {tag:
   * {...}}}` with `bytesRead`, `recordsRead`, `tasks`, `failedTasks`, `omnitableTasks`,
   * `omnitableScans` (distinct scans that ran tasks), `fragmentsRead`, `filesOpened`,
   * `omnitableBytesRead` (compressed column-chunk bytes), `rowGroupsRead`, `rowGroupsSkipped` and
   * `corruptFragments` (`[{table, fragment, file, rowGroup?, error}]`) and `sqlMetrics` (the tasks'
   * SQL metric updates summed by display name, e.g. "data sent to Python workers"). Events already posted are
   * delivered first, so a job that returned is fully counted. Empty totals when not installed.
   */
  def snapshot(): String = active match {
    case Some((sc, l)) =>
      drain(sc)
      l.json()
    case None => new ScanMetricsListener().json()
  }

  private def drain(sc: SparkContext): Unit =
    if (!SparkInternals.drainListenerBus(sc, DrainTimeoutMillis)) {
      logWarning(s"Spark's listener bus did not drain in $DrainTimeoutMillis ms: scan metrics may lag")
    }
}
