package io.omnitable.spark.catalog

import java.sql.SQLException

import scala.collection.mutable

import io.omnitable.spark.errors.{OmniTableAnalysisException, ProcedureErrors, WriteErrors}

/** An input column's providing file (and its version) that a new file's values were computed from. */
final case class LineageInput(column: String, fileId: Option[String], version: Option[Long])

/** One new output file of a backfill: the feature, the file, its read set, the files it replaces. */
final case class BackfillFile(
    feature: FeatureDef,
    file: WrittenFile,
    inputs: Seq[LineageInput],
    replaces: Seq[String],
    errors: Int = 0)

/** What an operation relied on (commit.py `ExpectedProvider`): `fileId` provides `column` in `fragmentId`. */
final case class ExpectedFile(fragmentId: String, column: String, fileId: Option[String], role: String)

/**
 * One backfill commit (python/omnitable/exec/runner.py `_commit`): the step's files for existing
 * fragments with their lineage, planned at `baseVersion` on `branch`, in run `runId`.
 */
final case class BackfillCommit(
    tableId: String,
    branch: String,
    baseVersion: Long,
    runId: String,
    features: Seq[FeatureDef],
    files: Seq[BackfillFile],
    expected: Seq[ExpectedFile]) {

  /** runner.py `_commit`'s summary. */
  def summary: Map[String, Any] = Map(
    "features" -> features.map(_.id).sorted,
    "fragments" -> files.map(_.file.fragmentId).distinct.size,
    "rows" -> files.map(_.file.rowCount).sum,
    "errors" -> files.map(_.errors).sum
  )
}

/**
 * Commits a [[BackfillCommit]] with commit.py's rules for a backfill request, in its order: the
 * files' columns still exist, their fragments and the files they replace are still visible, when
 * the branch moved no concurrent commit wrote the same cells, the files are bound to the head's
 * column ids, the computed feature versions are current, and when the branch moved every file of
 * the read set and every planned target still provides its column. Failpoints: the commit's.
 */
final class BackfillCommitter(reader: CatalogReader, failpoints: Failpoints) {

  private val Op = "backfill"

