package io.omnitable.spark.read.exec

import org.apache.spark.sql.connector.metric.{CustomMetric, CustomSumMetric, CustomTaskMetric}

/** Scan metrics shown in the SQL UI and on `BatchScanExec.metrics` (summed over tasks). */
object ReadMetrics {
  val BytesRead = "omnitableBytesRead"
  val FilesOpened = "omnitableFilesOpened"
  val RowGroupsRead = "omnitableRowGroupsRead"
  val RowGroupsSkipped = "omnitableRowGroupsSkipped"
  val FragmentsRead = "omnitableFragmentsRead"
  val CorruptFragments = "omnitableCorruptFragments"

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

class BytesReadMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.BytesRead
  override def description(): String = "column chunk bytes read (compressed)"
}

class FilesOpenedMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.FilesOpened
  override def description(): String = "column files opened"
}

class RowGroupsReadMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.RowGroupsRead
  override def description(): String = "row groups read"
}

class RowGroupsSkippedMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.RowGroupsSkipped
  override def description(): String = "row groups skipped by statistics"
}

class FragmentsReadMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.FragmentsRead
  override def description(): String = "fragments read"
}

class CorruptFragmentsMetric extends CustomSumMetric {
  override def name(): String = ReadMetrics.CorruptFragments
  override def description(): String = "corrupt fragments skipped"
}
