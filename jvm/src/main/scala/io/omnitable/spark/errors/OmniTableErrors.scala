package io.omnitable.spark.errors

import org.apache.spark.sql.AnalysisException

/**
 * An analysis-time error raised by OmniTable. `errorClass` is a stable identifier (tests and
 * callers match on it); the message follows "Cannot <verb> <object>: <detail>" and says what to
 * do next. Spark's own error-class registry is not used (our classes are not registered there),
 * so the class is carried in this field and as a `[CLASS]` prefix of the message. Where Spark
 * has a registered condition with the same meaning (a missing table), that condition is used as
 * the class, so Spark and PySpark code that tests `getCondition` behaves as for any table.
 */
final class OmniTableAnalysisException(
    val omniErrorClass: String,
    detail: String,
    cause: Option[Throwable],
    sparkCondition: Option[String] = None,
    parameters: Map[String, String] = Map.empty)
    extends AnalysisException(
      s"[$omniErrorClass] $detail",
      None,
      None,
      cause,
      sparkCondition,
      parameters,
      Array.empty[org.apache.spark.QueryContext])

/** A read-time error on an executor (a file that breaks the format contract, an I/O failure). */
final class OmniTableReadException(val omniErrorClass: String, val detail: String, cause: Throwable)
    extends RuntimeException(s"[$omniErrorClass] $detail", cause)

/**
 * Every error OmniTable's JVM side raises is built here, so messages and classes stay consistent.
 * Names say what went wrong; each returns the exception for the caller to throw.
 */
object OmniTableErrors {

