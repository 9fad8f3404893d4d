package io.omnitable.spark.catalog

import java.sql.SQLException

import scala.util.Using
import scala.util.control.NonFatal

import io.omnitable.spark.errors.{ProcedureErrors, WriteErrors}

/** A catalog-only commit's outcome: the new version, its parent (the head it replaced), op and summary as stored. */
final case class UndoOutcome(version: Long, parentVersion: Long, op: String, summary: String)

/**
 * The JVM's rollback (python/omnitable/dataops/rollback.py, catalog/rollback.py
 * `apply_rollback`, commit.py `_check_rollback`): one commit that makes an older version's
 * state the head of a branch, with the same validation, messages, rows and commit row as
 * Python's, under the table's commit lock (docs/catalog.md, "Commits and concurrency").
 * Failpoints: `rollback.before_commit` (head read, lock not taken), `commit.before_insert`,
 * `commit.mid_insert`, `commit.before_end` (inside the transaction).
 */
final class UndoWriter(reader: CatalogReader, failpoints: Failpoints = Failpoints(None)) {

  private def display: String = reader.display

  /** Commit the state of `target` of `branch` as its new head (`why`: recorded in the summary). */
  def rollback(table: String, branch: String, target: Long, why: Option[String]): UndoOutcome = {
    if (target < 0) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot roll back table '$table': version must be an integer >= 0, got $target")
    }
    val (tableId, head) = headOf(table, branch)
    val summary = Map[String, Any]("to_version" -> target, "discarded" -> (head - target)) ++ why.map("why" -> _)
    failpoints.hit("rollback.before_commit")
    commit(tableId, branch, "rollback", head, summary) { (c, version) =>
      checkRollback(c, target)
      val old = UndoSnapshot.load(c.conn, tableId, c.resolver.resolve(SnapshotSpec(version = Some(target))).segments)
      val now = UndoSnapshot.load(c.conn, tableId, c.segments)
      Rollback.apply(new UndoStatements(c.conn, tableId, branch, version, c.segments), old, now, hit)
    }
  }

  /**
   * Commit the inverse of commit `reverted` on `branch`, keeping every later commit
   * (python/omnitable/dataops/revert.py); `dependents`: `fail` or `stale`. A keyed table's
   * revert checks the keys of the rows it brings back in the key index first ([[RevertKeys]]) and
   * commits only when no rows changed since the version checked (else checks again, 20 rounds).
   */
  def revert(table: String, branch: String, reverted: Long, dependents: String, why: Option[String]): UndoOutcome = {
    if (reverted < 0) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot revert a version of table '$table': give an integer >= 0, got $reverted")
    }
    if (!UndoWriter.Dependents.contains(dependents)) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot revert version $reverted of table '$table': dependents must be one of " +
          s"${UndoWriter.Dependents.mkString(", ")}, got '$dependents'")
    }
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch)))
    val summary = Map[String, Any]("reverted" -> reverted) ++ why.map("why" -> _)
    val (tableId, head) = (snap.table.tableId, snap.snapshot.version)
    def revertAt(keysChecked: Option[Long]): UndoOutcome = {
      failpoints.hit("revert.before_commit")
      commit(tableId, branch, "revert", head, summary) { (c, version) =>
        keysChecked.foreach(since => CatalogWriter.checkKeys(c.conn, tableId, branch, "revert", since, c.head))
        Revert.check(c, reverted)
        Revert.apply(c, reverted, version, dependents, hit)
      }
    }
    snap.table.properties.get("table.key") match {
      case None => revertAt(None)
      case Some(raw) => // the rows it brings back must not duplicate a key (revert.py, 20 rounds)
        val key = RevertKeys.columns(raw)
        val conf = org.apache.spark.sql.SparkSession.active.sessionState.newHadoopConf()
        var checked = head
        var done: Option[UndoOutcome] = None
        var round = 0
        while (done.isEmpty && round < UndoWriter.KeyRounds) {
          RevertKeys.check(reader, table, tableId, snap.tableUri, branch, key, reverted, checked, conf)
          try done = Some(revertAt(Some(checked)))
          catch { case e: KeysNotChecked => checked = e.head }
          round += 1
        }
        done.getOrElse(throw WriteErrors.conflict(
          s"Cannot revert version $reverted of table '$table': other commits kept changing rows while the keys it " +
            "brings back were checked; retry"))
    }
  }

  /** (table id, head of `branch`), read before the commit as Python's `ctx.head_version()`. */
  private[catalog] def headOf(table: String, branch: String): (String, Long) = {
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch)))
    (snap.table.tableId, snap.snapshot.version)
  }

  /** commit.py `_check_rollback`: nothing committed since the head the caller saw, an older version of the branch. */
  private def checkRollback(c: CommitContext, target: Long): Unit = {
    val name = c.entry.name
    if (c.baseVersion != c.head) {
      throw WriteErrors.conflict(
        s"Cannot roll back table '$name' to version $target: version ${c.head} was committed after version " +
          s"${c.baseVersion}, which the rollback was asked on; nothing was committed. Look at " +
          "Table.history() and run the rollback again.")
    }
    if (target >= c.head) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot roll back table '$name' to version $target: the head of branch '${c.branch}' is version " +
          s"${c.head}; give an earlier version")
    }
    c.checkOnBranch(target)
  }

  private def hit(name: String): Unit = failpoints.hit(name)

  /**
   * One commit of `op` on `branch` of table `tableId` read at `baseVersion` (commit.py `commit`
   * for a request that adds nothing itself): `body` checks and writes the rows and returns counts
   * for the summary; then the commit row and the branch's ref. Returns the outcome.
   */
  private[catalog] def commit(
      tableId: String,
      branch: String,
      op: String,
      baseVersion: Long,
      summary: Map[String, Any])(
      body: (CommitContext, Long) => Map[String, Any]): UndoOutcome = withLock(tableId, op) { (conn, entry) =>
    val resolver = new SnapshotResolver(conn, entry, display)
    val head = resolver.resolve(SnapshotSpec(branch = Some(branch)))
    val c = CommitContext(conn, entry, resolver, branch, baseVersion, head.version, head.segments)
    c.checkReadThisBranch(op)
    if (baseVersion > head.version) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot commit on branch '$branch': base version $baseVersion is newer than its head ${head.version}")
    }
    val version = Jdbc.query(conn, CommitSql("next_version"), tableId)(_.getLong(1)).head
    hit("commit.before_insert")
    val now = CommitRows.commitTime(conn, tableId)
    val full = summary ++ body(c, version)
    val json = UndoWriter.pythonJson(full)
    CommitRows.insertCommit(conn, tableId, version, head.version, branch, op, None, json, now, UndoStatements.newId())
    hit("commit.before_end")
    UndoOutcome(version, head.version, op, json)
  }

  /**
   * One write transaction on table `tableId` under its commit lock (SQLite `BEGIN IMMEDIATE`,
   * PostgreSQL `SELECT … FOR UPDATE`), schema version checked; committed when `body` returns,
   * rolled back on any error. A table dropped since it was read: commit.py's NotFoundError.
   */
  private[catalog] def withLock[T](tableId: String, op: String)(body: (Jdbc.Conn, TableEntry) => T): T = {
    val sqlite = reader.address.isInstanceOf[SqliteAddress]
    val jdbc = RefWriter.openForWrite(reader.address, reader.env)
    val conn = Jdbc.Conn(jdbc, reader.queries)
    var open = false
    try {
      if (sqlite) execute(jdbc, "BEGIN IMMEDIATE")
      open = true
      reader.checkSchemaVersion(conn)
      if (!sqlite) Jdbc.query(conn, CommitSql("lock_table"), tableId)(_.getString(1))
      val entry = Jdbc.query(conn, "SELECT namespace, name FROM tables WHERE table_id = ?", tableId)(rs =>
        TableNames.address(rs.getString(1), rs.getString(2))).headOption.flatMap(reader.findTable(conn, _))
        .filter(_.tableId == tableId).getOrElse(throw WriteErrors.dropped(op, tableId))
      val out = body(conn, entry)
      if (sqlite) execute(jdbc, "COMMIT") else jdbc.commit()
      open = false
      hit("commit.after_commit")
      out
    } catch {
      case e: SQLException => throw ProcedureErrors.catalogWriteFailed(display, s"commit $op", e)
    } finally {
      if (open) {
        try if (sqlite) execute(jdbc, "ROLLBACK") else jdbc.rollback()
        catch { case NonFatal(_) => }
      }
      jdbc.close()
    }
  }

  private def execute(jdbc: java.sql.Connection, sql: String): Unit =
    Using.resource(jdbc.createStatement())(_.execute(sql))
}

