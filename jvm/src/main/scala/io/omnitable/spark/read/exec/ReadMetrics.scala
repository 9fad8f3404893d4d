package io.omnitable.spark.read.exec

import org.apache.spark.sql.connector.metric.{CustomMetric, CustomSumMetric, CustomTaskMetric}

/** Scan metrics shown in the SQL UI and on `BatchScanExec.metrics` (summed over tasks). */
object ReadMetrics {
  private val Prefix = "omnitable"

  val BytesRead: String = Prefix + "BytesRead"
  val FilesOpened: String = Prefix + "FilesOpened"
  val RowGroupsRead: String = Prefix + "RowGroupsRead"
  val RowGroupsSkipped: String = Prefix + "RowGroupsSkipped"
  val FragmentsRead: String = Prefix + "FragmentsRead"
  val CorruptFragments: String = Prefix + "CorruptFragments"

  def all: Array[CustomMetric] = Array(
    new BytesReadMetric,
    new FilesOpenedMetric,
    new RowGroupsReadMetric,
    new RowGroupsSkippedMetric,
    new FragmentsReadMetric,
    new CorruptFragmentsMetric)

  def task(metric: String, v: Long): CustomTaskMetric = new CustomTaskMetric {
    override def name(): String = metric
    override def value(): Long = v
  }
}

/**
 * One scan metric summed over tasks: `metricName` (what tasks report) and its SQL UI description.
 * Spark creates metrics by class name, so each is a class without constructor arguments.
 */
sealed abstract class ReadMetric(metricName: String, text: String) extends CustomSumMetric {
  override def name(): String = metricName
  override def description(): String = text
}

class BytesReadMetric extends ReadMetric(ReadMetrics.BytesRead, "column chunk bytes read (compressed)")
class FilesOpenedMetric extends ReadMetric(ReadMetrics.FilesOpened, "column files opened")
class RowGroupsReadMetric extends ReadMetric(ReadMetrics.RowGroupsRead, "row groups read")
class RowGroupsSkippedMetric extends ReadMetric(ReadMetrics.RowGroupsSkipped, "row groups skipped by statistics")
class FragmentsReadMetric extends ReadMetric(ReadMetrics.FragmentsRead, "fragments read")
class CorruptFragmentsMetric extends ReadMetric(ReadMetrics.CorruptFragments, "corrupt fragments skipped")
