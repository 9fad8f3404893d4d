package io.omnitable.spark.read

import io.omnitable.spark.OmniTableConf
import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.read.{Batch, InputPartition, PartitionReaderFactory}
import org.apache.spark.sql.types.StructType

/** The input partitions of a planned scan and the reader factory executors receive. */
final class OmniTableBatch(plan: ScanPlan, schema: StructType, pushdown: OmniTableScan.Pushdown, conf: OmniTableConf)
    extends Batch {

  override def planInputPartitions(): Array[InputPartition] = plan.partitions.toArray

  override def createReaderFactory(): PartitionReaderFactory = {
    val spark = SparkSession.active
    val hadoopConf = OmniTableBatch.hadoopConf(spark)
    val broadcast = spark.sparkContext.broadcast(new SerializableHadoopConf(hadoopConf))
    new OmniTablePartitionReaderFactory(ReaderContext(
      schema,
      conf.batchSize,
      pushdown.rowFilter,
      conf.rowGroupFiltering,
      pushdown.limit.map(_.toLong),
      broadcast))
  }
}

private[read] object OmniTableBatch {

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
    ParquetSettings.foreach { case (k, default) => conf.set(k, spark.conf.get(k, default)) }
    conf
  }
}
