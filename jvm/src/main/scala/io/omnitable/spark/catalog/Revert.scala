package io.omnitable.spark.catalog

import io.omnitable.spark.errors.{OmniTableCommitException, ProcedureErrors, WriteErrors}

/**
 * rollback.py `apply_revert` and commit.py `_check_revert`: undo exactly one commit on a
 * branch, keeping every later one, with Python's checks and messages.
 */
private[catalog] object Revert {

  private val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  /** commit.py `_check_revert`: the commit exists on this branch's history, changed data, was not reverted already. */
  def check(c: CommitContext, k: Long): Unit = {
    val name = c.entry.name
    val op =
      Jdbc.query(c.conn, "SELECT op FROM commits WHERE table_id = ? AND version = ?", c.entry.tableId, Long.box(k))(
        _.getString(1)).headOption.getOrElse(throw ProcedureErrors.notFound(
        s"Cannot revert version $k of table '$name': no such version; see Table.history()"))
    c.checkOnBranch(k)
    if (op == "create") {
      throw ProcedureErrors.invalidOperation(
        s"Cannot revert version $k of table '$name': it created the table; drop the table instead")
    }
    Jdbc.query(
      c.conn,
      "SELECT summary FROM commits WHERE table_id = ? AND op = 'revert' AND version > ?",
      c.entry.tableId,
      Long.box(k))(_.getString(1)).foreach { raw =>
      val r = Json.readTree(raw).get("reverted")
      if (r != null && r.isIntegralNumber && r.asLong() == k) {
        throw ProcedureErrors.invalidOperation(s"Cannot revert version $k of table '$name': it was reverted already")
      }
    }
  }

  /** The rows of the revert of commit `reverted` as the new `version`; counts and stale features for the summary. */
  def apply(
      c: CommitContext,
      reverted: Long,
      version: Long,
      dependents: String,
      hit: String => Unit): Map[String, Any] = {
    val t = c.entry.tableId
    val parent = Jdbc.query(
      c.conn,
      "SELECT parent_version FROM commits WHERE table_id = ? AND version = ?",
      t,
      Long.box(reverted))(_.getLong(1)).head
    def at(v: Long): UndoSnapshot =
      UndoSnapshot.load(c.conn, t, c.resolver.resolve(SnapshotSpec(version = Some(v))).segments)
    val before = at(parent)
    val diff = new RevertDiff(before, at(reverted), UndoSnapshot.load(c.conn, t, c.segments), reverted, c.entry.name)
    diff.checkConflicts()
    val readers = diff.dependents(c.conn, t).toSeq.sorted
    if (readers.nonEmpty && dependents == "fail") {
      throw WriteErrors.conflict(
        s"Cannot revert version $reverted of table '${c.entry.name}': later backfills read what it wrote: " +
          s"feature(s) ${readers.mkString(", ")}; nothing was committed. Pass dependents='stale' to revert " +
          s"anyway and leave them stale (then Table.backfill(${readers.map(r => s"'$r'").mkString("[", ", ", "]")}) " +
          "recomputes them), or revert those commits first.")
    }
    val s = new UndoStatements(c.conn, t, c.branch, version, c.segments)
    val counts = diff.apply(s, hit)
    unregister(s, reverted, before.segments, c.segments)
    counts + ("stale" -> readers)
  }

  /** Feature versions registered by `reverted` and still current give way to those current at its parent. */
  private def unregister(s: UndoStatements, reverted: Long, parent: Seq[Segment], head: Seq[Segment]): Unit = {
    val atParent = s.currentFeatures(parent)
    s.currentFeatures(head).toSeq.sortBy(_._1).foreach { case (name, (registered, _)) =>
      if (registered == reverted) atParent.get(name).foreach(p => s.makeCurrent(name, p._2))
    }
  }
}