/** What a commit's checks and statements need: the locked transaction, the table, its branch head. */
private[catalog] final case class CommitContext(
    conn: Jdbc.Conn,
    entry: TableEntry,
    resolver: SnapshotResolver,
    branch: String,
    baseVersion: Long,
    head: Long,
    segments: Seq[Segment]) {

  def update(sql: String, params: AnyRef*): Int =
    Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      params.zipWithIndex.foreach {
        case (null, i) => st.setNull(i + 1, java.sql.Types.NULL)
        case (p, i) => st.setObject(i + 1, p)
      }
      st.executeUpdate()
    }

  /** The branch that committed `version`, if any commit has it. */
  def commitBranch(version: Long): Option[String] = Jdbc.query(
    conn,
    "SELECT branch FROM commits WHERE table_id = ? AND version = ?",
    entry.tableId,
    Long.box(version))(_.getString(1)).headOption

  /** commit.py `_check_read_this_branch`: a base read on a deleted branch of the same name is refused. */
  def checkReadThisBranch(op: String): Unit = if (segments.size > 1) {
    val owner = commitBranch(baseVersion)
    if (baseVersion < segments(1).upto || !segments.exists(s => owner.contains(s.branch) && baseVersion <= s.upto)) {
      throw ProcedureErrors.notFound(
        s"Cannot commit $op on branch '$branch' of table '${entry.name}': the branch this operation read at " +
          s"version $baseVersion was deleted (a branch of that name was created again since); nothing was committed")
    }
  }

  /** snapshot.py `segments_for(branch=..., version=...)`: `version` exists and is in this branch's history. */
  def checkOnBranch(version: Long): Unit = {
    val owner = commitBranch(version).getOrElse(throw ProcedureErrors.notFound(
      s"Cannot find version $version of table '${entry.name}'; see Table.history()"))
    if (!segments.exists(s => s.branch == owner && version <= s.upto)) {
      throw ProcedureErrors.notFound(s"Cannot find version $version in the history of branch '$branch'")
    }
    resolver.checkNotExpired(version, owner)
  }
}

