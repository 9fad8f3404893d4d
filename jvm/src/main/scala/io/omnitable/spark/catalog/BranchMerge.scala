package io.omnitable.spark.catalog

import scala.util.Using

import io.omnitable.spark.errors.{OmniTableCommitException, ProcedureErrors, WriteErrors}

/**
 * What a merge did (python/omnitable/dataops/merge.py `MergeResult`, the fast-forward part):
 * `version` the target's new head (None: nothing to merge), `fastForward`, the merge base's
 * version and the source's head merged.
 */
final case class MergeOutcome(version: Option[Long], fastForward: Boolean, baseVersion: Long, sourceVersion: Long)

/**
 * The JVM's branch merge where it is a fast-forward (python/omnitable/catalog/branch_merge.py):
 * the merge base, and the fast-forward itself, which re-labels the source's rows and commits as
 * the target's under the table's commit lock (no row copied, no data file touched). A merge that
 * needs a three-way merge is refused with the Python API to use. Failpoints:
 * `merge.before_commit` (planned, lock not taken), `fast_forward.mid_update`.
 */
final class BranchMergeWriter(reader: CatalogReader, failpoints: Failpoints = Failpoints(None)) {

  private val undo = new UndoWriter(reader, failpoints)

  /**
   * Merge `source` into `into` as merge.py `merge` does when no three-way merge is needed;
   * `fastForwardOnly`: the `fast_forward` procedure (a target that moved is a conflict, as
   * branch_merge.py `fast_forward` says). Planning again when a branch moves (5 rounds).
   */
  def merge(table: String, source: String, into: String, fastForwardOnly: Boolean): MergeOutcome = {
    RefWriter.checkName(source, "branch")
    RefWriter.checkName(into, "branch")
    if (source == into) throw ProcedureErrors.invalidOperation(s"Cannot merge branch '$source' into itself")
    def attempt(round: Int): MergeOutcome =
      try mergeOnce(table, source, into, fastForwardOnly)
      catch {
        case e: OmniTableCommitException
            if e.omniErrorClass == WriteErrors.CommitConflict && round < BranchMergeWriter.Rounds =>
          attempt(round + 1)
      }
    attempt(1)
  }

  private def mergeOnce(table: String, source: String, into: String, fastForwardOnly: Boolean): MergeOutcome = {
    val (tableId, sourceHead) = undo.headOf(table, source)
    val (plan, canFastForward) = reader.withConnection(s"the branches of table '$table'") { conn =>
      val entry = reader.findTable(conn, table).filter(_.tableId == tableId).getOrElse(
        throw WriteErrors.dropped("merge", tableId))
      val m = new BranchMerge(conn, entry, reader.display)
      (m.mergeBase(source, into), m.canFastForward(source, into))
    }
    val (_, baseVersion) = plan
    if (sourceHead == baseVersion) return MergeOutcome(None, fastForward = false, baseVersion, sourceHead)
    if (!canFastForward) {
      if (fastForwardOnly) throw BranchMerge.moved(source, into)
      throw ProcedureErrors.mergeNeedsPython(source, into)
    }
    failpoints.hit("merge.before_commit")
    val version = undo.withLock(tableId, "merge") { (conn, entry) =>
      new BranchMerge(conn, entry, reader.display).fastForward(source, into, sourceHead, failpoints)
    }
    MergeOutcome(Some(version), fastForward = true, baseVersion, sourceHead)
  }
}

object BranchMergeWriter {
  val Rounds = 5
}