  /**
   * Commit `c` atomically; the new version. A catalog connection lost during the commit: the
   * version its token finds, else [[WriteErrors.outcomeUnknown]] (the files must be kept).
   */
  def commit(c: BackfillCommit): Long = {
    val token = UndoStatements.newId()
    try apply(c, token)
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        new CatalogWriter(reader.address, reader.env).findCommit(c.tableId, token)
          .getOrElse(throw WriteErrors.outcomeUnknown(
            s"the backfill of ${c.features.map(_.id).mkString(", ")}",
            e.getCause))
    }
  }

  private def apply(c: BackfillCommit, token: String): Long =
    new UndoWriter(reader, failpoints).withLock(c.tableId, Op) { (conn, entry) =>
      val resolver = new SnapshotResolver(conn, entry, reader.display)
      val head = resolver.resolve(SnapshotSpec(branch = Some(c.branch)))
      val ctx = CommitContext(conn, entry, resolver, c.branch, c.baseVersion, head.version, head.segments)
      ctx.checkReadThisBranch(Op)
      if (c.baseVersion > head.version) {
        throw ProcedureErrors.invalidOperation(
          s"Cannot commit on branch '${c.branch}': base version ${c.baseVersion} is newer than its head ${head.version}")
      }
      val columns = validate(ctx, c)
      val version = Jdbc.query(conn, CommitSql("next_version"), c.tableId)(_.getLong(1)).head
      failpoints.hit("commit.before_insert")
      val now = CommitRows.commitTime(conn, c.tableId)
      insert(ctx, c, version, columns)
      CommitRows.insertCommit(
        conn,
        c.tableId,
        version,
        head.version,
        c.branch,
        Op,
        Some(c.runId),
        PyJson.dumps(c.summary),
        now,
        token)
      failpoints.hit("commit.before_end")
      version
    }

  /** commit.py `_validate` for this request; name → column id of the active columns at the head. */
  private def validate(ctx: CommitContext, c: BackfillCommit): Map[String, Int] = {
    val (vis, params) = Jdbc.visible("c", "columns", ctx.segments)
    val active = Jdbc.query(ctx.conn, CommitSql("visible_columns").replace("{vis}", vis), (c.tableId +: params): _*) {
      rs => (rs.getString(1), rs.getInt(2), rs.getString(4))
    }.filter(_._3 == "active").map(r => r._1 -> r._2).toMap
    for (f <- c.files; (name, _) <- f.file.stats if !active.contains(name))
      throw WriteErrors.conflict(
        s"Cannot commit $Op: column '$name' no longer exists (retired, renamed or replaced concurrently?)")
    checkStillVisible(ctx, c)
    val concurrent = ctx.head != c.baseVersion
    if (concurrent) checkCells(ctx, c)
    CommitRows.checkColumnBindings(Op, c.files.map(_.file), active, "Re-plan and run again.")
    checkFeatureVersions(ctx, c)
    if (concurrent) checkExpected(ctx, c, active)
    active
  }

  private def visibleIds(ctx: CommitContext, kind: String, idCol: String, ids: Seq[String]): Set[String] =
    ids.distinct.sorted.grouped(500).flatMap { chunk =>
      val (vis, params) = Jdbc.visible("x", kind, ctx.segments)
      val (in, ps) = Jdbc.in(s"x.$idCol", chunk)
      Jdbc.query(
        ctx.conn,
        s"SELECT x.$idCol FROM $kind x WHERE x.table_id = ? AND $vis AND $in",
        (Seq(ctx.entry.tableId) ++ params ++ ps): _*)(_.getString(1))
    }.toSet

  /** commit.py `_check_still_visible`. */
  private def checkStillVisible(ctx: CommitContext, c: BackfillCommit): Unit = {
    val frags = c.files.map(_.file.fragmentId).distinct
    val gone = frags.filterNot(visibleIds(ctx, "fragments", "fragment_id", frags).contains).sorted
    if (gone.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit $Op: ${gone.size} fragment(s) were removed by a concurrent commit (batch replaced or " +
          s"compacted), e.g. ${gone.head}; retry the operation")
    }
    val removed = c.files.flatMap(_.replaces).distinct
    if (removed.nonEmpty && visibleIds(ctx, "files", "file_id", removed).size != removed.size) {
      val n = removed.size - visibleIds(ctx, "files", "file_id", removed).size
      throw WriteErrors.conflict(
        s"Cannot commit $Op: $n file(s) it replaces were removed by a concurrent commit; retry the operation")
    }
  }

  /** commit.py `_check_cell_conflicts`: no commit after the base wrote or removed a cell this one writes. */
  private def checkCells(ctx: CommitContext, c: BackfillCommit): Unit = {
    val ours = mutable.HashMap.empty[String, mutable.Set[String]]
    c.files.foreach(f => ours.getOrElseUpdate(f.file.fragmentId, mutable.Set.empty) ++= f.file.stats.map(_._1))
    c.files.flatMap(_.replaces).distinct.sorted.foreach { fid =>
      Jdbc.foreach(
        ctx.conn,
        "SELECT fi.fragment_id, c.name FROM files fi JOIN column_sets cs ON cs.table_id = fi.table_id AND cs.set_id " +
          "= fi.set_id JOIN columns c ON c.table_id = cs.table_id AND c.column_id = cs.column_id WHERE fi.table_id = ? " +
          "AND fi.file_id = ?",
        c.tableId,
        fid
      )(rs => ours.getOrElseUpdate(rs.getString(1), mutable.Set.empty) += rs.getString(2))
    }
    val base = Long.box(c.baseVersion)
    val conflicts = ours.keys.toSeq.sorted.grouped(500).flatMap { chunk =>
      val (in, ps) = Jdbc.in("fi.fragment_id", chunk)
      val params = Seq[AnyRef](c.tableId, c.branch, base, base, c.branch, base) ++ ps
      Jdbc.query(ctx.conn, CommitSql("cell_writes_since").replace("{in}", in), params: _*) { rs =>
        (rs.getString(1), rs.getString(2))
      }.filter { case (f, n) => ours(f).contains(n) }
    }.toSeq.distinct.sorted
    if (conflicts.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit $Op: a concurrent commit (after version ${c.baseVersion}) wrote column(s) " +
          s"${conflicts.map(_._2).distinct.sorted.mkString(", ")} in ${conflicts.map(_._1).distinct.size} of the same " +
          "fragment(s); nothing was committed. Re-run the operation on the new version.")
    }
  }

  /** commit.py `_check_feature_versions`: each computed version is still the feature's current one. */
  private def checkFeatureVersions(ctx: CommitContext, c: BackfillCommit): Unit = {
    val within = ctx.segments.map(_ => "(branch = ? AND registered_version <= ?)").mkString("(", " OR ", ")")
    val params = ctx.segments.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto)))
    val current = mutable.HashMap.empty[String, String]
    Jdbc.foreach(
      ctx.conn,
      s"SELECT name, version FROM features WHERE table_id = ? AND $within ORDER BY registered_version, name, version",
      (c.tableId +: params): _*)(rs => current(rs.getString(1)) = rs.getString(2))
    c.files.map(_.feature).distinctBy(_.name).sortBy(_.name).foreach { f =>
      val now = current.get(f.name)
      if (!now.contains(f.version)) {
        throw WriteErrors.conflict(
          s"Cannot commit $Op of ${f.id}: the current version of feature '${f.name}' is now ${now.getOrElse("(none)")} " +
            "(registered by a concurrent commit after the plan); nothing of this chunk was committed. Re-plan and run again.")
      }
    }
  }

  /** commit.py `_check_expected_providers`: the read set and the planned targets still hold at the head. */
  private def checkExpected(ctx: CommitContext, c: BackfillCommit, active: Map[String, Int]): Unit = {
    val best = mutable.HashMap.empty[(String, Int), (Long, String)]
    c.expected.map(_.fragmentId).distinct.sorted.grouped(500).foreach { chunk =>
      val (vis, params) = Jdbc.visible("fi", "files", ctx.segments)
      val (in, ps) = Jdbc.in("fi.fragment_id", chunk)
      val sql = CommitSql("column_providers").replace("{vis}", vis).replace("{in}", in)
      Jdbc.foreach(ctx.conn, sql, (Seq(c.tableId) ++ params ++ ps): _*) { rs =>
        val key = (rs.getString(1), rs.getInt(2))
        if (best.get(key).forall(_._1 < rs.getLong(4))) best(key) = (rs.getLong(4), rs.getString(3))
      }
    }
    val stale = c.expected.filter(e => best.get((e.fragmentId, active.getOrElse(e.column, -1))).map(_._2) != e.fileId)
    if (stale.nonEmpty) {
      val parts = Seq(
        "target" -> "the file(s) it patches or replaces for column(s) %s were replaced",
        "input" -> "its input column(s) %s were recomputed").flatMap { case (role, what) =>
        val mine = stale.filter(_.role == role)
        Option.when(mine.nonEmpty)(
          what.format(mine.map(_.column).distinct.sorted.mkString(", ")) +
            s" in ${mine.map(_.fragmentId).distinct.size} fragment(s) (e.g. ${mine.head.fragmentId})")
      }
      throw WriteErrors.conflict(
        s"Cannot commit $Op: ${parts.mkString(" and ")} by a concurrent commit after it planned or read them; " +
          "nothing of this chunk was committed. Re-plan and run again.")
    }
  }

  /** The files (run id, feature versions in their column sets), their lineage, the files they replace. */
  private def insert(ctx: CommitContext, c: BackfillCommit, version: Long, ids: Map[String, Int]): Unit = {
    val sets = c.files.map { f =>
      val cols = f.file.stats.map(_._1).map(ids)
      f.file -> CatalogWriter.ColumnSet(cols.sorted, cols.map(_ -> f.feature.version).toMap)
    }
    new CatalogWriter(reader.address, failpoints = failpoints)
      .insertFiles(ctx.conn, c.tableId, c.branch, version, sets, ids, Some(c.runId))
    failpoints.hit("commit.mid_insert")
    val rows = for {
      f <- c.files
      out <- f.feature.outputNames
    } yield {
      val inputs = f.inputs.map(i => Map("column" -> i.column, "file_id" -> i.fileId, "version" -> i.version))
      Seq[AnyRef](
        c.tableId,
        f.file.fileId,
        Int.box(ids(out)),
        f.feature.name,
        f.feature.version,
        PyJson.dumps(inputs),
        c.runId,
        "spark-sql",
        Int.box(f.errors))
    }
    rows.foreach(r => ctx.update(CommitSql("insert_lineage"), r: _*))
    new UndoStatements(ctx.conn, c.tableId, c.branch, version, ctx.segments)
      .remove("files", "file_id", c.files.flatMap(_.replaces).distinct)
  }
}
