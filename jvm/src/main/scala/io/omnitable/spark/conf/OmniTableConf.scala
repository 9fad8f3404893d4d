package io.omnitable.spark.conf

import java.util.Locale

import scala.collection.mutable

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.spark.sql.SparkSession

/**
 * One OmniTable setting, declared once: the session key (`spark.omnitable.…`), the read option
 * that overrides it for one read (snake_case, case-insensitive like every Spark option), its
 * type (through `parse`, which validates), default and doc.
 */
final case class OmniTableConfEntry[T](
    sessionKey: String,
    optionKey: Option[String],
    default: Option[T],
    doc: String,
    parse: String => Either[String, T]) {

  /**
   * The table property that sets it for one table (`create_table(properties=...)`): the session
   * key without `spark.omnitable.`, e.g. `read.batch_size`. Only `read.*` settings have one;
   * session-wide settings (the warehouse, optimizer rules) are not per table.
   */
  def tableKey: Option[String] = Some(sessionKey.stripPrefix(OmniTableConf.Prefix)).filter(_.startsWith("read."))
}

/** The properties of the table a read reads (`tables.properties` in the catalog), for [[OmniTableConf]]. */
final case class TableProperties(table: String, values: Map[String, String])

object TableProperties {

  /** No table (a catalog's or a session's settings). */
  val Empty: TableProperties = TableProperties("", Map.empty)
}

/**
 * Every `spark.omnitable.*` setting, and the one precedence chain used to read them:
 * read option → session conf → table property → default.
 */
object OmniTableConf {

  /** The prefix of every session key. */
  val Prefix = "spark.omnitable."

  private val registry = mutable.LinkedHashMap.empty[String, OmniTableConfEntry[_]]

  private def declare[T](entry: OmniTableConfEntry[T]): OmniTableConfEntry[T] = {
    require(!registry.contains(entry.sessionKey), s"duplicate setting ${entry.sessionKey}")
    registry(entry.sessionKey) = entry
    entry
  }

  private def positiveInt(max: Int)(s: String): Either[String, Int] =
    s.trim.toIntOption.filter(v => v > 0 && v <= max).toRight(s"expected an integer in 1..$max")

  private def positiveLong(s: String): Either[String, Long] =
    s.trim.toLongOption.filter(_ > 0).toRight("expected a positive integer")

  private def nonNegativeLong(s: String): Either[String, Long] =
    s.trim.toLongOption.filter(_ >= 0).toRight("expected a non-negative integer")

  private def nonNegativeInt(max: Int)(s: String): Either[String, Int] =
    s.trim.toIntOption.filter(v => v >= 0 && v <= max).toRight(s"expected an integer in 0..$max")

  private def oneOf(values: String*)(s: String): Either[String, String] = {
    val v = s.trim.toLowerCase(Locale.ROOT)
    if (values.contains(v)) Right(v) else Left(values.mkString("expected one of ", ", ", ""))
  }

  private def boolean(s: String): Either[String, Boolean] =
    s.trim.toLowerCase(Locale.ROOT).toBooleanOption.toRight("expected true or false")

  val WAREHOUSE: OmniTableConfEntry[String] = declare(OmniTableConfEntry(
    "spark.omnitable.warehouse",
    Some("warehouse"),
    None,
    "The warehouse to read: a directory (catalog.db inside), sqlite:///path.db, or " +
      "postgresql://user:env:VAR@host:port/db. See docs/catalog.md, 'Addressing a catalog'.",
    s => if (s.trim.isEmpty) Left("expected a non-empty warehouse address") else Right(s.trim)
  ))

  val BATCH_SIZE: OmniTableConfEntry[Int] = declare(OmniTableConfEntry(
    "spark.omnitable.read.batch_size",
    Some("batch_size"),
    Some(4096),
    "Rows per columnar batch the Parquet readers decode (an upper bound: a batch also ends " +
      "where any zipped file's row group ends).",
    positiveInt(1 << 20)
  ))

  val MAX_ROWS_PER_PARTITION: OmniTableConfEntry[Long] = declare(OmniTableConfEntry(
    "spark.omnitable.read.max_rows_per_partition",
    Some("max_rows_per_partition"),
    Some(1L << 20),
    "Fragments with more rows are split into input partitions of at most this many rows; small " +
      "fragments packed into one partition hold at most this many rows together.",
    positiveLong
  ))

