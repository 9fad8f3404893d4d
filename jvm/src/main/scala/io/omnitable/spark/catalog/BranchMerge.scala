package io.omnitable.spark.catalog

import scala.util.Using

import io.omnitable.spark.errors.{OmniTableCommitException, ProcedureErrors, WriteErrors}

/**
 * What a merge did (python/omnitable/dataops/merge.py `MergeResult`): `version` the target's new
 * head (None: nothing to merge), `fastForward`, the merge base's version, the source's head
 * merged, the counts of a three-way merge (cells, batches, deletes, columns, features) and the
 * conflicts its strategy resolved.
 */
final case class MergeOutcome(
    version: Option[Long],
    fastForward: Boolean,
    baseVersion: Long,
    sourceVersion: Long,
    counts: Map[String, Int] = Map.empty,
    resolved: Seq[MergeConflictEntry] = Nil) {
  def count(name: String): Int = counts.getOrElse(name, 0)
}

/**
 * The JVM's branch merge (python/omnitable/dataops/merge.py, catalog/branch_merge.py): the
 * merge base; a fast-forward re-labels the source's rows and commits as the target's under the
 * table's commit lock (no row copied, no data file touched); otherwise a three-way merge at
 * column grain ([[MergeDiff]]) commits one `merge` with the source's files (no data file
 * written), as Python's; rows deleted on one side and changed on the other are compared by value
 * ([[MergeRows]]); in a keyed table, keys both branches inserted are conflicts too ([[MergeKeys]]).
 * Failpoints: `merge.before_commit` (planned, lock not taken), `fast_forward.mid_update`,
 * `commit.before_insert`, `commit.mid_insert`, `commit.before_end`.
 */
final class BranchMergeWriter(reader: CatalogReader, failpoints: Failpoints = Failpoints(None)) {

  private val undo = new UndoWriter(reader, failpoints)

  /**
   * Merge `source` into `into` as merge.py `merge` does; `fastForwardOnly`: the `fast_forward`
   * procedure (a target that moved is a conflict, as branch_merge.py `fast_forward` says).
   * Planning again when a branch moves (5 rounds).
   */
  def merge(
      table: String,
      source: String,
      into: String,
      fastForwardOnly: Boolean,
      strategy: String = "fail"): MergeOutcome = {
    RefWriter.checkName(source, "branch")
    RefWriter.checkName(into, "branch")
    if (source == into) throw ProcedureErrors.invalidOperation(s"Cannot merge branch '$source' into itself")
    def attempt(round: Int): MergeOutcome =
      try mergeOnce(table, source, into, fastForwardOnly, strategy)
      catch {
        case e: OmniTableCommitException
            if e.omniErrorClass == WriteErrors.CommitConflict && round < BranchMergeWriter.Rounds =>
          attempt(round + 1)
      }
    attempt(1)
  }

  private def mergeOnce(
      table: String,
      source: String,
      into: String,
      fastForwardOnly: Boolean,
      strategy: String): MergeOutcome = {
    val (tableId, sourceHead) = undo.headOf(table, source)
    val (plan, canFastForward) = reader.withConnection(s"the branches of table '$table'") { conn =>
      val entry = reader.findTable(conn, table).filter(_.tableId == tableId).getOrElse(
        throw WriteErrors.dropped("merge", tableId))
      val m = new BranchMerge(conn, entry, reader.display)
      (m.mergeBase(source, into), m.canFastForward(source, into))
    }
    val (baseBranch, baseVersion) = plan
    if (sourceHead == baseVersion) return MergeOutcome(None, fastForward = false, baseVersion, sourceHead)
    if (!canFastForward) {
      if (fastForwardOnly) throw BranchMerge.moved(source, into)
      return threeWay(table, tableId, source, into, strategy, sourceHead, (baseBranch, baseVersion))
    }
    failpoints.hit("merge.before_commit")
    val version = undo.withLock(tableId, "merge") { (conn, entry) =>
      new BranchMerge(conn, entry, reader.display).fastForward(source, into, sourceHead, failpoints)
    }
    MergeOutcome(Some(version), fastForward = true, baseVersion, sourceHead)
  }