/** rollback.py `apply_rollback`: the rows of a rollback from the target's and the head's snapshots. */
private[catalog] object Rollback {

  def gone(have: Seq[String], other: Seq[String]): Seq[String] = {
    val theirs = other.toSet
    have.filterNot(theirs.contains)
  }

  def apply(s: UndoStatements, old: UndoSnapshot, head: UndoSnapshot, hit: String => Unit): Map[String, Any] = {
    columns(s, old, head)
    val batchIds = s.copyRows("batches", "batch_id", gone(old.batchIds, head.batchIds))
    s.remove("batches", "batch_id", gone(head.batchIds, old.batchIds))
    val fragIds = s.copyRows(
      "fragments",
      "fragment_id",
      gone(old.fragmentIds, head.fragmentIds),
      Map("batch_id" -> batchIds))
    val removedFrags = gone(head.fragmentIds, old.fragmentIds)
    s.remove("fragments", "fragment_id", removedFrags)
    s.removeByFragment(removedFrags)
    hit("commit.mid_insert")
    val files = this.files(s, old, head, fragIds)
    val vectors = this.vectors(s, old, head, fragIds, batchIds)
    features(s, old.segments, head.segments)
    Map("batches" -> batchIds.size, "fragments" -> fragIds.size, "files" -> files, "vectors" -> vectors)
  }

  /** Each column's row at the target (retired ones too) is its row again. */
  private def columns(s: UndoStatements, old: UndoSnapshot, head: UndoSnapshot): Unit = {
    val atTarget = old.columns.map(c => c.columnId -> c.addedVersion).toMap
    val now = head.columns.map(c => c.columnId -> c.addedVersion).toMap
    head.columns.foreach { c =>
      if (!atTarget.get(c.columnId).contains(c.addedVersion)) s.remove("columns", "column_id", Seq(Int.box(c.columnId)))
    }
    old.columns.foreach(c =>
      if (!now.get(c.columnId).contains(c.addedVersion)) s.copyColumn(c.columnId, c.addedVersion))
  }

  /** The head's files the target lacks end; the target's providers the head lacks (or of a copied fragment) are copied. */
  private def files(s: UndoStatements, old: UndoSnapshot, head: UndoSnapshot, fragIds: Map[String, String]): Int = {
    val atTarget = old.allFiles.map(f => f.fileId -> f).toMap
    val now = head.allFiles.map(_.fileId).toSet
    s.remove("files", "file_id", (now -- atTarget.keySet).toSeq.sorted)
    val copies = old.providers.filter { case (fid, _) =>
      !now.contains(fid) || fragIds.contains(atTarget(fid).fragmentId)
    }
    s.copyFiles(atTarget, copies, fragIds)
  }

  /** Every fragment of the target gets its vector at the target back (none: none). */
  private def vectors(
      s: UndoStatements,
      old: UndoSnapshot,
      head: UndoSnapshot,
      fragIds: Map[String, String],
      batchIds: Map[String, String]): Int = {
    val changed = old.fragmentIds.flatMap { fid =>
      val before = old.deletions.get(fid)
      val after = head.deletions.get(fid)
      val copied = fragIds.contains(fid)
      if (copied || before != after) {
        if (!copied) after.foreach(v => s.remove("deletion_vectors", "vector_id", Seq(v)))
        before
      } else None
    }
    s.copyRows("deletion_vectors", "vector_id", changed, Map("fragment_id" -> fragIds, "batch_id" -> batchIds))
    changed.size
  }

  /** The version of each feature current at the target is current again. */
  private def features(s: UndoStatements, target: Seq[Segment], headSegments: Seq[Segment]): Unit = {
    val current = s.currentFeatures(headSegments)
    s.currentFeatures(target).toSeq.sortBy(_._1).foreach { case (name, (_, version)) =>
      if (!current.get(name).map(_._2).contains(version)) s.makeCurrent(name, version)
    }
  }
}

object UndoWriter {

  /** What a revert does when later backfills read what the commit wrote (revert.py `DEPENDENTS`). */
  val Dependents: Seq[String] = Seq("fail", "stale")

  /** Times a keyed revert checks its keys again when rows changed meanwhile (revert.py `_KEY_ROUNDS`). */
  val KeyRounds = 20

  /** `json.dumps(value, sort_keys=True)` of a commit summary ([[PyJson]]). */
  def pythonJson(value: Map[String, Any]): String = PyJson.dumps(value)
}
