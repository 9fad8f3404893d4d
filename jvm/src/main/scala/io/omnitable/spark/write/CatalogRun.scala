package io.omnitable.spark.write

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import io.omnitable.spark.catalog.CatalogWriter

/**
 * A run a JVM writer records in the catalog's `runs` (Python's `RunScope`): started `running`
 * with its plan and this driver's host and pid; its heartbeat refreshed every 30 seconds
 * (Python's `HEARTBEAT_S`) until it ends once: `succeeded` with its metrics, or `failed` /
 * `aborted` with the error's message. A driver that dies leaves it `running`, which
 * `Table.runs()` reports `abandoned` once the heartbeat is overdue. Ending never throws: after a
 * commit nothing may fail the write, and a catalog that cannot be reached never masks the error
 * being reported (the run then stays `running`, `abandoned` once its heartbeat is overdue).
 */
final class CatalogRun private (catalog: CatalogWriter, val runId: String) {

  private val ended = new AtomicBoolean(false)
  private val beats: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, s"omnitable-heartbeat-$runId")
    t.setDaemon(true)
    t
  }
  beats.scheduleWithFixedDelay(
    () =>
      try catalog.heartbeatRun(runId)
      catch { case NonFatal(_) => }, // the next beat retries
    CatalogRun.HeartbeatSeconds,
    CatalogRun.HeartbeatSeconds,
    TimeUnit.SECONDS
  )

  /** Records the success with `metrics` (stored as the run's JSON metrics). */
  def succeeded(metrics: Map[String, Any]): Unit = end("succeeded", metrics, None)

  /** Records the failure (`status` `failed`, or `aborted` as Python's for a refused error ratio). */
  def failed(message: String, metrics: Map[String, Any] = Map.empty, status: String = "failed"): Unit =
    end(status, metrics, Some(message))

  private def end(status: String, metrics: Map[String, Any], message: Option[String]): Unit =
    if (ended.compareAndSet(false, true)) {
      beats.shutdownNow()
      try catalog.finishRun(runId, status, metrics, message)
      catch { case NonFatal(_) => }
    }
}

object CatalogRun {

  val HeartbeatSeconds = 30L

  /** Starts a run of `kind` (`ingest`, `backfill`, …) of table `tableId` with `plan`. */
  def start(catalog: CatalogWriter, tableId: String, kind: String, plan: Map[String, Any]): CatalogRun =
    new CatalogRun(catalog, catalog.startRun(tableId, kind, plan))
}

/** The run of one JVM append (an `ingest` run; metrics `rows`, `version`). */
private[write] object AppendRun {

  def start(catalog: CatalogWriter, tableId: String, batch: String, appId: Option[String], partitions: Int)
      : CatalogRun = CatalogRun.start(catalog, tableId, "ingest", plan(batch, appId, partitions))

  /** The run's `plan`: the batch, the engine, the partition count and the Spark application. */
  def plan(batch: String, appId: Option[String], partitions: Int): Map[String, Any] =
    Map[String, Any]("batch" -> batch, "engine" -> "spark-jvm", "partitions" -> partitions) ++
      appId.map("spark_app_id" -> _)

  def metrics(rows: Long, version: Long): Map[String, Any] = Map("rows" -> rows, "version" -> version)
}