  val SPLIT_FRAGMENTS: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.read.split_fragments",
    Some("split_fragments"),
    Some(true),
    "Split fragments larger than max_rows_per_partition into row ranges, and pack small fragments " +
      "into one partition (spark.sql.files.maxPartitionBytes). false: one partition per fragment, its " +
      "rows contiguous and in fragment order (what per-fragment jobs such as backfills need).",
    boolean
  ))

  val STATS_PRUNING: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.read.stats_pruning",
    Some("stats_pruning"),
    Some(true),
    "Skip fragments whose catalog min/max/null-count statistics prove a pushed predicate false.",
    boolean
  ))

  val ROW_GROUP_FILTERING: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.read.row_group_filtering",
    Some("row_group_filtering"),
    Some(true),
    "Skip row ranges of a fragment whose Parquet row-group statistics (in the file carrying the " +
      "predicate column) prove a pushed predicate false; the same rows are skipped in every file.",
    boolean
  ))

  /** Values of [[ON_CORRUPT]]. */
  object OnCorrupt {
    val Fail = "fail"
    val SkipFragment = "skip_fragment"
  }

  val ON_CORRUPT: OmniTableConfEntry[String] = declare(OmniTableConfEntry(
    "spark.omnitable.read.on_corrupt",
    Some("on_corrupt"),
    Some(OnCorrupt.Fail),
    "What a read does with a corrupt column file (unreadable footer or page, bad magic, checksum or " +
      "decompression failure, truncated file, row count that differs from the catalog) once " +
      "corrupt_retries retries failed: 'fail' the task, or 'skip_fragment': return no row of that " +
      "fragment, log a warning and report it " +
      "(metric omnitableCorruptFragments, ScanMetricsListener). Skipping is whole-fragment: with " +
      "skip_fragment each fragment is read in one partition, and corruption found after a fragment's " +
      "first rows were returned still fails the task. Errors that are not corruption (schema drift, a " +
      "missing file or file system, permission denied) always fail (docs/spark.md, 'Dirty input').",
    oneOf(OnCorrupt.Fail, OnCorrupt.SkipFragment)
  ))

  val CORRUPT_RETRIES: OmniTableConfEntry[Int] = declare(OmniTableConfEntry(
    "spark.omnitable.read.corrupt_retries",
    Some("corrupt_retries"),
    Some(2),
    "How many times a read re-opens a column file that is corrupt or failed with an I/O error before " +
      "on_corrupt applies (transient object-store and network errors usually pass on a retry).",
    nonNegativeInt(100)
  ))

  val VECTORED_IO: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.read.vectored_io",
    Some("vectored_io"),
    Some(false),
    "Let Parquet fetch column chunks with Hadoop vectored I/O (parallel background range reads; can " +
      "help on object stores). Off by default because bytes read by background threads escape " +
      "Spark's task input metrics (inputMetrics.bytesRead, ScanMetricsListener); the omnitableBytesRead " +
      "scan metric counts them either way.",
    boolean
  ))

  val EXECUTOR_PLANNING_MIN_FRAGMENTS: OmniTableConfEntry[Long] = declare(OmniTableConfEntry(
    "spark.omnitable.read.executor_planning_min_fragments",
    Some("executor_planning_min_fragments"),
    Some(100000L),
    "A read of every batch, without a limit, of a snapshot with at least this many fragments is planned " +
      "on the executors: the driver reads one catalog row per batch and each task lists its own batches' " +
      "fragments and files when it starts (docs/spark.md, 'Planning on the executors'). Executors then " +
      "need the catalog (a SQLite file on a shared path, or the PostgreSQL server and its env: password). " +
      "0: always; a number above the table's fragments: never.",
    nonNegativeLong
  ))

  // --- metadata tables (session settings only; docs/spark.md, "Metadata tables") -------------

  val METADATA_PAGE_SIZE: OmniTableConfEntry[Int] = declare(OmniTableConfEntry(
    "spark.omnitable.metadata.page_size",
    None,
    Some(10000),
    "Rows per catalog query when the metadata tables .fragments and .files (and .errors) page " +
      "through a table's fragments and files (keyset pages: the driver holds one page of catalog " +
      "rows at a time).",
    positiveInt(1 << 20)
  ))

  private def fraction(s: String): Either[String, Double] =
    s.trim.toDoubleOption.filter(v => v > 0 && v <= 1).toRight("expected a number in (0, 1]")

  // --- optimizer rules (session settings only; docs/optimizer.md) ------------------------------

  val FUSE_SCANS: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.fuse_scans",
    None,
    Some(true),
    "Rule FuseOmniTableScans: reads of the same table snapshot joined on _ai_unique_id_ become one scan.",
    boolean
  ))

  val FUSE_PYTHON_UDFS: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.fuse_python_udfs",
    None,
    Some(true),
    "Rule FusePythonUDFs: a deterministic Python UDF that Spark evaluates again above a filter (or " +
      "twice) is evaluated once, and stacked evaluations of one eval type with no filter between " +
      "them run in one pass; no UDF runs on rows Spark would not run it on.",
    boolean
  ))

  val LATE_MATERIALIZATION: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.late_materialization",
    None,
    Some(true),
    "Rule LateMaterializeFilteredColumns: scans under a selective filter read the filter's columns " +
      "first and the other columns only for rows (and pages) that pass.",
    boolean
  ))

  val LATE_MATERIALIZATION_MAX_SELECTIVITY: OmniTableConfEntry[Double] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.late_materialization_max_selectivity",
    None,
    Some(0.25),
    "Late materialization is used only when the filter is estimated (from catalog statistics) to " +
      "keep at most this fraction of the rows.",
    fraction
  ))

  val VIEWS: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.views.enabled",
    None,
    Some(true),
    "Rule UseFreshColumnViews: a read whose columns a hot column-group view covers, and for every " +
      "batch of whose snapshot the view is fresh, reads the view's Delta table instead.",
    boolean
  ))

  val VIEWS_RECORDED_FILES: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.views.recorded_files",
    None,
    Some(true),
    "Rule UseFreshColumnViews reads a fresh view's data files as its refresh recorded them (plain " +
      "Parquet, no Delta snapshot or file listing per query); false, or a view without recorded " +
      "files: the view's Delta table at the recorded version.",
    boolean
  ))

  val MERGE_BROADCAST_BYTES: OmniTableConfEntry[Long] = declare(OmniTableConfEntry(
    "spark.omnitable.optimizer.merge_broadcast_bytes",
    None,
    Some(64L << 20),
    "Rule BroadcastOmniTableMergeSource: a MERGE with only WHEN MATCHED / WHEN NOT MATCHED BY SOURCE " +
      "clauses broadcasts a deterministic source whose size estimate is at most this many bytes, so " +
      "the target is rewritten as scanned, without an exchange and sort; 0 turns it off.",
    nonNegativeLong
  ))

  // --- the access log (session setting; the table property read.access_log where unset) ------

  val ACCESS_LOG: OmniTableConfEntry[Boolean] = declare(OmniTableConfEntry(
    "spark.omnitable.access_log",
    None,
    Some(true),
    "Record the columns each scan reads in the table's access log (_access/, one small file per " +
      "scan, written on the driver; docs/governance.md, 'Access log'). Where the session does not " +
      "set it, the table property read.access_log decides.",
    boolean
  ))

  /** Session keys `spark.omnitable.warehouses.<alias>`: more warehouses configured for the session. */
  val WarehousesPrefix = "spark.omnitable.warehouses."

  /**
   * The warehouses in the application's static configuration (the SparkConf the SparkContext
   * started with, not session settings changed at run time by `spark.conf.set` or SQL `SET`):
   * `spark.omnitable.warehouse`, every `spark.omnitable.warehouses.<alias>` and every
   * `spark.sql.catalog.<name>.warehouse`.
   */
  def configuredWarehouses(): Seq[String] = {
    val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
    session.toSeq.flatMap(_.sparkContext.getConf.getAll).collect {
      case (k, v) if k == WAREHOUSE.sessionKey || k.startsWith(WarehousesPrefix) => v.trim
      case (k, v) if k.startsWith("spark.sql.catalog.") && k.endsWith(".warehouse") => v.trim
    }
  }

  /** All declared settings, in declaration order (the settings table of docs/spark.md: [[SettingsDoc]]). */
  def entries: Seq[OmniTableConfEntry[_]] = registry.values.toSeq

  /** Session settings as seen by optimizer rules and planner strategies (the running query's SQLConf). */
  def fromSQLConf(): OmniTableConf =
    new OmniTableConf(
      Map.empty,
      key => Option(org.apache.spark.sql.internal.SQLConf.get.getConfString(key, null)),
      TableProperties.Empty)

  /** Settings of one read: `options` are the read's options (any key case), `table` its table's properties. */
  def apply(options: Map[String, String], table: TableProperties = TableProperties.Empty): OmniTableConf = {
    val session = SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession)
    new OmniTableConf(options, key => session.flatMap(_.conf.getOption(key)), table)
  }
}

