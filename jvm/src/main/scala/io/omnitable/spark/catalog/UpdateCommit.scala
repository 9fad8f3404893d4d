package io.omnitable.spark.catalog

import java.sql.SQLException

import scala.jdk.CollectionConverters._

import io.omnitable.spark.errors.{OmniTableAnalysisException, WriteErrors}

/**
 * The commit of one update from Spark (python/omnitable/dataops/update.py's `CommitRequest`):
 * `files` are the rewritten column files (one per touched fragment and column group among
 * `columns`, each carrying only updated columns, for every row of its fragment), planned at
 * `baseVersion` on `branch`; `rows` is how many rows were updated. `token` finds the commit
 * after a lost connection.
 */
final case class UpdateCommit(
    tableId: String,
    tableName: String,
    branch: String,
    baseVersion: Long,
    columns: Seq[String],
    rows: Long,
    files: Seq[WrittenFile],
    user: String = sys.props.getOrElse("user.name", ""),
    token: String = java.util.UUID.randomUUID().toString.replace("-", ""),
    engine: String = "spark-jvm")

/**
 * Commits an [[UpdateCommit]] with Python's rules (python/omnitable/catalog/commit.py: `_validate`
 * for new files of existing fragments): the fragments are still visible, the columns still active
 * with the ids the files were written for, and, when the branch moved since the base, no commit
 * after it wrote or removed a file carrying one of the same (fragment, column) cells
 * (`_check_cell_conflicts`). A rewritten feature output keeps the feature version of the file it
 * replaces and records lineage with engine `update` (its dependents become stale, as in Python).
 */