  private def analysis(cls: String, msg: String, cause: Throwable = null): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, Option(cause))

  // --- runtime ------------------------------------------------------------------------------

  def unsupportedSparkVersion(running: String, supported: String, builtAgainst: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_UNSUPPORTED_SPARK_VERSION",
      s"Cannot load OmniTable on Spark $running: this jar uses Spark internals and runs on Spark " +
        s"$supported only (built against $builtAgainst). Run it on Spark $supported, or build the jar " +
        "for your Spark version."
    )

  // --- warehouse and catalog ---------------------------------------------------------------

  def missingWarehouse(): OmniTableAnalysisException = analysis(
    "OMNITABLE_MISSING_WAREHOUSE",
    "Cannot locate the OmniTable warehouse: no 'warehouse' option and no session setting " +
      "'spark.omnitable.warehouse'. Pass .option(\"warehouse\", \"/path/or/uri\") or use " +
      "omnitable.spark_session(warehouse=...)."
  )

  def invalidWarehouse(value: String, detail: String): OmniTableAnalysisException =
    analysis("OMNITABLE_INVALID_WAREHOUSE", s"Cannot open warehouse '$value': $detail")

  def missingEnvVariable(warehouse: String, name: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_MISSING_CREDENTIAL",
      s"Cannot open warehouse '$warehouse': the password refers to environment variable '$name', " +
        "which is not set on this machine. Export it before starting Spark."
    )

  def envVariableNotAllowed(
      warehouse: String,
      name: String,
      prefixes: Seq[String],
      prefixesVariable: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CREDENTIAL_NOT_ALLOWED",
      s"Cannot open warehouse '$warehouse': the password refers to environment variable '$name', " +
        s"which is outside the allowed prefixes (${if (prefixes.isEmpty) "none" else prefixes.mkString(", ")}). " +
        s"Store the password in a variable such as OMNITABLE_PG_PASSWORD, or add its prefix to $prefixesVariable."
    )

  def envPasswordInReadOption(warehouse: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CREDENTIAL_NOT_ALLOWED",
      s"Cannot open warehouse '$warehouse': an env:NAME password is read only for servers in the " +
        "application's static configuration (spark.omnitable.warehouse, spark.sql.catalog.<name>.warehouse " +
        "or spark.omnitable.warehouses.<alias>, set when the application starts: --conf, " +
        "omnitable.spark_session(warehouse=...) or its conf), not for a read option alone or a setting " +
        "changed at run time. Configure it at start (same user, host, port and variable; any database) " +
        "or read it through its catalog."
    )

  def passwordInConfig(warehouse: String, where: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_PASSWORD_IN_CONFIG",
      s"Cannot open warehouse '$warehouse': $where holds a literal password, which Spark would show (UI, " +
        "event logs, SET and EXPLAIN output) and copy to executors. Put the password in an environment " +
        "variable and write it as env:NAME, e.g. postgresql://user:env:OMNITABLE_PG_PASSWORD@host/db."
    )

  def cannotConnect(warehouse: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CATALOG_UNAVAILABLE",
      s"Cannot open warehouse '$warehouse': ${Option(cause.getMessage).getOrElse(cause.toString)}",
      cause)

  def notACatalog(warehouse: String, detail: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_NOT_A_CATALOG",
      s"Cannot open warehouse '$warehouse': $detail. Create it with omnitable.connect(...) first.")

  def schemaVersionMismatch(warehouse: String, found: String, expected: Int): OmniTableAnalysisException = {
    val older = found.toIntOption.exists(_ < expected)
    val upgrade = if (older) " (an older catalog: upgrade it with `omnitable -w WAREHOUSE upgrade-catalog`)" else ""
    analysis(
      "OMNITABLE_CATALOG_VERSION",
      s"Cannot open warehouse '$warehouse': its catalog schema version is $found but this jar " +
        s"reads version $expected. Use an omnitable jar and Python package of the same release$upgrade."
    )
  }

  def catalogQueryFailed(warehouse: String, what: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CATALOG_QUERY",
      s"Cannot read $what from warehouse '$warehouse': ${Option(cause.getMessage).getOrElse(cause.toString)}",
      cause)

  def catalogWriteFailed(warehouse: String, what: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CATALOG_QUERY",
      s"Cannot $what in warehouse '$warehouse': ${Option(cause.getMessage).getOrElse(cause.toString)}",
      cause)

  /** A namespace identifier OmniTable cannot hold (more than one level, or an invalid name). */
  def invalidNamespace(namespace: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_NAMESPACE",
      s"Cannot use namespace '$namespace': namespaces have one level, and a name is 1-128 letters, digits " +
        "and '_', starting with a letter or '_'."
    )

  /** DROP NAMESPACE of `default`, or of a namespace holding tables. */
  def cannotDropNamespace(namespace: String, why: String): OmniTableAnalysisException =
    analysis("OMNITABLE_CANNOT_DROP_NAMESPACE", s"Cannot drop namespace '$namespace': $why.")

  def corruptCatalog(warehouse: String, detail: String, cause: Throwable = null): OmniTableAnalysisException =
    analysis("OMNITABLE_CORRUPT_CATALOG", s"Cannot plan a read from warehouse '$warehouse': $detail", cause)

  // --- tables, refs, versions, batches ------------------------------------------------------

  /** Raised with Spark's TABLE_OR_VIEW_NOT_FOUND condition (see the class comment). */
  def tableNotFound(
      warehouse: String,
      table: String,
      existing: Seq[String],
      missingNamespace: Option[String] = None): OmniTableAnalysisException = {
    val known = if (existing.isEmpty) "it has no tables" else existing.sorted.mkString("tables: ", ", ", "")
    val condition = "TABLE_OR_VIEW_NOT_FOUND"
    val namespace = missingNamespace.fold("")(ns => s" Namespace '$ns' does not exist.")
    new OmniTableAnalysisException(
      condition,
      s"Cannot find table '$table' in warehouse '$warehouse' ($known).$namespace",
      None,
      Some(condition),
      Map("relationName" -> s"`$table`"))
  }

  /**
   * A catalog identifier naming branch or tag `ref` (`kind`) that table `table` lacks (e.g.
   * `omnitable.web.branch_x`): a missing table to Spark (TABLE_OR_VIEW_NOT_FOUND), naming both.
   */
  def refTableNotFound(
      warehouse: String,
      identifier: String,
      table: String,
      kind: String,
      ref: String,
      existing: Seq[String]): OmniTableAnalysisException = {
    val plural = if (kind == "tag") "tags" else "branches"
    val known = if (existing.isEmpty) "none" else existing.sorted.mkString(", ")
    val condition = "TABLE_OR_VIEW_NOT_FOUND"
    new OmniTableAnalysisException(
      condition,
      s"Cannot find table '$identifier' in warehouse '$warehouse': table '$table' has no $kind '$ref' " +
        s"($plural: $known).",
      None,
      Some(condition),
      Map("relationName" -> identifier.split('.').map(p => s"`$p`").mkString("."))
    )
  }

  /**
   * `omnitable.<table>.<name>` where `name` is neither a metadata table nor a `branch_` / `tag_`
   * ref: a missing table to Spark (TABLE_OR_VIEW_NOT_FOUND) that lists the valid names.
   */
  def metadataTableNotFound(
      warehouse: String,
      table: String,
      name: String,
      valid: Seq[String]): OmniTableAnalysisException = {
    val condition = "TABLE_OR_VIEW_NOT_FOUND"
    new OmniTableAnalysisException(
      condition,
      s"Cannot find table '$table.$name' in warehouse '$warehouse': '$name' is not a metadata table " +
        s"of table '$table' (metadata tables: ${valid.mkString(", ")}); a branch or tag is " +
        s"'$table.branch_<name>' or '$table.tag_<name>'.",
      None,
      Some(condition),
      Map("relationName" -> s"`$table`.`$name`")
    )
  }

  /** The error table of `table` exists but cannot be read (Delta Lake missing, a broken table). */
  def errorTableUnreadable(table: String, location: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_ERROR_TABLE_UNREADABLE",
      s"Cannot read the error table of table '$table' at '$location': " +
        s"${Option(cause.getMessage).map(_.linesIterator.nextOption().getOrElse("")).getOrElse(cause.toString)}; " +
        "the session needs Delta Lake (omnitable.spark_session() adds it, or --packages " +
        "io.delta:delta-spark_4.1_2.13:4.1.0).",
      cause
    )

  /** The class of [[refNotFound]]. */
  val RefNotFound: String = "OMNITABLE_REF_NOT_FOUND"

  /** `kind` is "branch", "tag" or "ref" (branch or tag). */
  def refNotFound(table: String, kind: String, ref: String, existing: Seq[String]): OmniTableAnalysisException = {
    val plural = kind match { case "branch" => "branches"; case "tag" => "tags"; case _ => "refs" }
    val known = if (existing.isEmpty) "none" else existing.sorted.mkString(", ")
    analysis(RefNotFound, s"Cannot find $kind '$ref' of table '$table' ($plural: $known).")
  }

  def versionNotFound(table: String, version: Long, latest: Long): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_VERSION_NOT_FOUND",
      s"Cannot read version $version of table '$table': versions run from 0 to $latest.")

  /** catalog/horizon.py: `version` (committed on `branch`) lies below the branch's expiry horizon. */
  def versionExpired(table: String, version: Long, branch: String, horizon: Long, expireCommit: Long)
      : OmniTableAnalysisException =
    analysis(
      "OMNITABLE_VERSION_EXPIRED",
      s"Cannot resolve version $version of table '$table': it was expired (the expire commit at version " +
        s"$expireCommit removed the versions of branch '$branch' older than its horizon, version $horizon); " +
        s"read version $horizon or later, or a tag"
    )

  /** An executor could not list its share of a scan planned on the executors. */
  def executorPlanningFailed(table: String, warehouse: String, cause: Throwable)
      : OmniTableAnalysisException =
    analysis(
      "OMNITABLE_EXECUTOR_PLANNING",
      s"An executor could not list its fragments of table '$table' from warehouse '$warehouse' (a full scan of " +
        "a large table is planned on the executors: docs/spark.md, 'Planning on the executors'): " +
        s"${cause.getMessage}. Give the executors the catalog (the same SQLite path, or the PostgreSQL server " +
        "and its password variable, e.g. spark.executorEnv.NAME), or plan on the driver: set " +
        "spark.omnitable.read.executor_planning_min_fragments above the table's fragment count",
      cause
    )

  /** An executor listing its share of a scan planned there found the snapshot's rows gone. */
  def snapshotGoneDuringScan(table: String, label: String, why: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SNAPSHOT_GONE",
      s"Cannot read $label of table '$table': $why while the scan ran (an executor lists the fragments of a " +
        "scan planned on the executors when its task starts); run the query again"
    )

  def versionNotOnBranch(table: String, version: Long, branch: String): OmniTableAnalysisException = {
    val what = s"version $version of table '$table' on branch '$branch'"
    analysis("OMNITABLE_VERSION_NOT_ON_BRANCH", s"Cannot read $what: that version is not in the history of '$branch'.")
  }

  /** `asOf`: the instant asked for, as the user reads it (e.g. 2026-11-29T11:24:37Z). */
  def noVersionAsOf(table: String, branch: String, asOf: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_VERSION_NOT_FOUND",
      s"Cannot read table '$table' as of $asOf: " +
        s"branch '$branch' has no version committed at or before that time."
    )

  def conflictingSnapshotOptions(table: String, options: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CONFLICTING_OPTIONS",
      s"Cannot read table '$table': options ${options.mkString(", ")} each select a snapshot; give " +
        "either a tag, or a branch and/or versionAsOf."
    )

  def batchNotFound(table: String, missing: Seq[String], existing: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_BATCH_NOT_FOUND",
      s"Cannot read batches ${missing.map(b => s"'$b'").mkString(", ")} of table '$table': not in " +
        s"this snapshot (batches: ${if (existing.isEmpty) "none" else existing.sorted.mkString(", ")})."
    )

  def fragmentNotFound(table: String, snapshot: String, missing: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_FRAGMENT_NOT_FOUND",
      s"Cannot read fragments ${missing.mkString(", ")} of table '$table': not visible in $snapshot.")

  def invalidOption(key: String, value: String, detail: String, cause: Throwable = null): OmniTableAnalysisException =
    analysis("OMNITABLE_INVALID_OPTION", s"Cannot use option $key='$value': $detail", cause)

  /** A table property (`create_table(properties=...)`) that is not a valid value of its setting. */
  def invalidTableProperty(
      table: String,
      key: String,
      value: String,
      detail: String,
      overrides: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_OPTION",
      s"Cannot use table property $key='$value' of table '$table': $detail; " +
        s"set ${overrides.mkString(" or ")} to override it for a read or session"
    )

  def unsupportedDataType(table: String, column: String, ddl: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_UNSUPPORTED_TYPE",
      s"Cannot read column '$column' of table '$table': its type '$ddl' is not a Spark SQL type.",
      cause)

  def readOnly(operation: String): UnsupportedOperationException =
    new UnsupportedOperationException(
      s"Cannot $operation: the omnitable Spark catalog is read-only for this statement (it takes " +
        "INSERT, writeTo/write appends, CREATE TABLE, ALTER TABLE … ADD COLUMNS and DROP TABLE); use the " +
        "Python API (omnitable.connect(...)).")

  def wrongArguments(function: String, expected: Int, got: Int): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_WRONG_ARGUMENTS",
      s"Cannot call $function: it takes $expected argument(s), got $got.")

  def unknownMetricsAction(function: String, action: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_WRONG_ARGUMENTS",
      s"Cannot call $function: unknown action '$action'; use 'snapshot' or 'reset'.")

  // --- executors ------------------------------------------------------------------------------

  val MisalignedFile = "OMNITABLE_MISALIGNED_FILE"
  val CorruptFile = "OMNITABLE_CORRUPT_FILE"
  val FileRead = "OMNITABLE_FILE_READ"
  val SchemaMismatch = "OMNITABLE_SCHEMA_MISMATCH"

  def misalignedFile(path: String, fileRows: Long, fragmentRows: Long): OmniTableReadException =
    new OmniTableReadException(
      MisalignedFile,
      s"Cannot read column file $path: it holds $fileRows rows but its fragment has $fragmentRows " +
        "(alignment invariant broken; the file was modified outside OmniTable).",
      null
    )

  def fileEndedEarly(path: String, missingRows: Long): OmniTableReadException =
    new OmniTableReadException(
      MisalignedFile,
      s"Cannot read column file $path: it ended $missingRows rows before its fragment's end " +
        "(alignment invariant broken; the file was modified outside OmniTable).",
      null
    )

  def fileReadFailed(path: String, cause: Throwable): OmniTableReadException =
    new OmniTableReadException(
      FileRead,
      s"Cannot read column file $path: ${Option(cause.getMessage).getOrElse(cause.toString)}",
      cause)

  /**
   * A fragment whose column file stayed unreadable after `attempts` tries. Keeps the class of an
   * OmniTable read error (misaligned file, ...) and names the fragment and, when known, the row group.
   */
  def corruptFragment(
      fragment: String,
      file: String,
      rowGroup: Option[Int],
      attempts: Int,
      cause: Throwable,
      hint: String): OmniTableReadException = {
    val (cls, detail) = cause match {
      case o: OmniTableReadException => (o.omniErrorClass, o.detail)
      case other => (CorruptFile, s"Cannot read column file $file: ${describe(other)}")
    }
    val where = rowGroup.fold("")(rg => s", row group $rg")
    new OmniTableReadException(
      cls,
      s"Cannot read fragment $fragment ($attempts attempt(s)$where): ${detail.stripSuffix(".")}. $hint",
      cause)
  }

  /**
   * A fragment whose column file could not be read for a reason other than corruption (schema
   * drift, a missing file or file system, permissions, ...): never skipped, the cause is kept.
   */
  def unreadableFragment(
      fragment: String,
      file: String,
      rowGroup: Option[Int],
      attempts: Int,
      cause: Throwable): OmniTableReadException = {
    val drift = cause match {
      case o: OmniTableReadException if o.omniErrorClass == SchemaMismatch => Some(o.detail)
      case _ => causes(cause).collectFirst {
          case s: org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException =>
            s"Cannot read column file $file: its column '${s.getColumn.stripPrefix("[").stripSuffix("]")}' is " +
              s"stored as ${s.getPhysicalType}, which does not convert to the catalog's type ${s.getLogicalType}"
        }
    }
    val (cls, detail) = (cause, drift) match {
      case (_, Some(d)) => (SchemaMismatch, d)
      case (o: OmniTableReadException, _) => (o.omniErrorClass, o.detail)
      case (other, _) => (FileRead, s"Cannot read column file $file: ${describe(other)}")
    }
    val where = rowGroup.fold("")(rg => s", row group $rg")
    new OmniTableReadException(
      cls,
      s"Cannot read fragment $fragment ($attempts attempt(s)$where): ${detail.stripSuffix(".")}. This is not " +
        "corruption of the file's bytes, so on_corrupt=skip_fragment does not skip it: fix the cause (file " +
        "system configuration, permissions, the file's schema) and read again.",
      cause
    )
  }

  val CorruptDeletionVector = "OMNITABLE_CORRUPT_DELETION_VECTOR"

  /**
   * A deletion vector the reader cannot apply (not base64 or zlib, a bitmap of the wrong length,
   * bits past the fragment's rows, a count that differs from the catalog's): never skipped, since
   * reading the fragment without it would return deleted rows.
   */
  def corruptDeletionVector(
      table: String,
      fragment: String,
      vectorId: String,
      detail: String,
      cause: Throwable = null): OmniTableReadException =
    new OmniTableReadException(
      CorruptDeletionVector,
      s"Cannot read deletion vector $vectorId of fragment $fragment of table '$table': $detail; its " +
        "deletion_vectors row is damaged (written outside OmniTable?): restore the catalog from a backup, or " +
        "read a version before the delete (versionAsOf).",
      cause
    )

  val CorruptKeyIndex = "OMNITABLE_CORRUPT_KEY_INDEX"

  /**
   * A keyed table's index file (`_key_index.arrow`) that cannot be used: missing or unreadable, of
   * another hash scheme, or not covering its fragment's rows (`message` is keyindex.py's text).
   */
  def corruptKeyIndex(message: String, cause: Throwable): OmniTableReadException =
    new OmniTableReadException(CorruptKeyIndex, message, cause)

  /** Two live rows of a keyed table hold one key (keyindex.py `probe_fragments`' text). */
  def duplicateKeyInIndex(fragmentPath: String): OmniTableReadException =
    new OmniTableReadException(
      CorruptKeyIndex,
      s"Key index of fragment $fragmentPath holds a key another live row holds; the table's keys are not " +
        "unique (report this: it breaks the keyed-table invariant)",
      null
    )

  /** A footer that points outside its file. */
  def corruptFooter(path: String, detail: String): OmniTableReadException =
    new OmniTableReadException(
      CorruptFile,
      s"Cannot read column file $path: its footer is inconsistent ($detail).",
      null)

  /** A file that lacks a column the catalog says it carries (schema drift, not corruption). */
  def schemaMismatch(path: String, detail: String): OmniTableReadException =
    new OmniTableReadException(
      SchemaMismatch,
      s"Cannot read column file $path: its schema does not match the catalog ($detail).",
      null)

  /** `e` and its causes, outermost first (at most 32; a cycle ends the list). */
  def causes(e: Throwable): Seq[Throwable] = {
    val out = scala.collection.mutable.ArrayBuffer.empty[Throwable]
    var t = e
    while (t != null && out.length < 32 && !out.exists(_ eq t)) { out += t; t = t.getCause }
    out.toSeq
  }

  /** The class and message of any throwable, in one line. */
  def describe(e: Throwable): String = {
    val msg = Option(e.getMessage).map(_.linesIterator.take(1).mkString).filter(_.nonEmpty)
    s"${e.getClass.getSimpleName}${msg.fold("")(m => s": $m")}"
  }
}
