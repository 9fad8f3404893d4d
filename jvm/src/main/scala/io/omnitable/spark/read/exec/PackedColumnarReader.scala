package io.omnitable.spark.read.exec

import scala.collection.mutable

import org.apache.spark.sql.connector.metric.CustomTaskMetric
import org.apache.spark.sql.connector.read.PartitionReader
import org.apache.spark.sql.vectorized.ColumnarBatch

/**
 * Reads the fragments of one packed partition one after another, each with its own
 * [[FragmentColumnarReader]] (opened when the previous one is done and closed before the next
 * opens), so rows come in table order and everything per fragment (row offsets, constant
 * vectors, alignment checks, late materialization, skipping a corrupt fragment) works as for a
 * lone fragment. A pushed limit counts the rows of the whole partition. Metrics are the sums over
 * its fragments.
 */
private[exec] final class PackedColumnarReader(part: PackedInputPartition, ctx: ReaderContext)
    extends PartitionReader[ColumnarBatch] {

  private var index = 0 // next fragment to open
  private var current: FragmentColumnarReader = _
  private var emitted = 0L
  private val done = mutable.LinkedHashMap.empty[String, Long] // metric sums of the fragments read

  override def next(): Boolean = {
    var found = false
    while (!found && !ctx.settings.limit.exists(emitted >= _))
      if (current != null && current.next()) found = true
      else if (index < part.fragments.length) {
        closeCurrent()
        val settings = ctx.settings.copy(limit = ctx.settings.limit.map(_ - emitted))
        current = new FragmentColumnarReader(part.fragments(index), ctx.copy(settings = settings))
        index += 1
      } else return false
    if (found) emitted += current.get().numRows()
    found
  }

  override def get(): ColumnarBatch = current.get()

  override def close(): Unit = closeCurrent()

  override def currentMetricsValues(): Array[CustomTaskMetric] = {
    val sums = done.clone()
    if (current != null) add(sums, current.currentMetricsValues())
    sums.map { case (name, v) => ReadMetrics.task(name, v) }.toArray
  }

  private def add(sums: mutable.Map[String, Long], values: Array[CustomTaskMetric]): Unit =
    values.foreach(m => sums(m.name()) = sums.getOrElse(m.name(), 0L) + m.value())

  private def closeCurrent(): Unit =
    if (current != null) {
      current.close()
      add(done, current.currentMetricsValues())
      current = null
    }
}
