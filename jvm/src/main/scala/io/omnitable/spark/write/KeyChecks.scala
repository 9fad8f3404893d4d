package io.omnitable.spark.write

import io.omnitable.spark.catalog.{
  CatalogReader,
  KeyHash,
  KeyIndex,
  KeysNotChecked,
  RowLevelCommit,
  SnapshotSpec,
  WrittenFragment
}
import io.omnitable.spark.errors.WriteErrors
import org.apache.hadoop.conf.Configuration

/**
 * The commit of an upsert into a keyed table re-checking its keys (python/omnitable/dataops/upsert.py
 * `_commit_checking_keys`): the commit carries the version its keys were probed at
 * (`RowLevelCommit.keysChecked`); when rows changed after it the committer refuses it
 * ([[KeysNotChecked]], nothing committed) and the driver probes the key index of the head the
 * refusal names: a key it inserts now held by a live row, or a key it found no longer at the row
 * it found (deleted, or moved), is Python's conflict; otherwise the checked version moves to that
 * head and the commit is tried again, at most [[MaxRounds]] times.
 */
object KeyChecks {

  /** Python's `_KEY_ROUNDS`. */
  val MaxRounds = 20

  /** A key the upsert found, at `offset` of fragment `fragmentId` (the row it updates). */
  final case class Found(key: KeyHash, fragmentId: String, offset: Long)

  /**
   * Commits `first` with `run` (e.g. `CatalogWriter.commitRowLevel`), re-checking `inserted` and
   * `found` against the head of `first.branch` of table `table` (read through `reader`) whenever
   * the committer refuses it for rows changed after `keysChecked`.
   */
  def commitWith(
      reader: CatalogReader,
      table: String,
      first: RowLevelCommit,
      inserted: IndexedSeq[KeyHash],
      found: IndexedSeq[Found],
      conf: Configuration)(run: RowLevelCommit => Long): Long = {
    var c = first
    var round = 0
    while (round < MaxRounds)
      try return run(c)
      catch {
        case e: KeysNotChecked =>
          val (taken, moved) = changes(reader, table, c.branch, e.head, inserted, found, conf)
          if (taken > 0 || moved > 0) {
            throw WriteErrors.conflict(
              s"Cannot commit upsert into table '$table': a concurrent commit (after version ${e.since}) " +
                s"inserted $taken of the keys it inserts and deleted or moved the rows of $moved of the " +
                "keys it found; nothing was committed")
          }
          c = c.copy(keysChecked = Some(e.head))
          round += 1
      }
    throw WriteErrors.conflict(
      s"Cannot commit upsert into table '$table': other commits kept changing rows while its keys were " +
        "checked; retry the upsert")
  }

  /**
   * The keys of the rows a MERGE inserted into keyed table `table` (at `tableUri`), read from the
   * index files its tasks wrote next to `fragments`.
   *
   * @throws io.omnitable.spark.errors.OmniTableCommitException (`OMNITABLE_MERGE_DUPLICATE_KEYS`)
   *   when two inserted rows share a key
   */
  def insertedKeys(
      table: String,
      tableUri: String,
      fragments: Seq[WrittenFragment],
      conf: Configuration): IndexedSeq[KeyHash] = {
    val keys = fragments.flatMap { f =>
      val index = KeyIndex.load(KeyIndex.uri(tableUri, f.path), f.rowCount, conf)
      index.h1.indices.map(i => KeyHash(index.h1(i), index.h2(i)))
    }.toIndexedSeq
    val duplicates = keys.size - keys.distinct.size
    if (duplicates > 0) throw WriteErrors.duplicateInsertedKeys(table, duplicates)
    keys
  }

  /**
   * Refuses inserted keys whose 64-bit hash ([[KeyHash.weak]]: keys of several integer or date
   * columns) a live row of version `version` of `branch` holds: the MERGE's join found no row
   * holding the key itself, so that row holds another key with the same hash, and the table
   * cannot hold both (python/omnitable/dataops/upsert.py rejects such rows, `key_collision`).
   *
   * @throws io.omnitable.spark.errors.OmniTableCommitException (`OMNITABLE_MERGE_KEY_COLLISION`)
   */
  def refuseCollisions(
      reader: CatalogReader,
      table: String,
      branch: String,
      version: Long,
      inserted: IndexedSeq[KeyHash],
      conf: Configuration): Unit = {
    val (taken, _) = changes(reader, table, branch, version, inserted, IndexedSeq.empty, conf)
    if (taken > 0) throw WriteErrors.insertedKeyCollisions(table, taken)
  }

  /** (inserted keys a live row of the head holds, found keys no longer at the row found) at version `head`. */
  private def changes(
      reader: CatalogReader,
      table: String,
      branch: String,
      head: Long,
      inserted: IndexedSeq[KeyHash],
      found: IndexedSeq[Found],
      conf: Configuration): (Int, Int) = {
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch), version = Some(head)))
    val fragments = reader.loadFragments(snap).toIndexedSeq
    val probed = KeyIndex.probe(snap.tableUri, table, fragments, inserted ++ found.map(_.key), conf)
    val taken = probed.take(inserted.size).count(_.isDefined)
    val moved = probed.drop(inserted.size).zip(found).count { case (at, f) =>
      !at.exists(l => fragments(l.fragment).fragmentId == f.fragmentId && l.offset == f.offset)
    }
    (taken, moved)
  }
}