/** Typed view of the settings of one read or one catalog, resolved through the chain above. */
final class OmniTableConf(options: Map[String, String], session: String => Option[String], table: TableProperties) {
  import OmniTableConf._

  private val lowered = options.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }

  /**
   * The value of `entry`: read option, else session conf, else table property, else default
   * (None if none). The value found first is parsed; an invalid one fails naming where it came from.
   */
  def getOption[T](entry: OmniTableConfEntry[T]): Option[T] = {
    def parsed(value: String, invalid: String => Throwable): T =
      entry.parse(value).fold(why => throw invalid(why), v => v)
    val fromOption = entry.optionKey.flatMap { k =>
      lowered.get(k.toLowerCase(Locale.ROOT)).map(v => parsed(v, OmniTableErrors.invalidOption(k, v, _)))
    }
    def fromSession =
      session(entry.sessionKey).map(v => parsed(v, OmniTableErrors.invalidOption(entry.sessionKey, v, _)))
    def fromTable = entry.tableKey.flatMap { k =>
      val overrides = entry.optionKey.map(o => s"read option '$o'").toSeq :+ s"session setting '${entry.sessionKey}'"
      table.values.get(k).map(v => parsed(v, OmniTableErrors.invalidTableProperty(table.table, k, v, _, overrides)))
    }
    fromOption.orElse(fromSession).orElse(fromTable).orElse(entry.default)
  }

  def get[T](entry: OmniTableConfEntry[T]): T =
    getOption(entry).getOrElse(throw new IllegalStateException(s"${entry.sessionKey} has no default"))

  def warehouse: String = getOption(WAREHOUSE).getOrElse(throw OmniTableErrors.missingWarehouse())

  /** Whether [[warehouse]] comes from the options (rather than the session setting). */
  def warehouseFromOptions: Boolean = WAREHOUSE.optionKey.exists(k => lowered.contains(k.toLowerCase(Locale.ROOT)))
  def batchSize: Int = get(BATCH_SIZE)
  def maxRowsPerPartition: Long = get(MAX_ROWS_PER_PARTITION)
  def splitFragments: Boolean = get(SPLIT_FRAGMENTS)
  def statsPruning: Boolean = get(STATS_PRUNING)
  def executorPlanningMinFragments: Long = get(EXECUTOR_PLANNING_MIN_FRAGMENTS)
  def rowGroupFiltering: Boolean = get(ROW_GROUP_FILTERING)
  def skipCorruptFragments: Boolean = get(ON_CORRUPT) == OnCorrupt.SkipFragment
  def corruptRetries: Int = get(CORRUPT_RETRIES)
  def vectoredIo: Boolean = get(VECTORED_IO)
  def fuseScans: Boolean = get(FUSE_SCANS)
  def fusePythonUdfs: Boolean = get(FUSE_PYTHON_UDFS)
  def lateMaterialization: Boolean = get(LATE_MATERIALIZATION)
  def lateMaterializationMaxSelectivity: Double = get(LATE_MATERIALIZATION_MAX_SELECTIVITY)
  def views: Boolean = get(VIEWS)
  def viewsRecordedFiles: Boolean = get(VIEWS_RECORDED_FILES)
  def mergeBroadcastBytes: Long = get(MERGE_BROADCAST_BYTES)
  def metadataPageSize: Int = get(METADATA_PAGE_SIZE)

  /** Spark's `spark.sql.files.maxPartitionBytes` (session only): the target size of a packed partition. */
  def filesMaxPartitionBytes: Long = sparkBytes("spark.sql.files.maxPartitionBytes", "128m")

  /** Spark's `spark.sql.files.openCostInBytes` (session only): what opening one file costs, in bytes. */
  def filesOpenCostInBytes: Long = sparkBytes("spark.sql.files.openCostInBytes", "4m")

  /**
   * Spark's `spark.sql.files.minPartitionNum`, else `spark.sql.leafNodeDefaultParallelism`
   * (session only): how many partitions packing aims at least for; None: the default parallelism.
   */
  def filesMinPartitionNum: Option[Int] =
    Seq("spark.sql.files.minPartitionNum", "spark.sql.leafNodeDefaultParallelism").iterator.flatMap { key =>
      session(key).map(v =>
        positiveInt(Int.MaxValue)(v).fold(why => throw OmniTableErrors.invalidOption(key, v, why), n => n))
    }.nextOption()

  /** A Spark byte-size session setting (`128m`, `4194304`, ...), in bytes. */
  private def sparkBytes(key: String, default: String): Long = {
    val v = session(key).getOrElse(default)
    try org.apache.spark.network.util.JavaUtils.byteStringAsBytes(v.trim)
    catch {
      case e: NumberFormatException =>
        throw OmniTableErrors.invalidOption(key, v, "expected a byte size such as 128m", e)
    }
  }
}
