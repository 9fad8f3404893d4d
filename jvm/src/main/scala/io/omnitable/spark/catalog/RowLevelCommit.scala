package io.omnitable.spark.catalog

/**
 * A fragment's new cumulative deletion vector (commit.py `NewDeletion`): `vector` encoded as
 * [[DeletionVectors.encode]] writes it, `deletedCount` its set bits; `replaces` the vector id the
 * statement saw on the fragment (None: none) — the commit conflicts when the head holds another.
 */
final case class NewDeletion(
    fragmentId: String,
    batchId: String,
    deletedCount: Long,
    vector: String,
    replaces: Option[String])

/**
 * The commit of one row-level statement from Spark (docs/spark.md, "Row-level DML"), planned at
 * `baseVersion` on `branch`: `op` and `summary` as the Python operation records them (`delete`:
 * `rows`, `fragments`); `deletions` one per touched fragment; `readColumns` the data columns
 * (name → column id) the statement's scan read, its read set: a concurrent commit that changed the file
 * providing one of them in a fragment live at `baseVersion` conflicts (commit.py
 * `_check_expected_providers`). `token` finds the commit after a lost connection. `append`: the
 * new batch of a MERGE's `WHEN NOT MATCHED … INSERT` rows, committed in the same version with
 * the append's rules (op `upsert`, as Python records `Table.upsert`). `run`: the run of that
 * batch's ingest, recorded already succeeded in the same transaction (the commit names it; its
 * metrics get the version). `keysChecked`: the version an upsert into a keyed table checked its
 * keys against (commit.py `keys_checked_version`): rows of the branch added or ended after it
 * raise [[KeysNotChecked]] (None: no such check).
 */
final case class RowLevelCommit(
    tableId: String,
    tableName: String,
    branch: String,
    baseVersion: Long,
    op: String,
    summary: Map[String, Any],
    deletions: Seq[NewDeletion],
    readColumns: Map[String, Int],
    token: String = java.util.UUID.randomUUID().toString.replace("-", ""),
    engine: String = "spark-jvm",
    files: Seq[WrittenFile] = Nil,
    updatedColumns: Seq[String] = Nil,
    append: Option[AppendCommit] = None,
    run: Option[FinishedRun] = None,
    keysChecked: Option[Long] = None)

/**
 * Commits after `RowLevelCommit.keysChecked` (up to `head`) added or ended rows of the branch
 * (commit.py `KeysNotChecked`, raised by `_check_keys`): the caller checks its keys against the
 * head's live rows (the key index), moves `keysChecked` to `head` and retries. Nothing was committed.
 */
final class KeysNotChecked(val op: String, val since: Long, val head: Long)
    extends RuntimeException(
      s"Cannot commit $op: commits after version $since changed the table's rows; check the new " +
        "keys against them and retry")
