package io.omnitable.spark.catalog

/**
 * One written column file (python/omnitable/vocabulary/descriptors.py `FileDescriptor`): `path`
 * relative to the table location; `stats` by column name, in the catalog's text encoding
 * (docs/catalog.md, "Statistics encoding"); `columnIds` the column ids the file was written for
 * (the commit refuses a file whose column was replaced since).
 */
final case class WrittenFile(
    fileId: String,
    fragmentId: String,
    groupName: String,
    path: String,
    rowCount: Long,
    sizeBytes: Long,
    stats: Seq[(String, FileColumnStats)],
    columnIds: Map[String, Int])

/** One written fragment (`FragmentDescriptor`) and its files; `path` relative to the table location. */
final case class WrittenFragment(
    fragmentId: String,
    batchId: String,
    rowCount: Long,
    path: String,
    seq: Long,
    files: Seq[WrittenFile])

/**
 * The commit of one append from Spark: a new batch `name` (id `batchId`) with `fragments`, on
 * `branch`, planned at `baseVersion`; its generated ids lie in `idRanges` (inclusive, checked
 * against the ids of commits after `baseVersion`). With `replace`, the batch of that name visible
 * at `baseVersion` (if any) is replaced atomically (Python's `mode="replace"`; main branch only). `token` finds the commit after a lost connection.
 * `runId`: the run recording the write (the commit row's `run_id`). `supplied`: the bounds of
 * the ids the data supplied (then `idRanges` is empty); the commit moves `next_row_id` past them
 * (Python's `next_row_id_at_least`). `idsChecked`: ids of commits up to this version were checked
 * exactly against this append's ([[RowIdFile]]); later ones whose statistics may overlap raise
 * [[IdsNotChecked]].
 */
final case class AppendCommit(
    tableId: String,
    tableName: String,
    branch: String,
    baseVersion: Long,
    batchId: String,
    name: String,
    fragments: Seq[WrittenFragment],
    idRanges: Seq[(Long, Long)],
    replace: Boolean = false,
    token: String = java.util.UUID.randomUUID().toString.replace("-", ""),
    engine: String = "spark-jvm",
    runId: Option[String] = None,
    supplied: Option[(Long, Long)] = None,
    idsChecked: Option[Long] = None,
    newColumns: Seq[NewColumn] = Nil) {

  /** False only when none of this append's ids lies in `[lo, hi]` (ingest/ids.py `may_overlap`). */
  def mayOverlap(lo: Long, hi: Long): Boolean = supplied match {
    case Some((a, b)) => a <= hi && b >= lo
    case None => idRanges.exists { case (a, b) => a <= hi && b >= lo }
  }

  def checkedVersion: Long = idsChecked.getOrElse(baseVersion)
}

/**
 * A file holding `_ai_unique_id_` values (path relative to the table location) and their bounds
 * (None: no statistics).
 */
final case class RowIdFile(path: String, bounds: Option[(Long, Long)])

/**
 * Commits after `AppendCommit.checkedVersion` (up to `head`) added ids whose statistics may overlap
 * the append's (commit.py `IdsNotChecked`): the caller checks them exactly, moves `idsChecked` to
 * `head` and retries. Nothing was committed.
 */
final class IdsNotChecked(val head: Long)
    extends RuntimeException(s"commits up to version $head added _ai_unique_id_ values that may overlap")
