package io.omnitable.spark.catalog

import scala.collection.mutable

import io.omnitable.spark.errors.{DdlErrors, ProcedureErrors, WriteErrors}

/** What registering a feature did: its inputs as stored, and the new table version (None: nothing changed). */
final case class RegisterOutcome(feature: FeatureDef, tableVersion: Option[Long])

/** A feature output column a registration adds (its group is the feature's name). */
private[catalog] final case class FeatureColumn(name: String, ddl: String, feature: String)

/**
 * The JVM's registration of a SQL feature (python/omnitable/features/registry.py `register` of
 * one `sql_feature`): the same validation and messages, and one `register` commit with the rows
 * Python writes (the feature version, its output column in group `<name>`, an output of a changed
 * type replaced) and commit.py's checks for it under the table's commit lock: a feature
 * registered by a concurrent commit, a column added or removed concurrently, a group taken.
 * Failpoints: `register.before_commit` (validated, lock not taken), then the commit's.
 */
final class FeatureRegistrar(reader: CatalogReader, failpoints: Failpoints = Failpoints(None)) {

  private val Op = "register"

  /**
   * Register `requested` (a [[SqlFeature.define]]d feature; empty inputs: inferred with
   * `caseSensitive`) on `branch` of `table`.
   */
  def register(table: String, branch: String, requested: FeatureDef, caseSensitive: Boolean): RegisterOutcome = {
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch)))
    val rows = reader.withMetadata(s"the features of table '$table'")(_.featureRows(snap))
    val active = snap.columns.map(_.name).toSet
    val current = mutable.LinkedHashMap.empty[String, FeatureDef]
    rows.foreach { r =>
      val f = FeatureDef.fromRow(r.definition, r.fingerprint)
      if (f.outputNames.forall(active.contains)) current(r.name) = f
    }
    val raw = snap.columns.filter(_.feature.isEmpty).map(_.name).toSet + SystemColumns.AppendName
    val known = raw ++ current.values.flatMap(_.outputNames) ++ requested.outputNames
    val f =
      if (requested.inputs.nonEmpty) requested
      else requested.copy(inputs = SqlFeature.inferInputs(requested, known, caseSensitive))
    checkVersionRule(rows.filter(r => r.name == f.name && r.version == f.version), f)
    val isNew = !current.get(f.name).exists(_.version == f.version)
    SqlFeature.checkGraph((current.clone() += (f.name -> f)).values.toSeq, raw)
    val (added, removed) = columnChanges(snap, current.get(f.name), f)
    if (!isNew && added.isEmpty && removed.isEmpty) return RegisterOutcome(f, None)
    val summary = Map[String, Any](
      "features" -> (if (isNew) Seq(f.id) else Nil),
      "columns" -> added.map(_.name))
    failpoints.hit("register.before_commit")
    val version = commit(snap.table.tableId, branch, snap.snapshot.version, summary)((c, v, now) =>
      apply(c, v, now, if (isNew) Some(f) else None, added, removed))
    RegisterOutcome(f, Some(version))
  }

  /**
   * One `register` commit on `branch` of table `tableId` read at `baseVersion` (commit.py
   * `commit`): `body` checks and writes the rows, given the version and the commit time (a
   * feature's `registered_at` is its commit's `committed_at`); then the commit row and the ref.
   */
  private def commit(tableId: String, branch: String, baseVersion: Long, summary: Map[String, Any])(
      body: (CommitContext, Long, String) => Unit): Long =
    new UndoWriter(reader, failpoints).withLock(tableId, Op) { (conn, entry) =>
      val resolver = new SnapshotResolver(conn, entry, reader.display)
      val head = resolver.resolve(SnapshotSpec(branch = Some(branch)))
      val c = CommitContext(conn, entry, resolver, branch, baseVersion, head.version, head.segments)
      c.checkReadThisBranch(Op)
      if (baseVersion > head.version) {
        throw ProcedureErrors.invalidOperation(
          s"Cannot commit on branch '$branch': base version $baseVersion is newer than its head ${head.version}")
      }
      val version = Jdbc.query(conn, CommitSql("next_version"), tableId)(_.getLong(1)).head
      failpoints.hit("commit.before_insert")
      val now = CommitRows.commitTime(conn, tableId)
      body(c, version, now)
      val json = PyJson.dumps(summary)
      CommitRows.insertCommit(conn, tableId, version, head.version, branch, Op, None, json, now, UndoStatements.newId())
      failpoints.hit("commit.before_end")
      version
    }

  /** registry.py `_check_version_rule`: a registered version keeps its code and inputs/outputs. */
  private def checkVersionRule(same: Seq[FeatureRow], f: FeatureDef): Unit = same.foreach { row =>
    val stored = FeatureDef.fromRow(row.definition, row.fingerprint)
    val sameShape = stored.inputs == f.inputs && stored.outputs.toMap == f.outputs.toMap &&
      stored.kind == f.kind && stored.expr == f.expr
    if (row.fingerprint != f.fingerprint || !sameShape) {
      val next = if (f.version.forall(_.isDigit)) (BigInt(f.version) + 1).toString else f.version + ".1"
      throw ProcedureErrors.invalidOperation(
        s"Cannot register feature '${f.name}': version ${f.version} is already registered with different code " +
          s"or inputs/outputs; bump the version (e.g. version=\"$next\") so computed columns are marked stale")
    }
  }

  /** registry.py `_column_changes` for one feature: the output columns added and the columns removed. */
  private def columnChanges(snap: TableSnapshot, previous: Option[FeatureDef], f: FeatureDef)
      : (Seq[FeatureColumn], Seq[String]) = {
    val byName = snap.columns.map(c => c.name -> c).toMap
    val clash = snap.columns.filter(c => c.groupName == f.name && !c.feature.contains(f.name)).map(_.name)
    if (clash.nonEmpty) {
      throw ProcedureErrors.invalidOperation(
        s"Cannot register feature '${f.name}': its outputs are stored in column group '${f.name}', which " +
          s"already holds column(s) ${clash.mkString(", ")}; rename the feature")
    }
    val added = mutable.ArrayBuffer.empty[FeatureColumn]
    val removed = mutable.ArrayBuffer.empty[String]
    f.outputs.foreach { case (out, ddl) =>
      byName.get(out) match {
        case Some(col) if col.feature.contains(f.name) && col.ddl == ddl =>
        case Some(col) if !col.feature.contains(f.name) =>
          throw ProcedureErrors.invalidOperation(
            s"Cannot register feature '${f.name}': output '$out' is already a column " +
              col.feature.fold("of the table")(p => s"produced by feature '$p'"))
        case other =>
          if (other.isDefined) removed += out // the output's type changed: a new column replaces it
          added += FeatureColumn(out, ddl, f.name)
      }
    }
    previous.foreach(p => removed ++= p.outputNames.filter(o => !f.outputNames.contains(o) && byName.contains(o)))
    (added.toSeq, removed.toSeq)
  }

  /** The commit's checks (commit.py `_validate` for these rows) and its rows, in the locked transaction. */
  private def apply(
      c: CommitContext,
      version: Long,
      now: String,
      feature: Option[FeatureDef],
      added: Seq[FeatureColumn],
      removed: Seq[String]): Unit = {
    val t = c.entry.tableId
    val (vis, params) = Jdbc.visible("c", "columns", c.segments)
    val visible = Jdbc.query(c.conn, CommitSql("visible_columns").replace("{vis}", vis), (t +: params): _*) { rs =>
      (rs.getString(1), rs.getInt(2), rs.getLong(3), rs.getString(4))
    }
    val active = visible.filter(_._4 == "active").map(r => r._1 -> (r._2, r._3)).toMap
    val retired = visible.filter(_._4 != "active").map(_._1).toSet
    removed.foreach { n =>
      if (!active.contains(n))
        throw WriteErrors.conflict(s"Cannot commit $Op: column '$n' was removed by a concurrent commit")
    }
    checkNewColumns(c, added, removed, active, retired)
    if (c.head != c.baseVersion && feature.isDefined) checkFeatureConflicts(c)
    checkGroupOwnership(c, added, removed)
    insertColumns(c, version, added)
    val statements = new UndoStatements(c.conn, t, c.branch, version, c.segments)
    statements.remove("columns", "column_id", removed.map(n => Int.box(active(n)._1)))
    failpoints.hit("commit.mid_insert")
    feature.foreach { f =>
      c.update(
        "INSERT INTO features (table_id, name, version, kind, definition, fingerprint, registered_at, " +
          "registered_version, branch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        t,
        f.name,
        f.version,
        f.kind,
        SqlFeature.definitionJson(f),
        f.fingerprint,
        now,
        Long.box(version),
        c.branch
      )
    }
  }

  /** commit.py `_validate` for new columns: not active (else added concurrently, or existing), not retired. */
  private def checkNewColumns(
      c: CommitContext,
      added: Seq[FeatureColumn],
      removed: Seq[String],
      active: Map[String, (Int, Long)],
      retired: Set[String]): Unit = added.foreach { col =>
    active.get(col.name).filterNot(_ => removed.contains(col.name)).foreach { case (_, addedAt) =>
      if (addedAt > c.baseVersion) {
        throw WriteErrors.conflict(
          s"Cannot commit $Op: column '${col.name}' was added by a concurrent commit; retry the operation")
      }
      throw DdlErrors.columnExists(s"Cannot add column '${col.name}': it already exists")
    }
    if (retired.contains(col.name)) {
      throw DdlErrors.columnExists(
        s"Cannot add column '${col.name}': a retired column has that name; restore it (Table.restore) or " +
          "choose another name")
    }
  }

  /** commit.py `_check_feature_conflicts`: a feature registered since the base may invalidate the graph. */
  private def checkFeatureConflicts(c: CommitContext): Unit = {
    val rows = Jdbc.query(
      c.conn,
      "SELECT name, version FROM features WHERE table_id = ? AND registered_version > ? AND branch = ? " +
        "ORDER BY registered_version",
      c.entry.tableId,
      Long.box(c.baseVersion),
      c.branch
    )(rs => s"${rs.getString(1)}@${rs.getString(2)}")
    if (rows.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit $Op: feature(s) ${rows.mkString(", ")} were registered by a concurrent commit after " +
          s"version ${c.baseVersion}; nothing was committed. Re-run the registration on the new version.")
    }
  }

  /** commit.py `_check_group_ownership` and `_check_group_is_not_new` for feature outputs. */
  private def checkGroupOwnership(c: CommitContext, added: Seq[FeatureColumn], removed: Seq[String]): Unit = {
    val (vis, params) = Jdbc.visible("c", "columns", c.segments)
    val held = mutable.HashMap.empty[String, mutable.ArrayBuffer[(String, Option[String], Long)]]
    Jdbc.foreach(
      c.conn,
      s"SELECT name, group_name, feature, added_version FROM columns c WHERE c.table_id = ? AND $vis " +
        "AND c.state <> 'dropped'",
      (c.entry.tableId +: params): _*
    ) { rs =>
      if (!removed.contains(rs.getString(1))) {
        held.getOrElseUpdate(rs.getString(2), mutable.ArrayBuffer.empty) +=
          ((rs.getString(1), Option(rs.getString(3)), rs.getLong(4)))
      }
    }
    added.foreach { col =>
      val inGroup = held.get(col.feature).map(_.toSeq).getOrElse(Nil)
      val clash = inGroup.filterNot(_._2.contains(col.feature))
      if (clash.nonEmpty) {
        val owner = clash.head._2.fold("raw column(s)")(p => s"outputs of feature '$p'")
        val racing = clash.exists(_._3 > c.baseVersion)
        val detail = s"Cannot commit $Op: column group '${col.feature}' holds $owner " +
          s"(${clash.take(5).map(_._1).mkString(", ")})" + (if (racing) ", added by a concurrent commit" else "") +
          s", so column '${col.name}' (output of feature '${col.feature}') cannot be stored in it (a backfill " +
          "replaces the files of its feature's group); choose another group name or rename the feature"
        if (racing) throw WriteErrors.conflict(detail)
        throw ProcedureErrors.invalidOperation(detail)
      }
      if (inGroup.nonEmpty && inGroup.forall(_._3 > c.baseVersion)) {
        throw WriteErrors.conflict(
          s"Cannot commit $Op: column group '${col.feature}' was created by a concurrent commit (column(s) " +
            s"${inGroup.take(5).map(_._1).mkString(", ")}), so column '${col.name}' cannot be added to it; " +
            "nothing was committed. Choose another group name and retry.")
      }
    }
  }

  /** commit.py `_insert_columns` of feature outputs (nullable, group and feature: the feature's name). */
  private def insertColumns(c: CommitContext, version: Long, added: Seq[FeatureColumn]): Unit = if (added.nonEmpty) {
    val t = c.entry.tableId
    val nextId = Jdbc.query(c.conn, "SELECT next_column_id FROM tables WHERE table_id = ?", t)(_.getInt(1)).head
    val maxPos =
      Jdbc.query(c.conn, "SELECT COALESCE(MAX(position), -1) FROM columns WHERE table_id = ?", t)(_.getInt(1)).head
    added.zipWithIndex.foreach { case (col, i) =>
      c.update(
        "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, position, state, " +
          "group_name, feature, branch, added_version, removed_version) " +
          "VALUES (?, ?, ?, ?, ?, 1, ?, 'active', ?, ?, ?, ?, NULL)",
        t,
        Int.box(nextId + i),
        col.name,
        col.name,
        col.ddl,
        Int.box(maxPos + 1 + i),
        col.feature,
        col.feature,
        c.branch,
        Long.box(version)
      )
    }
    c.update("UPDATE tables SET next_column_id = ? WHERE table_id = ?", Int.box(nextId + added.size), t)
  }
}
