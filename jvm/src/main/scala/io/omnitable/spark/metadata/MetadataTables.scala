package io.omnitable.spark.metadata

import org.apache.spark.sql.types.{
  ArrayType,
  BooleanType,
  DataType,
  IntegerType,
  LongType,
  MapType,
  StringType,
  StructField,
  StructType,
  TimestampType
}

/**
 * The metadata tables of a table (docs/spark.md, "Metadata tables"): `omnitable.web.<name>` for
 * each name here, read at the head of `main` or at the snapshot `VERSION AS OF` /
 * `TIMESTAMP AS OF` names. Each holds the facts of one Python API (named in its doc) and has a
 * fixed schema; times are UTC instants (TIMESTAMP), JSON documents text.
 */
object MetadataTables {

  private def field(name: String, dataType: DataType, nullable: Boolean = true): StructField =
    StructField(name, dataType, nullable)

  private def required(name: String, dataType: DataType): StructField = field(name, dataType, nullable = false)

  /** Commits of the snapshot's history, newest first; `expired`: given up by an expire commit (`Table.history()`). */
  val History: StructType = StructType(Seq(
    required("version", LongType),
    field("parent_version", LongType),
    required("branch", StringType),
    required("op", StringType),
    field("run_id", StringType),
    required("summary", StringType),
    required("committed_at", TimestampType),
    required("expired", BooleanType)
  ))

  /** Visible batches, oldest first, with live rows (`Table.batches()`). */
  val Batches: StructType = StructType(Seq(
    required("name", StringType),
    required("rows", LongType),
    required("fragments", LongType),
    required("created_at", TimestampType)))

  /** Visible fragments in table order (`Table.snapshot().fragments`). */
  val Fragments: StructType = StructType(Seq(
    required("fragment_id", StringType),
    required("batch", StringType),
    required("batch_id", StringType),
    required("seq", LongType),
    required("row_count", LongType),
    required("deleted_rows", LongType),
    required("live_rows", LongType),
    required("path", StringType),
    required("added_version", LongType)
  ))

  /** Visible column files of the visible fragments (`Table.snapshot().files_by_fragment`). */
  val Files: StructType = StructType(Seq(
    required("file_id", StringType),
    required("fragment_id", StringType),
    required("batch", StringType),
    required("group_name", StringType),
    required("path", StringType),
    required("row_count", LongType),
    required("size_bytes", LongType),
    required("added_version", LongType),
    field("run_id", StringType),
    required("column_ids", ArrayType(IntegerType, containsNull = false)),
    required("columns", ArrayType(StringType, containsNull = false)),
    required("feature_versions", MapType(StringType, StringType, valueContainsNull = false))
  ))

  /** The current version of every registered feature (`Table.features()`). */
  val Features: StructType = StructType(Seq(
    required("name", StringType),
    required("version", StringType),
    required("kind", StringType),
    required("inputs", ArrayType(StringType, containsNull = false)),
    required("outputs", MapType(StringType, StringType, valueContainsNull = false)),
    required("fingerprint", StringType),
    required("registered_at", TimestampType),
    required("registered_version", LongType),
    required("branch", StringType),
    required("definition", StringType)
  ))

  /** Where the current data of every derived column came from, per fragment (`Table.lineage()`). */
  val Lineage: StructType = StructType(Seq(
    required("column", StringType),
    required("batch", StringType),
    required("fragment_id", StringType),
    required("file", StringType),
    required("version", LongType),
    required("feature", StringType),
    required("feature_version", StringType),
    required("inputs", StringType),
    required("run_id", StringType),
    required("engine", StringType),
    required("error_count", LongType)
  ))

  /** The batch x derived-column grid, one row per cell (`Table.status()`). */
  val Status: StructType = StructType(Seq(
    required("batch", StringType),
    required("column", StringType),
    required("feature", StringType),
    required("state", StringType),
    required("errors", LongType)))

  /** Visible rows of the record-level error table (`Table.errors()`, docs/errors.md). */
  val Errors: StructType = StructType(Seq(
    field("_ai_unique_id_", LongType),
    field("batch", StringType),
    field("fragment_id", StringType),
    field("row_offset", LongType),
    field("file_id", StringType),
    field("feature", StringType),
    field("feature_version", StringType),
    field("kind", StringType),
    field("exception_type", StringType),
    field("message", StringType),
    field("traceback", StringType),
    field("input_digest", StringType),
    field("run_id", StringType),
    field("recorded_at", TimestampType)
  ))

  /** The table's runs, newest first, `abandoned` as the Python API reports it (`Table.runs()`). */
  val Runs: StructType = StructType(Seq(
    required("run_id", StringType),
    required("kind", StringType),
    required("status", StringType),
    field("plan", StringType),
    field("metrics", StringType),
    field("message", StringType),
    required("started_at", TimestampType),
    field("finished_at", TimestampType),
    field("host", StringType),
    field("pid", LongType),
    field("heartbeat_at", TimestampType)
  ))

  /** Branches then tags, by name (`Table.branches()`, `Table.tags()`). */
  val Refs: StructType = StructType(Seq(
    required("name", StringType),
    required("kind", StringType),
    required("version", LongType),
    field("parent_branch", StringType),
    field("fork_version", LongType),
    required("created_at", TimestampType),
    field("max_age_s", LongType),
    field("expires_at", TimestampType)
  ))

  /** Every metadata table's name and schema, in documentation order. */
  val Schemas: Seq[(String, StructType)] = Seq(
    "history" -> History,
    "batches" -> Batches,
    "fragments" -> Fragments,
    "files" -> Files,
    "features" -> Features,
    "lineage" -> Lineage,
    "status" -> Status,
    "errors" -> Errors,
    "runs" -> Runs,
    "refs" -> Refs
  )

  /** The metadata table names (`omnitable.web.<name>`). */
  val Names: Seq[String] = Schemas.map(_._1)

  def schema(name: String): StructType = Schemas.find(_._1 == name).map(_._2)
    .getOrElse(throw new IllegalArgumentException(s"not a metadata table: $name"))

  def isName(name: String): Boolean = Names.contains(name)
}
