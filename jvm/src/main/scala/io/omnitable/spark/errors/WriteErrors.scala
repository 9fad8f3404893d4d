package io.omnitable.spark.errors

/**
 * A commit the catalog refused (docs/catalog.md, "Commits and concurrency"): a concurrent commit
 * changed what this write relied on (`OMNITABLE_COMMIT_CONFLICT`), the table is gone
 * (`OMNITABLE_TABLE_DROPPED`), or the request does not fit the head (`OMNITABLE_BATCH_EXISTS`).
 * Raised on the driver while the job commits; nothing was committed.
 */
final class OmniTableCommitException(val omniErrorClass: String, val detail: String, cause: Throwable = null)
    extends RuntimeException(s"[$omniErrorClass] $detail", cause)

/** Errors of writes from Spark (the JVM writer and committer). */
object WriteErrors {

  val CommitConflict = "OMNITABLE_COMMIT_CONFLICT"
  val TableDropped = "OMNITABLE_TABLE_DROPPED"
  val BatchExists = "OMNITABLE_BATCH_EXISTS"
  val CommitOutcomeUnknown = "OMNITABLE_COMMIT_OUTCOME_UNKNOWN"

  private def analysis(cls: String, msg: String): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, None)

  def missingAppendName(table: String, optionKey: String, confKey: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_MISSING_APPEND_NAME",
      s"Cannot append to table '$table': no batch name. Every append is a named batch (as " +
        s"Table.append(data, append_name) in Python): pass .option(\"$optionKey\", \"<name>\") to " +
        s"writeTo / write, or SET $confKey = '<name>' before INSERT INTO."
    )

  def invalidAppendName(table: String, name: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_APPEND_NAME",
      s"Cannot append to table '$table': the batch name must be a non-empty string of at most 256 " +
        s"printable characters (e.g. 'cc/2026-10/v1'), got '$name'."
    )

  def keyedTable(table: String, key: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_KEYED_TABLE",
      s"Cannot append to table '$table': it is keyed by $key; add rows with upsert() in Python or " +
        "with MERGE INTO … ON the key equality … WHEN NOT MATCHED THEN INSERT in Spark SQL, which keep " +
        "the key index and the keys unique."
    )

  /**
   * A MERGE into a keyed table of a form the keyed path cannot commit as `Table.upsert` does
   * (`why`: what the statement has that is not allowed).
   */
  def keyedMerge(table: String, key: String, why: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_KEYED_TABLE",
      s"Cannot MERGE INTO table '$table' with $why: it is keyed by $key. A MERGE into a keyed table " +
        "needs an ON condition that is exactly the key equality (t.<key> = s.<col> for every key " +
        "column, AND-ed, nothing else), WHEN MATCHED [AND cond] THEN UPDATE clauses that keep the key " +
        "columns and WHEN NOT MATCHED [AND cond] THEN INSERT clauses; or use upsert() in Python."
    )

  /** An inserted row of a MERGE into a keyed table has a NULL key column; nothing was committed. */
  def nullKey(table: String, column: String): IllegalArgumentException = new IllegalArgumentException(
    s"[OMNITABLE_NULL_KEY] Cannot merge into table '$table': a row it inserts has a NULL key column " +
      s"'$column' (a NULL matches no row in the ON condition, and keys are never null); nothing was committed"
  )

  /**
   * Keys a MERGE into a table keyed by several integer or date columns inserts have the 64-bit
   * hash of other keys live rows hold (python/omnitable/dataops/upsert.py `key_collision`);
   * nothing was committed.
   */
  def insertedKeyCollisions(table: String, collisions: Int): OmniTableCommitException =
    new OmniTableCommitException(
      "OMNITABLE_MERGE_KEY_COLLISION",
      s"Cannot merge into table '$table': $collisions of the keys it inserts have the same 64-bit hash as " +
        "the keys of live rows that hold other keys (the table is keyed by several integer or date " +
        "columns, hashed to 64 bits), and the table cannot hold both; add a string column to the key " +
        "(docs/dataops.md, upserts). Nothing was committed"
    )

  /**
   * Rows a MERGE into a keyed table inserts share keys (duplicate source keys among the rows no
   * target row matched), as Spark's MERGE_CARDINALITY_VIOLATION refuses a target row matched by
   * several source rows; nothing was committed.
   */
  def duplicateInsertedKeys(table: String, duplicates: Int): OmniTableCommitException =
    new OmniTableCommitException(
      "OMNITABLE_MERGE_DUPLICATE_KEYS",
      s"Cannot merge into table '$table': $duplicates of the rows it inserts have a key another inserted " +
        "row has (source rows matching no target row share a key); a MERGE inserts each key at most " +
        "once, as Spark's MERGE_CARDINALITY_VIOLATION refuses a target row matched by several source " +
        "rows. Deduplicate the source on the key; nothing was committed"
    )

  def notWritableSnapshot(table: String, what: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_NOT_WRITABLE",
      s"Cannot write to table '$table' read with $what: writes go to the head of a branch " +
        "(omnitable.<table> or omnitable.<table>.branch_<name>); drop the option."
    )

  def unknownColumns(table: String, names: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append to table '$table': unknown column(s) ${names.mkString(", ")}; add them to the " +
        "table first (ALTER TABLE … ADD COLUMNS, or add_columns() in Python). An INSERT without a " +
        "column list matches columns by position only with the OmniTable session extension " +
        "(spark.sql.extensions)."
    )

  def systemColumn(table: String, name: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append to table '$table': column $name is set by OmniTable (it is the batch " +
        "name); drop it from the data."
    )

  def mistypedRowIds(table: String, found: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append to table '$table': supplied _ai_unique_id_ values must be non-null BIGINT " +
        s"(or a narrower integer type), got type $found; cast them (CAST(... AS BIGINT)) or leave " +
        "the column out to have OmniTable generate them."
    )

  def missingColumns(table: String, names: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append to table '$table': non-nullable column(s) ${names.mkString(", ")} are " +
        "missing from the data."
    )

  def duplicateColumns(table: String, names: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append to table '$table': duplicate column name(s) ${names.mkString(", ")}."
    )

  def mistypedColumn(table: String, name: String, found: String, expected: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot append column '$name' to table '$table': it has type $found, the table has " +
        s"$expected, and $found does not convert to it without loss; cast it in the query."
    )

  def positionMismatch(table: String, found: Int, expected: Int): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot insert into table '$table': the query has $found column(s), the table has $expected " +
        "(its columns without _ai_unique_id_ and _ai_append_name_); name the columns " +
        "(INSERT INTO t (a, b) …) to write some of them."
    )

  /**
   * A row-level statement (or part of one) OmniTable does not run from SQL yet (docs/spark.md,
   * "Row-level DML"); `what` names it, `instead` says what to use.
   */
  def unsupportedDml(table: String, what: String, instead: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_UNSUPPORTED_DML",
      s"Cannot run $what on table '$table' from Spark SQL yet; $instead."
    )

  /**
   * Supplied `_ai_unique_id_` values the append cannot take (null, duplicated in the data, or
   * already in the table: python/omnitable/ingest/ids.py's ValidationErrors); nothing was committed.
   */
  def invalidRowIds(detail: String): OmniTableCommitException =
    new OmniTableCommitException("OMNITABLE_INVALID_ROW_IDS", detail)

  def conflict(detail: String): OmniTableCommitException = new OmniTableCommitException(CommitConflict, detail)

  def dropped(op: String, tableId: String): OmniTableCommitException = new OmniTableCommitException(
    TableDropped,
    s"Cannot commit $op: the table (id $tableId) was dropped by another process; nothing was " +
      "committed (a table re-created under its name is another table: open it again)"
  )

  def batchExists(name: String): OmniTableCommitException = new OmniTableCommitException(
    BatchExists,
    s"Cannot append batch '$name': it already exists; use INSERT OVERWRITE / mode(\"overwrite\") " +
      "or Python's mode='replace' to replace it atomically"
  )

  def outcomeUnknown(op: String, cause: Throwable): OmniTableCommitException = new OmniTableCommitException(
    CommitOutcomeUnknown,
    s"Cannot tell whether $op was committed: the catalog connection failed while committing " +
      s"(${Option(cause.getMessage).getOrElse(cause.toString)}); look at the table's history " +
      "before retrying. Its files were kept (the commit may reference them).",
    cause
  )

  def failpoint(name: String): RuntimeException =
    new RuntimeException(s"omnitable failpoint '$name' triggered (spark.omnitable.test.failpoint)")
}