private[catalog] final class UpdateCommitter(w: CatalogWriter) {

  def commit(c: UpdateCommit): Long =
    try w.withWrite(s"table '${c.tableName}'")(conn => apply(conn, c))
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        val found =
          try w.withWrite("the commit token")(conn =>
              Jdbc.query(conn, CommitSql("find_commit"), c.tableId, c.token)(_.getLong(1)).headOption)
          catch { case scala.util.control.NonFatal(_) => None }
        found.getOrElse(throw WriteErrors.outcomeUnknown(s"the update of table '${c.tableName}'", e.getCause))
    }

  private def apply(conn: Jdbc.Conn, c: UpdateCommit): Long = {
    w.lockTable(conn, c.tableId)
    val table = Jdbc.query(conn, CommitSql("table_row"), c.tableId) { rs =>
      TableEntry(rs.getString(1), rs.getString(2), rs.getString(3), Map.empty)
    }.headOption.getOrElse(throw WriteErrors.dropped("update", c.tableId))
    val snap = new SnapshotResolver(conn, table, w.display).resolve(SnapshotSpec(branch = Some(c.branch)))
    val (head, segments) = (snap.version, snap.segments)
    CommitRows.checkBase(c.branch, c.baseVersion, head)
    val prepared = prepare(conn, c, segments, head)
    val version = Jdbc.query(conn, CommitSql("next_version"), c.tableId)(_.getLong(1)).head
    w.hit("commit.before_insert")
    val now = w.commitTime(conn, c.tableId)
    insert(conn, c, version, prepared)
    val summary = CommitRows.summaryJson(Map(
      "columns" -> c.columns.asJava,
      "rows" -> c.rows,
      "fragments" -> c.files.map(_.fragmentId).distinct.size,
      "files" -> c.files.size,
      "user" -> c.user,
      "engine" -> c.engine
    ))
    CommitRows.insertCommit(conn, c.tableId, version, head, c.branch, "update", None, summary, now, c.token)
    w.hit("commit.before_end")
    version
  }

  /**
   * Checks `c`'s files against the head (in the commit's transaction); what [[insert]] needs:
   * name → (column id, feature) of the active columns, and the feature versions the files keep.
   */
  def prepare(conn: Jdbc.Conn, c: UpdateCommit, segments: Seq[Segment], head: Long): UpdateCommitter.Prepared = {
    val columns = activeColumns(conn, c, segments)
    checkFragmentsVisible(conn, c, segments)
    if (head != c.baseVersion) checkCells(conn, c)
    UpdateCommitter.Prepared(columns, featureVersions(conn, c, segments, columns))
  }

  /** Inserts `c`'s files (their column sets) and the lineage of rewritten feature outputs as of `version`. */
  def insert(conn: Jdbc.Conn, c: UpdateCommit, version: Long, p: UpdateCommitter.Prepared): Unit = {
    val sets = c.files.map { f =>
      val ids = f.stats.map { case (n, _) => p.columns(n)._1 }
      f -> CatalogWriter.ColumnSet(ids.sorted, ids.flatMap(id => p.versions.get((f.fragmentId, id)).map(id -> _)).toMap)
    }
    w.insertFiles(conn, c.tableId, c.branch, version, sets, p.columns.map { case (n, (id, _)) => n -> id })
    w.hit("commit.mid_insert")
    insertLineage(conn, c, sets, p.columns)
  }

  /** Name → (column id, feature) of the active columns at the head; the files' columns must be among them. */
  private def activeColumns(conn: Jdbc.Conn, c: UpdateCommit, segments: Seq[Segment])
      : Map[String, (Int, Option[String])] = {
    val (vis, params) = Jdbc.visible("c", "columns", segments)
    val sql = "SELECT name, column_id, state, feature FROM columns c WHERE c.table_id = ? AND " + vis
    val active = Jdbc.query(conn, sql, (c.tableId +: params): _*) { rs =>
      (rs.getString(1), rs.getInt(2), rs.getString(3), Option(rs.getString(4)))
    }.filter(_._3 == "active").map(r => r._1 -> (r._2, r._4)).toMap
    CommitRows.checkColumnBindings(
      "update",
      c.files,
      active.map { case (n, (id, _)) => n -> id },
      "Re-plan and run again.")
    active
  }

  /** The fragments the files belong to are still visible (commit.py `_check_still_visible`). */
  private def checkFragmentsVisible(conn: Jdbc.Conn, c: UpdateCommit, segments: Seq[Segment]): Unit = {
    val wanted = c.files.map(_.fragmentId).distinct.sorted
    val live = wanted.grouped(500).flatMap { chunk =>
      val (vis, params) = Jdbc.visible("f", "fragments", segments)
      val (in, ps) = Jdbc.in("f.fragment_id", chunk)
      val sql = CommitSql("visible_fragments").replace("{vis}", vis).replace("{in}", in)
      Jdbc.query(conn, sql, (Seq(c.tableId) ++ params ++ ps): _*)(_.getString(1))
    }.toSet
    val gone = wanted.filterNot(live.contains)
    if (gone.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit update: ${gone.size} fragment(s) were removed by a concurrent commit (batch " +
          s"replaced or compacted), e.g. ${gone.head}; retry the operation")
    }
  }

  /** No commit after the base wrote a cell this update writes (commit.py `_check_cell_conflicts`). */
  private def checkCells(conn: Jdbc.Conn, c: UpdateCommit): Unit = {
    val ours = c.files.groupBy(_.fragmentId).map { case (f, fs) => f -> fs.flatMap(_.stats.map(_._1)).toSet }
    val base = Long.box(c.baseVersion)
    val conflicts = ours.keys.toSeq.sorted.grouped(500).flatMap { chunk =>
      val (in, ps) = Jdbc.in("fi.fragment_id", chunk)
      val params = Seq[AnyRef](c.tableId, c.branch, base, base, c.branch, base) ++ ps
      Jdbc.query(conn, CommitSql("cell_writes_since").replace("{in}", in), params: _*) { rs =>
        (rs.getString(1), rs.getString(2))
      }.filter { case (f, n) => ours(f).contains(n) }
    }.toSeq.distinct.sorted
    if (conflicts.nonEmpty) {
      val cols = conflicts.map(_._2).distinct.sorted
      throw WriteErrors.conflict(
        s"Cannot commit update: a concurrent commit (after version ${c.baseVersion}) wrote column(s) " +
          s"${cols.mkString(", ")} in ${conflicts.map(_._1).distinct.size} of the same fragment(s); nothing " +
          "was committed. Re-run the operation on the new version.")
    }
  }

  /**
   * (fragment, column id) → the feature version of the file providing that feature output at the
   * head (the newest visible file carrying it): the rewritten file keeps it (update.py `rewrite_file`).
   */
  private def featureVersions(
      conn: Jdbc.Conn,
      c: UpdateCommit,
      segments: Seq[Segment],
      columns: Map[String, (Int, Option[String])]): Map[(String, Int), String] = {
    val features = c.files.flatMap(_.stats.map(_._1)).distinct.filter(n => columns(n)._2.isDefined)
      .map(n => columns(n)._1).toSet
    if (features.isEmpty) return Map.empty
    val best = scala.collection.mutable.HashMap.empty[(String, Int), (Long, String, Option[String])]
    c.files.map(_.fragmentId).distinct.sorted.grouped(500).foreach { chunk =>
      val (vis, params) = Jdbc.visible("fi", "files", segments)
      val (in, ps) = Jdbc.in("fi.fragment_id", chunk)
      val sql = CommitSql("file_feature_versions").replace("{vis}", vis).replace("{in}", in)
      Jdbc.foreach(conn, sql, (Seq(c.tableId) ++ params ++ ps): _*) { rs =>
        val key = (rs.getString(1), rs.getInt(2))
        val row = (rs.getLong(4), rs.getString(5), Option(rs.getString(3)))
        if (features.contains(key._2) && best.get(key).forall(b => b._1 < row._1 || (b._1 == row._1 && b._2 < row._2)))
          best(key) = row
      }
    }
    best.collect { case (k, (_, _, Some(v))) => k -> v }.toMap
  }

  /** Lineage of the rewritten feature outputs: engine `update`, no inputs (update.py `rewrite_lineage`). */
  private def insertLineage(
      conn: Jdbc.Conn,
      c: UpdateCommit,
      sets: Seq[(WrittenFile, CatalogWriter.ColumnSet)],
      columns: Map[String, (Int, Option[String])]): Unit = w.batch(
    conn,
    CommitSql("insert_lineage"),
    for {
      (f, set) <- sets
      (name, _) <- f.stats
      (id, feature) = columns(name)
      feat <- feature.toSeq
    } yield Seq[AnyRef](
      c.tableId,
      f.fileId,
      Int.box(id),
      feat,
      set.featureVersions.getOrElse(id, ""),
      "[]",
      "",
      "update",
      Int.box(0))
  )
}

private[catalog] object UpdateCommitter {

  /** What the checks found: the active columns (name → (id, feature)) and the kept feature versions. */
  final case class Prepared(columns: Map[String, (Int, Option[String])], versions: Map[(String, Int), String])
}
