package io.omnitable.spark.write

import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicBoolean

import scala.util.control.NonFatal

import io.omnitable.spark.catalog.CatalogWriter

/**
 * The run one JVM append records in the catalog's `runs` (Python's `RunScope` of an ingest):
 * started `running` before the tasks write, with the batch, the engine (`spark-jvm`), the Spark
 * application id and the partition count as its plan and this driver's host and pid; its
 * heartbeat refreshed every 30 seconds (Python's `HEARTBEAT_S`) until it ends `succeeded` (metrics
 * `rows`, `version`) or `failed` (the error's message). A driver that dies leaves it `running`,
 * which `Table.runs()` reports `abandoned` once the heartbeat is overdue. Ends once.
 */
private[write] final class AppendRun private (catalog: CatalogWriter, val runId: String) {

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
    AppendRun.HeartbeatSeconds,
    AppendRun.HeartbeatSeconds,
    TimeUnit.SECONDS
  )

  /**
   * Records the success. After the commit nothing may fail the write (Spark would abort it and
   * delete the committed files): a catalog that cannot be reached leaves the run `running`, and
   * `abandoned` once its heartbeat is overdue.
   */
  def succeeded(rows: Long, version: Long): Unit =
    try end("succeeded", Map("rows" -> rows, "version" -> version), None)
    catch { case NonFatal(_) => }

  /** Records the failure; a catalog that cannot be reached is ignored (never masks the error). */
  def failed(message: String): Unit =
    try end("failed", Map.empty, Some(message))
    catch { case NonFatal(_) => }

  private def end(status: String, metrics: Map[String, Any], message: Option[String]): Unit =
    if (ended.compareAndSet(false, true)) {
      beats.shutdownNow()
      catalog.finishRun(runId, status, metrics, message)
    }
}

private[write] object AppendRun {

  val HeartbeatSeconds = 30L

  def start(catalog: CatalogWriter, tableId: String, batch: String, appId: Option[String], partitions: Int)
      : AppendRun = new AppendRun(catalog, catalog.startRun(tableId, "ingest", plan(batch, appId, partitions)))

  /** The run's `plan`: the batch, the engine, the partition count and the Spark application. */
  def plan(batch: String, appId: Option[String], partitions: Int): Map[String, Any] =
    Map[String, Any]("batch" -> batch, "engine" -> "spark-jvm", "partitions" -> partitions) ++
      appId.map("spark_app_id" -> _)
}