  /** merge.py `_merge_once` past the fast-forward: plan, fail or resolve conflicts, commit one `merge`. */
  private def threeWay(
      table: String,
      tableId: String,
      source: String,
      into: String,
      strategy: String,
      sourceHead: Long,
      base: (String, Long)): MergeOutcome = {
    val (targetHead, keyed, views) = reader.withConnection(s"the branches of table '$table'") { conn =>
      val entry = reader.findTable(conn, table).filter(_.tableId == tableId).getOrElse(
        throw WriteErrors.dropped("merge", tableId))
      val resolver = new SnapshotResolver(conn, entry, reader.display)
      val head = resolver.resolve(SnapshotSpec(branch = Some(into))).version
      def view(b: String, v: Long) =
        MergeView.load(conn, tableId, resolver.resolve(SnapshotSpec(branch = Some(b), version = Some(v))).segments, v)
      (
        head,
        entry.properties.contains("table.key"),
        (view(base._1, base._2), view(source, sourceHead), view(into, head)))
    }
    val (baseView, src, dst) = views
    val plan = new MergeDiff(baseView, src, dst, table).plan()
    lazy val uri = reader.loadTable(table, SnapshotSpec(branch = Some(into))).tableUri
    if (plan.rowChecks.nonEmpty) plan.conflicts ++= MergeRows.check(uri, plan, baseView, src, dst)
    if (keyed && plan.copyBatches.nonEmpty) {
      val conf = org.apache.spark.sql.SparkSession.active.sessionState.newHadoopConf()
      plan.conflicts ++= MergeKeys.check(uri, table, plan, baseView, src, dst, conf)
    }
    if (plan.conflicts.nonEmpty && strategy == "fail") {
      throw ProcedureErrors.mergeConflict(BranchMergeWriter.conflictMessage(source, into, plan.conflicts.toSeq))
    }
    if (strategy == "theirs") MergeKeys.refuseTheirs(plan)
    MergeRows.resolve(plan, dst, strategy == "theirs", table)
    val req = new MergeRequest(src, dst, plan, strategy == "theirs", table).build()
    val counts = plan.counts
    val summary = Map[String, Any](
      "source" -> source,
      "source_version" -> sourceHead,
      "base_version" -> base._2,
      "strategy" -> strategy,
      "user" -> System.getProperty("user.name")) ++ counts
    failpoints.hit("merge.before_commit")
    val version = undo.withLock(tableId, "merge") { (conn, entry) =>
      val resolver = new SnapshotResolver(conn, entry, reader.display)
      val head = resolver.resolve(SnapshotSpec(branch = Some(into)))
      val c = CommitContext(conn, entry, resolver, into, targetHead, head.version, head.segments)
      c.checkReadThisBranch("merge")
      CommitRows.checkBase(into, targetHead, head.version)
      BranchMergeWriter.checkHeads(c, source, sourceHead)
      val version = Jdbc.query(conn, CommitSql("next_version"), tableId)(_.getLong(1)).head
      failpoints.hit("commit.before_insert")
      val now = CommitRows.commitTime(conn, tableId)
      new MergeStatements(c, version, now, failpoints.hit).apply(req, dst)
      CommitRows.insertCommit(
        conn,
        tableId,
        version,
        head.version,
        into,
        "merge",
        None,
        PyJson.dumps(summary),
        now,
        UndoStatements.newId())
      failpoints.hit("commit.before_end")
      version
    }
    MergeOutcome(Some(version), fastForward = false, base._2, sourceHead, counts, plan.conflicts.toSeq)
  }
}

object BranchMergeWriter {
  val Rounds = 5

  /** commit.py `_check_merge_heads`: the target's head is the one planned on, the source's head too. */
  private[catalog] def checkHeads(c: CommitContext, source: String, sourceHead: Long): Unit = {
    if (c.head != c.baseVersion) {
      throw WriteErrors.conflict(
        s"Cannot commit merge: branch '${c.branch}' moved from version ${c.baseVersion} to ${c.head} while the " +
          "merge was planned; nothing was committed")
    }
    val now = c.resolver.resolve(SnapshotSpec(branch = Some(source))).version
    if (now != sourceHead) {
      throw WriteErrors.conflict(
        s"Cannot commit merge: branch '$source' moved from version $sourceHead to $now while the merge was " +
          "planned; nothing was committed")
    }
  }

  /** merge.py `_conflict_message`. */
  def conflictMessage(source: String, into: String, conflicts: Seq[MergeConflictEntry]): String = {
    val shown = conflicts.take(5).map(_.describe).mkString("; ")
    val more = if (conflicts.size > 5) s" and ${conflicts.size - 5} more" else ""
    s"Cannot merge branch '$source' into '$into': ${conflicts.size} conflict(s): $shown$more; nothing was " +
      s"committed. Merge with strategy='ours' (keep '$into') or 'theirs' (take '$source'), or change one branch " +
      "and merge again (see MergeConflict.details)"
  }
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
