package org.apache.spark.omnitable

import java.util.concurrent.TimeoutException

import org.apache.spark.SparkContext

/**
 * The few `private[spark]` Spark APIs OmniTable needs, in one place (this package is inside
 * `org.apache.spark` for that reason only). Pinned to the Spark line the jar is built for.
 */
object SparkInternals {
  io.omnitable.spark.conf.SparkVersionCheck.verified

  /**
   * Waits until every event posted to `sc`'s listener bus so far has been delivered (listeners
   * run asynchronously: a finished job's task-end events may still be queued when the action
   * returns). False if that took longer than `timeoutMillis`.
   */
  def drainListenerBus(sc: SparkContext, timeoutMillis: Long): Boolean =
    try {
      sc.listenerBus.waitUntilEmpty(timeoutMillis)
      true
    } catch {
      case _: TimeoutException => false
    }

  /** Whether a task's accumulator update is a SQL metric (a plan node's metric). */
  def isSqlMetric(info: org.apache.spark.scheduler.AccumulableInfo): Boolean =
    info.metadata.contains(org.apache.spark.util.AccumulatorContext.SQL_ACCUM_IDENTIFIER)
}
