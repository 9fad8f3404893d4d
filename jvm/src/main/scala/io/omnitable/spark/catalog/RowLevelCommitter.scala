package io.omnitable.spark.catalog

import io.omnitable.spark.errors.WriteErrors

/**
 * The rules of one row-level commit inside [[CatalogWriter]]'s transaction, as
 * python/omnitable/catalog/commit.py applies them to a `CommitRequest` with `deletions` (and
 * `expected_providers` for its read set): the touched fragments are still visible, every new
 * vector replaces exactly the vector its fragment has at the head (a concurrent delete of the
 * same fragment conflicts), and, when commits landed since the base version, no file the
 * statement read was replaced. Then the replaced vectors end (on a branch, inherited ones through
 * `removals`), the new ones are inserted, and the commit row and branch head are written. A
 * joined append (a MERGE's inserted batch) is checked and inserted with the append's rules
 * ([[CatalogWriter.checkJoinedAppend]]) in the same transaction and version, with its run
 * (`c.run`) recorded ended. An upsert's `keysChecked` version is checked as Python's
 * `_check_keys` ([[CatalogWriter.checkKeys]]).
 */
private[catalog] final class RowLevelCommitter(w: CatalogWriter, conn: Jdbc.Conn, c: RowLevelCommit) {

  private val Chunk = 500

  def apply(): Long = {
    w.lockTable(conn, c.tableId)
    val table = Jdbc.query(conn, CommitSql("table_row"), c.tableId) { rs =>
      TableEntry(rs.getString(1), rs.getString(2), rs.getString(3), Map.empty)
    }.headOption.getOrElse(throw WriteErrors.dropped(c.op, c.tableId))
    val resolver = new SnapshotResolver(conn, table, w.display)
    val snap = resolver.resolve(SnapshotSpec(branch = Some(c.branch)))
    val (head, segments) = (snap.version, snap.segments)
    CommitRows.checkBase(c.branch, c.baseVersion, head)
    if (c.deletions.map(_.fragmentId).distinct.size != c.deletions.size) {
      throw new IllegalStateException(s"Cannot commit ${c.op}: two deletion vectors for one fragment")
    }
    checkStillVisible(segments)
    if (head != c.baseVersion && c.readColumns.nonEmpty) {
      checkReadSet(
        resolver.resolve(SnapshotSpec(version = Some(c.baseVersion), branch = Some(c.branch))).segments,
        segments)
    }
    checkDeletions(segments)
    val updates = new UpdateCommitter(w)
    val updated = UpdateCommit(c.tableId, c.tableName, c.branch, c.baseVersion, c.updatedColumns, 0L, c.files)
    val prepared = if (c.files.nonEmpty) Some(updates.prepare(conn, updated, segments, head)) else None
    val appended = c.append.map(a => a -> w.checkJoinedAppend(conn, a, segments, head))
    c.keysChecked.foreach(since => CatalogWriter.checkKeys(conn, c.tableId, c.branch, c.op, since, head))
    val version = Jdbc.query(conn, CommitSql("next_version"), c.tableId)(_.getLong(1)).head
    w.hit("commit.before_insert")
    val now = w.commitTime(conn, c.tableId)
    prepared.foreach(p => updates.insert(conn, updated, version, p))
    appended.foreach { case (a, ids) => w.insertJoinedAppend(conn, a, version, ids, now) }
    endVectors(version, segments)
    w.hit("commit.mid_insert")
    w.batch(
      conn,
      CommitSql("insert_deletion_vector"),
      c.deletions.map { d =>
        Seq[AnyRef](
          c.tableId,
          java.util.UUID.randomUUID().toString.replace("-", ""),
          d.fragmentId,
          d.batchId,
          Long.box(d.deletedCount),
          d.vector,
          c.branch,
          Long.box(version))
      }
    )
    val summary = CommitRows.summaryJson(c.summary + ("engine" -> c.engine))
    c.run.foreach(r => w.insertRun(conn, r.runId, c.tableId, "ingest", r.plan, r.startedAt))
    CommitRows.insertCommit(conn, c.tableId, version, head, c.branch, c.op, c.run.map(_.runId), summary, now, c.token)
    c.run.foreach(r => w.endRun(conn, r.runId, "succeeded", r.metrics + ("version" -> version), None))
    w.hit("commit.before_end")
    version
  }

  /** The ids among `ids` that statement `name` (an `{in}` on `column`) finds visible in `segments`. */
  private def chunked[T](
      name: String,
      alias: String,
      kind: String,
      column: String,
      ids: Seq[String],
      segments: Seq[Segment])(
      read: java.sql.ResultSet => T): Seq[T] =
    ids.distinct.sorted.grouped(Chunk).flatMap { chunk =>
      val (vis, params) = Jdbc.visible(alias, kind, segments)
      val (in, inParams) = Jdbc.in(s"$alias.$column", chunk)
      Jdbc.query(
        conn,
        CommitSql(name).replace("{vis}", vis).replace("{in}", in),
        (Seq(c.tableId) ++ params ++ inParams): _*)(read)
    }.toSeq

  /** The touched fragments are still visible at the head (commit.py `_check_still_visible`). */
  private def checkStillVisible(segments: Seq[Segment]): Unit = {
    val ids = c.deletions.map(_.fragmentId)
    val live = chunked("fragments_of_batches", "f", "fragments", "fragment_id", ids, segments)(_.getString(1)).toSet
    val gone = ids.filterNot(live.contains).sorted
    if (gone.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit ${c.op}: ${gone.size} fragment(s) were removed by a concurrent commit (batch " +
          s"replaced or compacted), e.g. ${gone.head}; retry the operation")
    }
  }

  /** Each vector replaces the one its fragment has at the head (commit.py `_check_deletions`). */
  private def checkDeletions(segments: Seq[Segment]): Unit = {
    val head =
      chunked("head_deletion_vectors", "d", "deletion_vectors", "fragment_id", c.deletions.map(_.fragmentId), segments) {
        rs => rs.getString(1) -> rs.getString(2)
      }.toMap
    val changed = c.deletions.filter(d => head.get(d.fragmentId) != d.replaces).map(_.fragmentId).sorted
    if (changed.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit ${c.op}: a concurrent commit (after version ${c.baseVersion}) deleted rows of " +
          s"${changed.size} of the same fragment(s), e.g. ${changed.head}; nothing was committed. Re-run " +
          "the operation on the new version.")
    }
  }

  /**
   * Every fragment live at the base keeps, for every column the statement read, the file that
   * provided it then (commit.py `_check_expected_providers`, role "input"; a removed fragment
   * provides nothing, so a concurrent replace of its batch conflicts too).
   */
  private def checkReadSet(base: Seq[Segment], head: Seq[Segment]): Unit = {
    val (vis, params) = Jdbc.visible("f", "fragments", base)
    val fragments = Jdbc.query(
      conn,
      CommitSql("fragments_of_batches").replace("{vis}", vis).replace("{in}", "1 = 1"),
      (c.tableId +: params): _*)(_.getString(1))
    val before = providers(fragments, base)
    val now = providers(fragments, head)
    val stale = before.keySet.union(now.keySet).filter(k => before.get(k) != now.get(k)).toSeq.sorted
    if (stale.nonEmpty) {
      val (hv, hp) = Jdbc.visible("f", "fragments", head)
      val live = Jdbc
        .query(
          conn,
          CommitSql("fragments_of_batches").replace("{vis}", hv).replace("{in}", "1 = 1"),
          (c.tableId +: hp): _*)(_.getString(1))
        .toSet
      val gone = stale.map(_._1).distinct.filterNot(live.contains)
      if (gone.nonEmpty) {
        throw WriteErrors.conflict(
          s"Cannot commit ${c.op}: ${gone.size} fragment(s) it read were removed by a concurrent commit " +
            s"(batch replaced or compacted), e.g. ${gone.head}; nothing was committed. Re-run the operation " +
            "on the new version.")
      }
      val names = c.readColumns.map(_.swap)
      val cols = stale.map(_._2).distinct.sorted.map(names).mkString(", ")
      throw WriteErrors.conflict(
        s"Cannot commit ${c.op}: its input column(s) $cols were recomputed in ${stale.map(_._1).distinct.size} " +
          s"fragment(s) (e.g. ${stale.head._1}) by a concurrent commit after it planned or read them; " +
          "nothing of this chunk was committed. Re-plan and run again.")
    }
  }

  /** (fragment, read column id) → the visible file providing it: the newest (commit.py `_head_providers`). */
  private def providers(fragments: Seq[String], segments: Seq[Segment]): Map[(String, Int), String] = {
    val wanted = c.readColumns.values.toSet
    val best = scala.collection.mutable.HashMap.empty[(String, Int), (Long, String)]
    chunked("column_providers", "fi", "files", "fragment_id", fragments, segments) { rs =>
      ((rs.getString(1), rs.getInt(2)), rs.getString(3), rs.getLong(4))
    }.foreach { case (key, file, added) =>
      if (wanted.contains(key._2) && best.get(key).forall(_._1 < added)) best(key) = (added, file)
    }
    best.map { case (k, (_, f)) => k -> f }.toMap
  }

  /** End the replaced vectors as of `version` (removals.py `end_rows`: inherited ones in `removals`). */
  private def endVectors(version: Long, segments: Seq[Segment]): Unit = {
    val replaced = c.deletions.flatMap(_.replaces).sorted
    w.batch(
      conn,
      CommitSql("end_rows").replace("{kind}", "deletion_vectors").replace("{by}", "vector_id"),
      replaced.map(v => Seq[AnyRef](Long.box(version), c.tableId, v, c.branch))
    )
    if (segments.size > 1) replaced.grouped(Chunk).foreach { chunk =>
      val (vis, params) = Jdbc.visible("x", "deletion_vectors", segments)
      val (in, inParams) = Jdbc.in("x.vector_id", chunk)
      val rowId = Jdbc.RemovableId("deletion_vectors").format("x")
      val sql = CommitSql("insert_removals").replace("{kind}", "deletion_vectors").replace("{row_id}", rowId)
        .replace("{vis}", vis).replace("{in}", in)
      val k = "deletion_vectors"
      w.update(
        conn,
        sql,
        (Seq[AnyRef](k, c.branch, Long.box(version), c.tableId, c.branch) ++ params ++ inParams ++
          Seq[AnyRef](k, c.branch)): _*)
    }
  }
}