/** branch_merge.py's statements on one open connection. */
private[catalog] final class BranchMerge(conn: Jdbc.Conn, entry: TableEntry, display: String) {

  private val resolver = new SnapshotResolver(conn, entry, display)
  private val t = entry.tableId

  private def segments(branch: String): (Seq[Segment], Long) = {
    val s = resolver.resolve(SnapshotSpec(branch = Some(branch)))
    (s.segments, s.version)
  }

  /** `(branch, version)` of the newest state both branches contain (branch_merge.py `merge_base`). */
  def mergeBase(source: String, target: String): (String, Long) = {
    val (s, _) = segments(source)
    val (tg, _) = segments(target)
    val tUpto = tg.map(x => x.branch -> x.upto).toMap
    var best = s.collectFirst { case Segment(b, upto) if tUpto.contains(b) => (b, math.min(upto, tUpto(b))) }
      .getOrElse(throw new IllegalStateException("every branch descends from main"))
    for ((segs, from) <- Seq((tg, source), (s, target)); v <- mergedVersions(segs, from))
      if (v > best._2) best = (from, v)
    best
  }

  /** The source versions that merges recorded in `segs`' history brought from `source`. */
  private def mergedVersions(segs: Seq[Segment], source: String): Seq[Long] = {
    val within = segs.map(_ => "(branch = ? AND version <= ?)").mkString("(", " OR ", ")")
    val params = segs.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto)))
    Jdbc.query(
      conn,
      s"SELECT summary FROM commits WHERE table_id = ? AND op = ? AND $within",
      (Seq(t, "merge") ++ params): _*)(
      _.getString(1)).flatMap { raw =>
      val s = BranchMerge.Json.readTree(raw)
      val from = s.path("source")
      if (from.isTextual && from.asText() == source && s.has("source_version")) Some(s.get("source_version").asLong())
      else None
    }
  }

  private def branchRef(name: String): RefRecord = Jdbc.query(
    conn,
    s"SELECT ${RefRecord.Columns} FROM refs WHERE table_id = ? AND name = ?",
    t,
    name)(RefRecord.fromRow).headOption.filter(_.kind == "branch").getOrElse {
    val names = Jdbc.query(conn, "SELECT name FROM refs WHERE table_id = ? AND kind = 'branch' ORDER BY name", t)(
      _.getString(1))
    throw ProcedureErrors.notFound(
      s"Cannot find branch '$name' of table '${entry.name}'; its branches: ${if (names.isEmpty) "none"
        else names.mkString(", ")}")
  }

  /** Whether `source` forked from `target` and `target` has not moved since. */
  def canFastForward(source: String, target: String): Boolean = {
    val ref = branchRef(source)
    val head = segments(target)._2
    ref.parent.contains(target) && ref.forkVersion.contains(head) && ref.version > head
  }

  /** branch_merge.py `fast_forward`: `target`'s head becomes `source`'s (re-labelled); returns it. */
  def fastForward(source: String, target: String, sourceHead: Long, failpoints: Failpoints): Long = {
    if (!canFastForward(source, target)) throw BranchMerge.moved(source, target)
    if (branchRef(source).version != sourceHead) {
      throw WriteErrors.conflict(
        s"Cannot fast-forward branch '$target': '$source' moved from version $sourceHead while the merge was " +
          "planned; nothing was committed")
    }
    UndoStatements.RemovableId.foreach { case (kind, id) => settleRemovals(kind, id(kind), source, target) }
    RefWriter.BranchTables.foreach { name =>
      update(s"UPDATE $name SET branch = ? WHERE table_id = ? AND branch = ?", target, t, source)
      failpoints.hit("fast_forward.mid_update")
    }
    update("UPDATE refs SET version = ? WHERE table_id = ? AND name = ?", Long.box(sourceHead), t, target)
    update("UPDATE refs SET fork_version = ? WHERE table_id = ? AND name = ?", Long.box(sourceHead), t, source)
    update("UPDATE refs SET parent_branch = ? WHERE table_id = ? AND parent_branch = ?", target, t, source)
    sourceHead
  }

  /** The source's removals of the target's own rows become those rows' removed_version (branch_merge.py). */
  private def settleRemovals(kind: String, rowId: String, source: String, target: String): Unit = {
    val matching = s"x.table_id = $kind.table_id AND x.kind = ? AND x.row_id = $rowId AND " +
      s"x.row_version = $kind.added_version AND x.branch = ?"
    update(
      s"UPDATE $kind SET removed_version = (SELECT x.version FROM removals x WHERE $matching) WHERE table_id = ? " +
        s"AND branch = ? AND removed_version IS NULL AND EXISTS (SELECT 1 FROM removals x WHERE $matching)",
      kind,
      source,
      t,
      target,
      kind,
      source
    )
    val own = UndoStatements.RemovableId(kind)("r")
    update(
      "DELETE FROM removals WHERE table_id = ? AND kind = ? AND branch = ? AND EXISTS (SELECT 1 FROM " +
        s"$kind r WHERE r.table_id = removals.table_id AND $own = removals.row_id AND r.added_version = " +
        "removals.row_version AND r.branch = ?)",
      t,
      kind,
      source,
      target
    )
  }

  private def update(sql: String, params: AnyRef*): Int =
    Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      params.zipWithIndex.foreach { case (p, i) => st.setObject(i + 1, p) }
      st.executeUpdate()
    }
}

private[catalog] object BranchMerge {
  val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  def moved(source: String, target: String): OmniTableCommitException = WriteErrors.conflict(
    s"Cannot fast-forward branch '$target' to '$source': '$target' moved since '$source' forked; nothing was committed")
}
