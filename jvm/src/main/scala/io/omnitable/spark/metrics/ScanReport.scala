package io.omnitable.spark.metrics

import org.apache.spark.util.AccumulatorV2

/** A fragment a read skipped because a column file stayed unreadable (on_corrupt=skip_fragment). */
final case class CorruptFragment(table: String, fragment: String, file: String, rowGroup: Option[Int], error: String)

/**
 * What the readers of one scan did in one task (an accumulator update) or in all tasks (its
 * driver-side value). Immutable: readers add deltas.
 */
final case class ScanReport(
    fragmentsRead: Long = 0,
    filesOpened: Long = 0,
    chunkBytesRead: Long = 0,
    rowGroupsRead: Long = 0,
    rowGroupsSkipped: Long = 0,
    corrupt: Vector[CorruptFragment] = Vector.empty) {

  def isEmpty: Boolean = this == ScanReport.Empty

  def +(o: ScanReport): ScanReport = ScanReport(
    fragmentsRead + o.fragmentsRead,
    filesOpened + o.filesOpened,
    chunkBytesRead + o.chunkBytesRead,
    rowGroupsRead + o.rowGroupsRead,
    rowGroupsSkipped + o.rowGroupsSkipped,
    corrupt ++ o.corrupt
  )
}

object ScanReport {
  val Empty: ScanReport = ScanReport()

  /**
   * Name under which every omnitable scan registers its accumulator; [[ScanMetricsListener]]
   * finds scan reports in a task's accumulables by it (one accumulator id = one scan).
   */
  val AccumulatorName = "omnitable.scan"
}

/**
 * Carries [[ScanReport]]s from executors to the driver. Registered once per planned scan (on
 * the driver, when the scan's reader factory is created) under [[ScanReport.AccumulatorName]];
 * Spark ships each task's update with the task-end event, which is how a listener sees it.
 */
final class ScanReportAccumulator extends AccumulatorV2[ScanReport, ScanReport] {

  private var current: ScanReport = ScanReport.Empty

  override def isZero: Boolean = current.isEmpty

  override def copy(): ScanReportAccumulator = {
    val c = new ScanReportAccumulator
    c.current = current
    c
  }

  override def reset(): Unit = current = ScanReport.Empty

  override def add(v: ScanReport): Unit = current = current + v

  override def merge(other: AccumulatorV2[ScanReport, ScanReport]): Unit = add(other.value)

  override def value: ScanReport = current
}
