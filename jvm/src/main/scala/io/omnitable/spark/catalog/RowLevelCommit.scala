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
 * metrics get the version).
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
    run: Option[FinishedRun] = None)
