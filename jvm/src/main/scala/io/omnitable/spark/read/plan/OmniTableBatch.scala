package io.omnitable.spark.read.plan

import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.metrics.{ScanReport, ScanReportAccumulator}
import io.omnitable.spark.read.exec.{
  CorruptInputPolicy,
  LateMaterialization,
  OmniTablePartitionReaderFactory,
  ReaderContext,
  ReaderSettings,
  SerializableHadoopConf
}
import org.apache.hadoop.conf.Configuration
import org.apache.parquet.hadoop.ParquetInputFormat
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{Batch, InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.types.StructType

/** The input partitions of a planned scan and the reader factory executors receive. */
final class OmniTableBatch(
    table: String,
    plan: ScanPlan,
    schema: StructType,
    pushdown: OmniTableScan.Pushdown,
    conf: OmniTableConf,
    late: Option[LateMaterialization]) extends Batch {

  /** Equal batches read the same rows the same way: Spark then reuses an exchange between them. */
  override def equals(other: Any): Boolean = other match {
    case b: OmniTableBatch => identity == b.identity
    case _ => false
  }

  override def hashCode(): Int = identity.hashCode()

  private lazy val identity: Seq[Any] = OmniTableBatch.identity(table, plan, schema, pushdown, conf, late)

  override def planInputPartitions(): Array[InputPartition] = plan.inputPartitions.toArray

  override def createReaderFactory(): PartitionReaderFactory = {
    val spark = SparkSession.active
    val hadoopConf = OmniTableBatch.hadoopConf(spark)
    hadoopConf.setBoolean(ParquetInputFormat.HADOOP_VECTORED_IO_ENABLED, conf.vectoredIo)
    val broadcast = spark.sparkContext.broadcast(new SerializableHadoopConf(hadoopConf))
    val report = new ScanReportAccumulator
    spark.sparkContext.register(report, ScanReport.AccumulatorName)
    val settings = ReaderSettings(
      conf.batchSize,
      pushdown.rowFilter,
      conf.rowGroupFiltering,
      pushdown.limit.map(_.toLong),
      CorruptInputPolicy(conf.skipCorruptFragments, conf.corruptRetries)
    )
    new OmniTablePartitionReaderFactory(
      ReaderContext(table, schema, settings, report, broadcast, late, slices = plan.executor.map(_.resolver)))
  }
}

private[spark] object OmniTableBatch {

  /**
   * What a batch reads and how: the partitions (their fragments' files, row ranges, column sources,
   * deletion vectors) or the slices executors list and the snapshot they are of, the read
   * schema, what was pushed, late materialization and the reader settings. Arrays compare by
   * content.
   */
  def identity(
      table: String,
      plan: ScanPlan,
      schema: StructType,
      pushdown: OmniTableScan.Pushdown,
      conf: OmniTableConf,
      late: Option[LateMaterialization]): Seq[Any] = Seq(
    table,
    schema,
    plan.partitions.map(_.fragments.toSeq.map(p =>
      (
        p.fragmentId,
        p.batchName,
        p.fragmentRows,
        p.rowStart,
        p.rowEnd,
        p.files.toSeq,
        p.sources.toSeq,
        p.deletes.map(_.vectorId)))),
    plan.executor.map(e => (e.snapshot, e.slices)),
    pushdown,
    late.map(l => (l.condition, l.predicateColumns.toSeq)),
    (conf.batchSize, conf.rowGroupFiltering, conf.skipCorruptFragments, conf.corruptRetries, conf.vectoredIo)
  )

  /** Settings Spark's Parquet reader reads from the Hadoop conf, with the session's values. */
  private val ParquetSettings = Seq(
    "spark.sql.parquet.binaryAsString" -> "false",
    "spark.sql.parquet.int96AsTimestamp" -> "true",
    "spark.sql.parquet.inferTimestampNTZ.enabled" -> "true",
    "spark.sql.legacy.parquet.nanosAsLong" -> "false",
    "spark.sql.caseSensitive" -> "false",
    "spark.sql.session.timeZone" -> java.util.TimeZone.getDefault.getID
  )

  /** The session's Hadoop conf (as Spark's file sources build it) plus the Parquet reader settings. */
  def hadoopConf(spark: SparkSession): Configuration = {
    val conf = new Configuration(spark.sparkContext.hadoopConfiguration)
    spark.conf.getAll.foreach { case (k, v) => if (v != null) conf.set(k, v) }
    readerSettings(spark, conf)
  }

  /** `conf` with the settings Spark's Parquet reader reads from it set to the session's values. */
  def readerSettings(spark: SparkSession, conf: Configuration): Configuration = {
    ParquetSettings.foreach { case (k, default) => conf.set(k, spark.conf.get(k, default)) }
    conf
  }
}
