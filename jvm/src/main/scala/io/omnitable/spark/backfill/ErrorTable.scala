package io.omnitable.spark.backfill

import java.sql.Timestamp
import java.time.{LocalDateTime, ZoneOffset}

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{CatalogWriter, DataPaths, FeatureDef, PyRepr, TableSnapshot}
import io.omnitable.spark.write.{CastFailure, FeatureOutput}
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.StructType

/**
 * The table's record-level error table (python/omnitable/exec/errors.py, docs/errors.md): a Delta
 * table at `<table>/errors` whose rows of a backfill name the output file their NULLs live in, so
 * they are visible exactly when that file is. The JVM appends the rows Python's backfill appends
 * for an SQL feature's values that do not convert to its type (kind `type`, `CAST_INVALID`, the
 * message of task.py `_sql_outputs`), before the commit, as runner.py `_record_errors` does.
 */
object ErrorTable {

  /** errors.py `ERROR_SCHEMA`. */
  val Schema: StructType = StructType.fromDDL(
    "_ai_unique_id_ BIGINT, batch STRING, fragment_id STRING, row_offset BIGINT, file_id STRING, " +
      "feature STRING, feature_version STRING, kind STRING, exception_type STRING, message STRING, " +
      "traceback STRING, input_digest STRING, run_id STRING, recorded_at TIMESTAMP")

  /** errors.py `error_location`. */
  def location(snap: TableSnapshot): String = DataPaths.join(snap.tableUri, "errors")

  /** task.py `_sql_outputs`: the message of a value that does not convert (Python's `repr` of it, 1024 characters at most). */
  def message(f: FeatureDef, value: String): String = {
    val (_, ddl) = f.outputs.head
    val text =
      s"Feature ${f.id}: value ${PyRepr.str(value)} of (${f.expr.getOrElse("")}) cannot be converted to $ddl"
    val cps = text.codePoints().toArray
    if (cps.length <= 1024) text else new String(cps, 0, 1024)
  }

  /** Which of `fileIds` have rows in the error table (step_job.py `retry_offsets`: the records a retry recomputes). */
  def filesWithRows(spark: SparkSession, snap: TableSnapshot, fileIds: Seq[String]): Set[String] = {
    val loc = location(snap)
    val log = new Path(loc, "_delta_log")
    if (fileIds.isEmpty || !log.getFileSystem(spark.sparkContext.hadoopConfiguration).exists(log)) Set.empty
    else {
      spark.read.format("delta").load(loc).where(col("file_id").isin(fileIds.distinct: _*))
        .select("file_id").distinct().collect().map(_.getString(0)).toSet
    }
  }

  /** runner.py `_record_errors`: the step's error rows appended (the error table registered first); nothing when none failed. */
  def record(
      spark: SparkSession,
      writer: CatalogWriter,
      snap: TableSnapshot,
      features: Seq[FeatureDef],
      batchOf: String => String,
      outputs: Seq[FeatureOutput],
      runId: String): Unit = {
    val failed = outputs.filter(_.typeErrors.nonEmpty)
    if (failed.isEmpty) return
    val now = Timestamp.valueOf(LocalDateTime.now(ZoneOffset.UTC))
    val rows = for {
      o <- failed
      f = features.find(_.name == o.feature).get
      e <- o.typeErrors
    } yield row(f, o, e, batchOf(o.file.fragmentId), runId, now)
    val loc = location(snap)
    writer.registerErrorTable(snap.table.tableId, loc)
    spark.createDataFrame(rows.asJava, Schema).write.format("delta").mode("append").save(loc)
  }

  private def row(f: FeatureDef, o: FeatureOutput, e: CastFailure, batch: String, runId: String, now: Timestamp): Row =
    Row(
      e.rowId,
      batch,
      o.file.fragmentId,
      e.rowOffset,
      o.file.fileId,
      f.name,
      f.version,
      "type",
      "CAST_INVALID",
      message(f, e.value),
      "",
      e.inputDigest,
      runId,
      now)
}
