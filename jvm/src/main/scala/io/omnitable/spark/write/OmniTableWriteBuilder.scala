package io.omnitable.spark.write

import java.util.Locale

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{CatalogWriter, DdlWriter, NewTable, SystemColumns, TableSnapshot}
import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.read.exec.SerializableHadoopConf
import org.apache.hadoop.mapreduce.Job
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.write.{BatchWrite, LogicalWriteInfo, SupportsTruncate, Write, WriteBuilder}
import org.apache.spark.sql.execution.datasources.parquet.{ParquetOptions, ParquetUtils}

/**
 * An append to the head of a branch (`df.writeTo(...).append()`, `INSERT INTO`,
 * `df.write.format("omnitable").mode("append")`): checks everything it can before a job runs —
 * the batch name, a keyed table, the snapshot named, the data's columns and types
 * ([[WriteSchema]]) — and prepares the Parquet settings the tasks use.
 *
 * @param readOptions the options the table was loaded with (a version or tag cannot be written)
 * @param create a CTAS's table, not created yet: the commit creates it with this batch
 */
final class OmniTableWriteBuilder(
    snap: TableSnapshot,
    catalog: CatalogWriter,
    readOptions: Map[String, String],
    info: LogicalWriteInfo,
    create: Option[StagedCreate] = None,
    defineColumns: OmniTableWriteBuilder.DefineColumns = OmniTableWriteBuilder.NoNewColumns)
    extends WriteBuilder
    with SupportsTruncate {

  private var replace = false

  /**
   * `INSERT OVERWRITE` / `mode("overwrite")`: replace the batch of the write's name (Python's
   * `mode="replace"`), never the rest of the table (docs/spark.md, "Writing from Spark").
   */
  override def truncate(): WriteBuilder = {
    replace = true
    this
  }

  override def build(): Write = {
    import OmniTableWriteBuilder.MergeSchemaConf
    val table = snap.table.name
    OmniTableWriteBuilder.checkWritable(snap, readOptions)
    snap.table.properties.get("table.key").foreach(k => throw WriteErrors.keyedTable(table, k))
    val spark = SparkSession.active
    val conf = spark.sessionState.conf
    val settings = WriteSettings.resolve(
      table,
      info.options().asCaseSensitiveMap().asScala.toMap,
      k => Option(conf.getConfString(k, null)),
      snap.table.properties)
    val options = info.options().asCaseSensitiveMap().asScala.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }
    val merge = OmniTableWriteBuilder.mergeSchema(options, Option(conf.getConfString(MergeSchemaConf, null)))
    if (merge && create.isDefined) throw WriteErrors.notWritableSnapshot(table, "mergeSchema with CREATE TABLE AS")
    val (groups, added) =
      WriteSchema.targets(
        snap,
        info.schema(),
        if (merge) Some(defineColumns(snap, info.schema(), _, options.get("group"))) else None)
    val supplied = WriteSchema.suppliedIds(snap, info.schema()).getOrElse(-1)
    val baseSchema = org.apache.spark.sql.types.StructType(groups.head._2.map(c =>
      org.apache.spark.sql.types.StructField(c.physicalName, c.dataType)))
    val jc = OmniTableWriteBuilder.parquetConf(spark, baseSchema, settings)
    // Every `_ai_unique_id_` of a file is distinct: a dictionary for it is built for nothing, then
    // re-encoded as plain at each row group's first page (docs/benchmarks.md, sql_writes).
    jc.setBoolean(s"parquet.enable.dictionary#${snap.rowIdColumn.physicalName}", false)
    val branch = snap.snapshot.segments.head.branch
    if (replace && branch != SystemColumns.MainBranch) {
      throw WriteErrors.notWritableSnapshot(table, s"branch '$branch' (an overwrite replaces batches on main only)")
    }
    val task = WriteTask(
      snap.tableUri,
      settings.appendName,
      "",
      info.schema(),
      groups,
      0L,
      settings,
      new SerializableHadoopConf(jc),
      supplied)
    new Write {
      override def description(): String = s"OmniTable append of batch '${settings.appendName}' to $table"
      override def toBatch: BatchWrite = new OmniTableBatchWrite(snap, branch, catalog, task, replace, create, added)
    }
  }
}

/**
 * The table a CTAS creates ([[io.omnitable.spark.catalog.DdlWriter.createWithAppend]]), and what
 * makes its outcome Spark's error (TABLE_OR_VIEW_ALREADY_EXISTS when the name was taken meanwhile).
 */
final case class StagedCreate(table: NewTable, check: DdlWriter.CreateOutcome => Unit)

private[spark] object OmniTableWriteBuilder {
  val RowId: String = SystemColumns.RowId

  /**
   * The new columns of a mergeSchema append (the table, the input, the unknown names, the `group`
   * option), checked as ALTER TABLE ADD COLUMNS checks them (io.omnitable.spark.source.TableDdl).
   */
  type DefineColumns = (TableSnapshot, org.apache.spark.sql.types.StructType, Seq[String], Option[String]) => Seq[
    io.omnitable.spark.catalog.NewColumn]

  val NoNewColumns: DefineColumns = (snap, _, names, _) => throw WriteErrors.unknownColumns(snap.table.name, names)

  /** Session setting turning mergeSchema on for every append (INSERT INTO has no write options). */
  val MergeSchemaConf = "spark.omnitable.write.mergeSchema"

  /** `.option("mergeSchema", ...)` (Delta's name), else [[MergeSchemaConf]]; anything but true/false is refused. */
  def mergeSchema(options: scala.collection.Map[String, String], session: Option[String]): Boolean =
    options.get("mergeschema").orElse(session).map(_.trim.toLowerCase(Locale.ROOT)) match {
      case None | Some("false") => false
      case Some("true") => true
      case Some(other) =>
        throw io.omnitable.spark.errors.OmniTableErrors.invalidOption("mergeSchema", other, "use true or false")
    }

  /** The Hadoop configuration tasks write Parquet column files with (compression, row groups, types). */
  def parquetConf(spark: SparkSession, schema: org.apache.spark.sql.types.StructType, settings: WriteSettings)
      : org.apache.hadoop.conf.Configuration = {
    val conf = spark.sessionState.conf
    val job = Job.getInstance(spark.sessionState.newHadoopConf())
    ParquetUtils.prepareWrite(conf, job, schema, new ParquetOptions(Map("compression" -> settings.compression), conf))
    val jc = job.getConfiguration
    jc.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    jc.set("spark.sql.parquet.writeLegacyFormat", "false")
    jc.set("spark.sql.parquet.fieldId.write.enabled", "false")
    jc.setLong("parquet.block.row.count.limit", settings.rowGroupSize)
    jc
  }

  /** Writes go to the head of a branch: refuse a table read at a version, tag, batches or fragments. */
  def checkWritable(snap: TableSnapshot, readOptions: Map[String, String]): Unit = {
    val table = snap.table.name
    val lowered = readOptions.keySet.map(_.toLowerCase(java.util.Locale.ROOT))
    Seq("versionasof", "timestampasof", "tag", "batches", "fragments").find(lowered.contains).foreach { k =>
      throw WriteErrors.notWritableSnapshot(table, s"option '$k'")
    }
    if (snap.snapshot.label.startsWith("tag ") || snap.snapshot.label.startsWith("version ")) {
      throw WriteErrors.notWritableSnapshot(table, snap.snapshot.label)
    }
  }
}