/** What commit `reverted` changed (`before` → `after`), checked against `head` (rollback.py `_Diff`). */
private[catalog] final class RevertDiff(
    before: UndoSnapshot,
    after: UndoSnapshot,
    head: UndoSnapshot,
    reverted: Long,
    tableName: String) {
  import Rollback.gone

  private val filesBefore = before.allFiles.map(f => f.fileId -> f).toMap
  private val filesAfter = after.allFiles.map(f => f.fileId -> f).toMap
  private val filesHead = head.allFiles.map(_.fileId).toSet
  private val addedFiles = filesAfter.keySet -- filesBefore.keySet
  private val removedFiles = filesBefore.keySet -- filesAfter.keySet

  private def conflict(what: String): OmniTableCommitException = WriteErrors.conflict(
    s"Cannot revert version $reverted of table '$tableName': $what after it; nothing was committed. " +
      "Revert the later commit first, or roll back.")

  /** Everything the commit changed is still as it left it at the head. */
  def checkConflicts(): Unit = {
    checkFragments()
    checkFiles()
    checkVectors()
    val (colsAfter, colsHead) = (after.columnRows, head.columnRows)
    changedColumns.toSeq.sorted.foreach { cid =>
      if (colsHead.get(cid) != colsAfter.get(cid)) throw conflict(s"column id $cid was renamed, retired or replaced")
    }
    val mine = after.batches.map { case (id, name) => name -> id }.toMap
    val afterIds = after.batchIds.toSet
    val goneNames = before.batches.filterNot(b => afterIds.contains(b._1)).map(_._2).toSet
    val taken =
      head.batches.collect { case (id, name) if goneNames.contains(name) && !mine.get(name).contains(id) => name }
        .sorted
    if (taken.nonEmpty) throw conflict(s"batch(es) ${taken.mkString(", ")} were appended or replaced")
  }

  /** Column ids whose row differs between before and after (rollback.py `_changed`). */
  private def changedColumns: Set[Int] = {
    val (b, a) = (before.columnRows, after.columnRows)
    (b.keySet ++ a.keySet).filter(cid => b.get(cid) != a.get(cid))
  }

  private def checkFragments(): Unit = {
    val touched = addedFiles.map(filesAfter(_).fragmentId) ++ gone(after.fragmentIds, before.fragmentIds) ++
      vectorChanges
    val missing = (touched -- head.fragmentIds).toSeq.sorted
    if (missing.nonEmpty) {
      throw conflict(s"${missing.size} fragment(s) it changed were replaced or removed (e.g. ${missing.head})")
    }
  }

  private def checkFiles(): Unit = {
    val colIds = addedFiles.flatMap(filesAfter(_).columns.keys)
    for (fid <- addedFiles.map(filesAfter(_).fragmentId).toSeq.sorted) {
      val now = head.resolve(fid, colIds)
      after.resolve(fid, colIds).toSeq.sortBy(_._1).foreach { case (cid, mine) =>
        if (addedFiles.contains(mine.fileId) && !now.get(cid).exists(_.fileId == mine.fileId)) {
          throw conflict(s"column id $cid of fragment $fid was written again")
        }
      }
    }
  }

  /** Fragments whose deletion vector the commit changed. */
  private lazy val vectorChanges: Seq[String] =
    after.fragmentIds.filter(fid => after.deletions.get(fid) != before.deletions.get(fid))

  private def checkVectors(): Unit = vectorChanges.foreach { fid =>
    if (head.deletions.get(fid) != after.deletions.get(fid)) {
      throw conflict(s"rows of fragment $fid were deleted (or restored) again")
    }
  }

  /** Features whose files at the head read a file this commit added. */
  def dependents(conn: Jdbc.Conn, t: String): Set[String] = if (addedFiles.isEmpty) Set.empty
  else {
    val json = new com.fasterxml.jackson.databind.ObjectMapper()
    Jdbc.query(conn, "SELECT file_id, feature, inputs FROM lineage WHERE table_id = ?", t) { rs =>
      (rs.getString(1), rs.getString(2), rs.getString(3))
    }.collect {
      case (fileId, feature, inputs)
          if filesHead.contains(fileId) && !addedFiles.contains(fileId) &&
            (0 until json.readTree(inputs).size()).exists { i =>
              val id = json.readTree(inputs).get(i).get("file_id")
              id != null && addedFiles.contains(id.asText())
            } =>
        feature
    }.toSet
  }

  def apply(s: UndoStatements, hit: String => Unit): Map[String, Any] = {
    val beforeCols = before.columnRows
    changedColumns.toSeq.sorted.foreach { cid =>
      s.remove("columns", "column_id", Seq(Int.box(cid)))
      beforeCols.get(cid).foreach(row => s.copyColumn(cid, row._1))
    }
    val headBatches = head.batchIds.toSet
    s.remove("batches", "batch_id", gone(after.batchIds, before.batchIds).filter(headBatches.contains))
    val batchIds = s.copyRows("batches", "batch_id", gone(before.batchIds, after.batchIds))
    val addedFrags = gone(after.fragmentIds, before.fragmentIds)
    s.remove("fragments", "fragment_id", addedFrags)
    s.removeByFragment(addedFrags)
    hit("commit.mid_insert")
    val fragIds = s.copyRows(
      "fragments",
      "fragment_id",
      gone(before.fragmentIds, after.fragmentIds),
      Map("batch_id" -> batchIds))
    s.remove("files", "file_id", (addedFiles & filesHead).toSeq.sorted)
    val copies = before.providers.filter { case (f, _) => removedFiles.contains(f) }
    val files = s.copyFiles(filesBefore, copies, fragIds)
    val vectors = this.vectors(s, fragIds, batchIds)
    Map("batches" -> batchIds.size, "fragments" -> fragIds.size, "files" -> files, "vectors" -> vectors)
  }

  private def vectors(s: UndoStatements, fragIds: Map[String, String], batchIds: Map[String, String]): Int = {
    val back = vectorChanges.flatMap { fid =>
      after.deletions.get(fid).foreach(v => s.remove("deletion_vectors", "vector_id", Seq(v)))
      before.deletions.get(fid)
    } ++ before.fragmentIds.filter(fragIds.contains).flatMap(before.deletions.get)
    s.copyRows("deletion_vectors", "vector_id", back, Map("fragment_id" -> fragIds, "batch_id" -> batchIds))
    back.size
  }
}
