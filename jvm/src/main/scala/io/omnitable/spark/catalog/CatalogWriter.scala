package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets
import java.security.MessageDigest
import java.sql.SQLException
import java.time.{Instant, ZoneOffset}
import java.time.format.DateTimeFormatter

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors, WriteErrors}

/**
 * The JVM's committer: the same protocol as python/omnitable/catalog/commit.py for appends
 * (docs/catalog.md, "Commits and concurrency"), one database transaction per call, the table's
 * commit lock taken first (`BEGIN IMMEDIATE` on SQLite, `SELECT … FOR UPDATE` on PostgreSQL).
 * The statements both languages run are in commit.sql ([[CommitSql]]).
 *
 * @param failpoints fault-injection points (tests only, [[Failpoints]]).
 */
final class CatalogWriter(
    val address: CatalogAddress,
    env: JdbcConnector.Env = JdbcConnector.systemEnv,
    val failpoints: Failpoints = Failpoints(None)) {

  private val queries = new QueryCounter

  def display: String = address.display

  /** Reserve `count` fresh `_ai_unique_id_` values of table `tableId` in a short transaction; the first one. */
  def reserveRowIds(tableId: String, tableName: String, count: Long): Long = withWrite(s"row ids of '$tableName'") {
    conn =>
      lockTable(conn, tableId)
      val start = Jdbc.query(conn, CommitSql("next_row_id"), tableId)(_.getLong(1)).headOption
        .getOrElse(throw WriteErrors.dropped("the row id reservation", tableId))
      if (start + count > CatalogWriter.MaxRowId || start + count < start) {
        throw WriteErrors.conflict(
          s"Cannot reserve $count row ids on table '$tableName': the _ai_unique_id_ space is " +
            s"exhausted (next free id $start)")
      }
      update(conn, CommitSql("set_next_row_id"), Long.box(start + count), tableId)
      start
  }

  /**
   * Commit `c` atomically; returns the new version.
   *
   * @throws io.omnitable.spark.errors.OmniTableCommitException a conflict with a concurrent commit, a dropped table, or a
   *         batch name already taken (nothing committed); or an unknown outcome (the connection
   *         failed during the commit and the commit token is not found).
   */
  def commitAppend(c: AppendCommit): Long = commitAppend(c, None)

  /**
   * As [[commitAppend]]; `run` (a MERGE's inserted batch) is recorded already succeeded in the
   * same transaction (its metrics get the version) and the commit names it.
   */
  def commitAppend(c: AppendCommit, run: Option[FinishedRun]): Long =
    try withWrite(s"table '${c.tableName}'") { conn =>
        run.foreach(r => insertRun(conn, r.runId, c.tableId, "ingest", r.plan, r.startedAt))
        val version = applyAppend(conn, c.copy(runId = run.map(_.runId).orElse(c.runId)))
        run.foreach(r => endRun(conn, r.runId, "succeeded", r.metrics + ("version" -> version), None))
        version
      }
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        findCommit(c.tableId, c.token)
          .getOrElse(throw WriteErrors.outcomeUnknown(s"the append of batch '${c.name}'", e.getCause))
    }

  private[catalog] def applyAppend(conn: Jdbc.Conn, c: AppendCommit): Long = {
    lockTable(conn, c.tableId)
    val table = Jdbc.query(conn, CommitSql("table_row"), c.tableId) { rs =>
      TableEntry(rs.getString(1), rs.getString(2), rs.getString(3), Map.empty)
    }.headOption.getOrElse(throw WriteErrors.dropped("append", c.tableId))
    val resolver = new SnapshotResolver(conn, table, display)
    val snap = resolver.resolve(SnapshotSpec(branch = Some(c.branch)))
    val (head, segments) = (snap.version, snap.segments)
    CommitRows.checkBase(c.branch, c.baseVersion, head)
    val replaced =
      if (c.replace) replacedAt(conn, c, resolver.resolve(SnapshotSpec(version = Some(c.baseVersion))).segments)
      else Replaced(Nil, Nil)
    val version = Jdbc.query(conn, CommitSql("next_version"), c.tableId)(_.getLong(1)).head
    // mergeSchema: the batch's new columns are added by this commit (DdlWriter's add_columns checks)
    val added =
      if (c.newColumns.isEmpty) Map.empty[String, Int]
      else new DdlWriter(this).insertColumns(conn, c.tableId, c.baseVersion, c.newColumns, segments, c.branch, version)
    val columnIds = checkColumns(conn, c, segments, added)
    checkBatchName(conn, c, segments, replaced.batchIds)
    if (replaced.batchIds.nonEmpty) checkStillVisible(conn, c, segments, replaced)
    checkIdOverlaps(conn, c, head)
    hit("commit.before_insert")
    val now = commitTime(conn, c.tableId)
    insertData(conn, c, version, columnIds, now)
    hit("commit.mid_insert")
    endRows(conn, c, version, replaced)
    val newNames: Map[String, Any] =
      if (c.newColumns.isEmpty) Map.empty else Map("columns" -> c.newColumns.map(_.name).asJava)
    val summary = CommitRows.summaryJson(Map[String, Any](
      "batch" -> c.name,
      "rows" -> c.fragments.map(_.rowCount).sum,
      "fragments" -> c.fragments.size,
      "replaced" -> replaced.batchIds.nonEmpty,
      "engine" -> c.engine) ++ newNames)
    CommitRows.insertCommit(conn, c.tableId, version, head, c.branch, "append", c.runId, summary, now, c.token)
    moveNextRowId(conn, c)
    hit("commit.before_end")
    version
  }

  /**
   * The checks of an append joined to a row-level commit (a MERGE's inserted batch: no replace,
   * no new columns) inside that commit's transaction: the columns, the batch name, the ids of
   * commits since it was checked ([[IdsNotChecked]]); name → column id of its files' columns.
   */
  private[catalog] def checkJoinedAppend(conn: Jdbc.Conn, c: AppendCommit, segments: Seq[Segment], head: Long)
      : Map[String, Int] = {
    val ids = checkColumns(conn, c, segments, Map.empty)
    checkBatchName(conn, c, segments, Nil)
    checkIdOverlaps(conn, c, head)
    ids
  }

  /** Inserts the joined append's batch, fragments and files as of `version` ([[checkJoinedAppend]] first). */
  private[catalog] def insertJoinedAppend(
      conn: Jdbc.Conn,
      c: AppendCommit,
      version: Long,
      ids: Map[String, Int],
      now: String): Unit = {
    insertData(conn, c, version, ids, now)
    moveNextRowId(conn, c)
  }

  /**
   * Commit an update (rewritten column files of existing fragments) atomically; returns the new version.
   *
   * @throws io.omnitable.spark.errors.OmniTableCommitException as [[commitAppend]].
   */
  def commitUpdate(c: UpdateCommit): Long = new UpdateCommitter(this).commit(c)

  /**
   * Commit the row-level statement `c` (DELETE FROM; docs/spark.md, "Row-level DML") atomically;
   * returns the new version. Refusals as [[commitAppend]] ([[RowLevelCommitter]] has the rules).
   */
  def commitRowLevel(c: RowLevelCommit): Long =
    try withWrite(s"table '${c.tableName}'")(conn => new RowLevelCommitter(this, conn, c).apply())
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        findCommit(c.tableId, c.token).getOrElse(throw WriteErrors.outcomeUnknown(s"the ${c.op}", e.getCause))
    }

  /**
   * Delete every catalog row of table `tableId` in one transaction (Python's
   * `Catalog.drop_table`); false when no such table exists (dropped, or never existed).
   */
  def dropTable(tableId: String, name: String): Boolean = withWrite(s"table '$name'") { conn =>
    lockTable(conn, tableId)
    val exists = Jdbc.query(conn, CommitSql("table_row"), tableId)(_.getString(1)).nonEmpty
    if (exists) {
      hit("drop.before_delete")
      CatalogWriter.tableKinds.foreach(kind =>
        update(conn, CommitSql("delete_table_rows").replace("{kind}", kind), tableId))
    }
    exists
  }

  /**
   * Drop namespace `namespace` and every table in it in one transaction (Python's
   * `Catalog.drop_namespace(name, cascade=True)`): the namespace row first (a concurrent
   * create_table in it either committed before and is dropped here, or finds no namespace), then
   * each table in name order, locked and deleted as [[dropTable]] does. Returns the dropped
   * tables' addresses and data directories (URIs, for the caller to purge), or None when no such
   * namespace exists. Refusing `default` is the caller's.
   */
  def dropNamespaceCascade(namespace: String): Option[Seq[(String, String)]] =
    withWrite(s"namespace '$namespace'") { conn =>
      if (update(conn, "DELETE FROM namespaces WHERE name = ?", namespace) == 0) None
      else {
        val held = Jdbc.query(
          conn,
          "SELECT table_id, name, location FROM tables WHERE namespace = ? ORDER BY name",
          namespace)(rs => (rs.getString(1), rs.getString(2), rs.getString(3)))
        val root = Jdbc.query(conn, "SELECT value FROM omnitable_meta WHERE key = 'root'")(_.getString(1)).headOption
        val rootUri = DataPaths.rootUri(
          root.getOrElse(throw OmniTableErrors.corruptCatalog(display, "omnitable_meta has no 'root' entry")),
          address,
          display)
        held.foreach { case (tableId, _, _) =>
          lockTable(conn, tableId)
          hit("drop.before_delete")
          CatalogWriter.tableKinds.foreach(kind =>
            update(conn, CommitSql("delete_table_rows").replace("{kind}", kind), tableId))
        }
        Some(held.map { case (_, name, location) =>
          (TableNames.address(namespace, name), DataPaths.join(rootUri, location))
        })
      }
    }

  /**
   * Record a running run of this driver (Python's `Catalog.start_run`, the same statement):
   * `plan` as JSON, this JVM's host and pid, a heartbeat now. Returns the run's id.
   */
  def startRun(tableId: String, kind: String, plan: Map[String, Any]): String = {
    val runId = CatalogWriter.newRunId(kind)
    withWrite(s"run '$runId'")(conn => insertRun(conn, runId, tableId, kind, plan, CatalogWriter.utcNow()))
    runId
  }

  /** Inserts run `runId` as `running` since `startedAt` (`start_run`), in the caller's transaction. */
  def insertRun(
      conn: Jdbc.Conn,
      runId: String,
      tableId: String,
      kind: String,
      plan: Map[String, Any],
      startedAt: String)
      : Unit =
    update(
      conn,
      CommitSql("start_run"),
      runId,
      tableId,
      kind,
      CatalogWriter.json(plan),
      startedAt,
      CatalogWriter.host,
      Int.box(CatalogWriter.pid),
      startedAt)

  /**
   * Record where the table's record-level error table lives (Python's `Catalog.register_error_table`:
   * idempotent, the first location recorded stays).
   */
  def registerErrorTable(tableId: String, location: String): Unit =
    withWrite(s"the error table of table '$tableId'") { conn =>
      val found = Jdbc.query(conn, "SELECT location FROM error_tables WHERE table_id = ?", tableId)(_.getString(1))
      if (found.isEmpty) {
        update(
          conn,
          "INSERT INTO error_tables (table_id, location, created_at) VALUES (?, ?, ?)",
          tableId,
          location,
          CatalogWriter.utcNow())
      }
    }

  /** Refresh a running run's heartbeat (Python's `_Heartbeat`). */
  def heartbeatRun(runId: String): Unit =
    withWrite(s"run '$runId'")(conn => update(conn, CommitSql("heartbeat_run"), CatalogWriter.utcNow(), runId))

  /** End a run: `succeeded`, `failed` or `aborted`, with its metrics and message (`Catalog.finish_run`). */
  def finishRun(runId: String, status: String, metrics: Map[String, Any], message: Option[String]): Unit =
    withWrite(s"run '$runId'")(conn => endRun(conn, runId, status, metrics, message))

  /** Ends run `runId` now (`finish_run`), in the caller's transaction. */
  def endRun(conn: Jdbc.Conn, runId: String, status: String, metrics: Map[String, Any], message: Option[String])
      : Unit =
    update(
      conn,
      CommitSql("finish_run"),
      status,
      CatalogWriter.json(metrics),
      message.map(_.take(2000)).orNull,
      CatalogWriter.utcNow(),
      runId)

  /** Name → column id at the head for every column a file carries; conflicts as commit.py `_validate`. */
  private def checkColumns(
      conn: Jdbc.Conn,
      c: AppendCommit,
      segments: Seq[Segment],
      added: Map[String, Int]): Map[String, Int] = {
    val (vis, params) = Jdbc.visible("c", "columns", segments)
    val active = Jdbc.query(conn, CommitSql("visible_columns").replace("{vis}", vis), (c.tableId +: params): _*) {
      rs => (rs.getString(1), rs.getInt(2), rs.getString(4))
    }.filter(_._3 == "active").map(r => r._1 -> r._2).toMap
    // a mergeSchema append's new columns get their ids from this commit (`added`), after the tasks
    // wrote: the files could not bind them, so only the columns that existed before are checked
    val bound = c.fragments.flatMap(_.files).map(f => f.copy(stats = f.stats.filterNot(s => added.contains(s._1))))
    CommitRows.checkColumnBindings("append", bound, active, "Run the write again.")
    active ++ added
  }

  /** (batch id, added version) of the batches named `c.name` visible in `segments`. */
  private def batchesNamed(conn: Jdbc.Conn, c: AppendCommit, segments: Seq[Segment]): Seq[(String, Long)] = {
    val (vis, params) = Jdbc.visible("b", "batches", segments)
    Jdbc.query(
      conn,
      CommitSql("live_batch_by_name").replace("{vis}", vis),
      (Seq(c.tableId, c.name) ++ params): _*)(rs => (rs.getString(1), rs.getLong(3)))
  }

  /** The batch an overwrite replaces and its fragments, as its base version shows them. */
  private def replacedAt(conn: Jdbc.Conn, c: AppendCommit, base: Seq[Segment]): Replaced = {
    val ids = batchesNamed(conn, c, base).map(_._1)
    Replaced(ids, fragmentsOf(conn, c, base, ids).sorted)
  }

  private def fragmentsOf(conn: Jdbc.Conn, c: AppendCommit, segments: Seq[Segment], ids: Seq[String]): Seq[String] = {
    val (vis, params) = Jdbc.visible("f", "fragments", segments)
    val (in, inParams) = Jdbc.in("f.batch_id", ids)
    val sql = CommitSql("fragments_of_batches").replace("{vis}", vis).replace("{in}", in)
    Jdbc.query(conn, sql, (Seq(c.tableId) ++ params ++ inParams): _*)(_.getString(1))
  }

  /**
   * The batch names the commit creates are free at the head, apart from the batch it replaces,
   * which must still be live (commit.py `_check_batches`).
   */
  private def checkBatchName(conn: Jdbc.Conn, c: AppendCommit, segments: Seq[Segment], replaced: Seq[String]): Unit = {
    val live = batchesNamed(conn, c, segments)
    if (replaced.exists(id => !live.exists(_._1 == id))) {
      throw WriteErrors.conflict(
        "Cannot commit append: the batch it replaces was changed by a concurrent commit; retry the operation")
    }
    live.filterNot(b => replaced.contains(b._1)).headOption.foreach { case (_, added) =>
      if (added > c.baseVersion) {
        throw WriteErrors.conflict(s"Cannot append batch '${c.name}': a concurrent commit created it first")
      }
      throw WriteErrors.batchExists(c.name)
    }
  }

  /** The fragments an overwrite removes are still visible at the head (commit.py `_check_still_visible`). */
  private def checkStillVisible(conn: Jdbc.Conn, c: AppendCommit, segments: Seq[Segment], r: Replaced): Unit = {
    val gone = r.fragmentIds.diff(fragmentsOf(conn, c, segments, r.batchIds))
    if (gone.nonEmpty) {
      throw WriteErrors.conflict(
        s"Cannot commit append: ${gone.size} fragment(s) were removed by a concurrent commit (batch " +
          s"replaced or compacted), e.g. ${gone.head}; retry the operation")
    }
  }

  /** End the replaced batch, its fragments, their files and deletion vectors (commit.py `_apply_removals`). */
  private def endRows(conn: Jdbc.Conn, c: AppendCommit, version: Long, r: Replaced): Unit = {
    def end(kind: String, by: String, values: Seq[String]): Unit = batch(
      conn,
      CommitSql("end_rows").replace("{kind}", kind).replace("{by}", by),
      values.map(v => Seq[AnyRef](Long.box(version), c.tableId, v, c.branch)))
    end("batches", "batch_id", r.batchIds)
    end("fragments", "fragment_id", r.fragmentIds)
    end("files", "fragment_id", r.fragmentIds)
    end("deletion_vectors", "fragment_id", r.fragmentIds)
  }

  /**
   * The `_ai_unique_id_` statistics of every file committed on the branch after the version the
   * append's ids were checked at (commit.py `_check_id_overlaps`): a possible overlap raises
   * [[IdsNotChecked]]; the caller reads those ids exactly (outside the transaction) and retries.
   */
  private def checkIdOverlaps(conn: Jdbc.Conn, c: AppendCommit, head: Long): Unit =
    if (c.checkedVersion < head) {
      Jdbc.foreach(conn, CommitSql("row_id_stats_since"), c.tableId, c.branch, Long.box(c.checkedVersion)) { rs =>
        val overlap = CatalogWriter.idBounds(rs.getString(1), rs.getInt(2)).forall { case (lo, hi) =>
          c.mayOverlap(lo, hi)
        }
        if (overlap) throw new IdsNotChecked(head)
      }
    }

  /** Moves `next_row_id` past the supplied ids (commit.py `next_row_id_at_least`). */
  private def moveNextRowId(conn: Jdbc.Conn, c: AppendCommit): Unit = c.supplied.foreach { case (_, hi) =>
    val atLeast = if (hi >= CatalogWriter.MaxRowId) CatalogWriter.MaxRowId else hi + 1
    val next = Jdbc.query(conn, CommitSql("next_row_id"), c.tableId)(_.getLong(1)).head
    if (atLeast > next) update(conn, CommitSql("set_next_row_id"), Long.box(atLeast), c.tableId)
  }

  /**
   * The files holding `_ai_unique_id_` values visible in `segments` (ingest/ids.py
   * `check_existing`), without those of the live batch named `exceptBatch` (an overwrite replaces it).
   */
  def rowIdFilesAt(tableId: String, segments: Seq[Segment], exceptBatch: Option[String]): Seq[RowIdFile] =
    withRead { conn =>
      val (vis, params) = Jdbc.visible("fi", "files", segments)
      val except = exceptBatch.map(_ =>
        " AND fi.fragment_id NOT IN (SELECT f.fragment_id FROM fragments f JOIN batches b ON " +
          "b.table_id = f.table_id AND b.batch_id = f.batch_id WHERE f.table_id = ? AND b.name = ?)").getOrElse("")
      val sql = "SELECT fi.path, fi.stats, cs.position FROM files fi JOIN column_sets cs ON cs.table_id = " +
        s"fi.table_id AND cs.set_id = fi.set_id WHERE fi.table_id = ? AND cs.column_id = 0 AND $vis$except"
      val all = (tableId +: params) ++ exceptBatch.toSeq.flatMap(n => Seq[AnyRef](tableId, n))
      Jdbc.query(conn, sql, all: _*)(rs =>
        RowIdFile(rs.getString(1), CatalogWriter.idBounds(rs.getString(2), rs.getInt(3))))
    }

  /** The files holding `_ai_unique_id_` values committed on `branch` after version `since` (`row_id_stats_since`). */
  def rowIdFilesSince(tableId: String, branch: String, since: Long): Seq[RowIdFile] = withRead { conn =>
    val sql = "SELECT fi.path, fi.stats, cs.position FROM files fi JOIN column_sets cs ON cs.table_id = " +
      "fi.table_id AND cs.set_id = fi.set_id WHERE fi.table_id = ? AND fi.branch = ? AND fi.added_version > ? " +
      "AND cs.column_id = 0"
    Jdbc.query(conn, sql, tableId, branch, Long.box(since)) { rs =>
      RowIdFile(rs.getString(1), CatalogWriter.idBounds(rs.getString(2), rs.getInt(3)))
    }
  }

  private def withRead[T](body: Jdbc.Conn => T): T = {
    val lease = try ReadConnections.borrow(address, env)
    catch { case e: SQLException => throw OmniTableErrors.cannotConnect(display, e) }
    try body(Jdbc.Conn(lease.connection, queries))
    catch { case e: SQLException => throw OmniTableErrors.catalogQueryFailed(display, "the _ai_unique_id_ files", e) }
    finally lease.release()
  }

  private def insertData(conn: Jdbc.Conn, c: AppendCommit, version: Long, ids: Map[String, Int], now: String): Unit = {
    val t = c.tableId
    update(
      conn,
      CommitSql("insert_batch"),
      t,
      c.batchId,
      c.name,
      c.branch,
      Long.box(version),
      now,
      Long.box(c.fragments.map(_.rowCount).sum),
      Long.box(c.fragments.size.toLong),
      Long.box(version) // read position: an append (or replace) goes last
    )
    batch(
      conn,
      CommitSql("insert_fragment"),
      c.fragments.map { f =>
        Seq(
          t,
          f.fragmentId,
          f.batchId,
          Long.box(f.seq),
          Long.box(f.rowCount),
          f.path,
          c.branch,
          Long.box(version),
          Long.box(version))
      }
    )
    val files = c.fragments.flatMap(_.files)
    insertFiles(
      conn,
      t,
      c.branch,
      version,
      files.map(f => f -> CatalogWriter.ColumnSet(f.stats.map { case (n, _) => ids(n) }.sorted)),
      ids)
  }

  /** One `files` row per file (its column set and statistics), and the sets not stored yet (commit.py `_insert_files`). */
  private[catalog] def insertFiles(
      conn: Jdbc.Conn,
      t: String,
      branch: String,
      version: Long,
      sets: Seq[(WrittenFile, CatalogWriter.ColumnSet)],
      ids: Map[String, Int],
      runId: Option[String] = None): Unit = {
    val existing = sets.map(_._2.setId).distinct.grouped(500).flatMap { chunk =>
      val (in, ps) = Jdbc.in("set_id", chunk)
      Jdbc.query(conn, CommitSql("existing_sets").replace("{in}", in), (t +: ps): _*)(_.getString(1))
    }.toSet
    val newSets = sets.map(_._2).distinct.filterNot(s => existing.contains(s.setId))
    batch(
      conn,
      CommitSql("insert_column_set"),
      newSets.flatMap { s =>
        s.columnIds.zipWithIndex.map { case (cid, pos) =>
          Seq[AnyRef](t, s.setId, Int.box(cid), Int.box(pos), s.featureVersions.get(cid).orNull)
        }
      }
    )
    batch(
      conn,
      CommitSql("insert_file"),
      sets.map { case (f, set) =>
        val byId = f.stats.map { case (n, st) => ids(n) -> st }.toMap
        Seq[AnyRef](
          t,
          f.fileId,
          f.fragmentId,
          f.groupName,
          f.path,
          Long.box(f.rowCount),
          Long.box(f.sizeBytes),
          branch,
          Long.box(version),
          runId.orNull,
          set.setId,
          CatalogWriter.encodeStats(set, byId)
        )
      }
    )
  }

  /** Now, never earlier than the table's latest commit (commit.py `_commit_time`). */
  private[catalog] def commitTime(conn: Jdbc.Conn, tableId: String): String = CommitRows.commitTime(conn, tableId)

  /** The version committed with `token`, read in a new connection. */
  private[catalog] def findCommit(tableId: String, token: String): Option[Long] =
    try withWrite("the commit token")(conn =>
        Jdbc.query(conn, CommitSql("find_commit"), tableId, token)(_.getLong(1)).headOption)
    catch { case NonFatal(_) => None }

  private[catalog] def lockTable(conn: Jdbc.Conn, tableId: String): Unit = address match {
    case _: PostgresAddress => Jdbc.query(conn, CommitSql("lock_table"), tableId)(_.getString(1))
    case _ => // SQLite: BEGIN IMMEDIATE already holds the write lock
  }

  private[catalog] def hit(name: String): Unit = failpoints.hit(name)

  private[catalog] def update(conn: Jdbc.Conn, sql: String, params: AnyRef*): Int =
    scala.util.Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      params.zipWithIndex.foreach { case (p, i) => st.setObject(i + 1, p) }
      st.executeUpdate()
    }

  private[catalog] def batch(conn: Jdbc.Conn, sql: String, rows: Seq[Seq[AnyRef]]): Unit = if (rows.nonEmpty) {
    scala.util.Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      rows.foreach { r =>
        r.zipWithIndex.foreach { case (p, i) => st.setObject(i + 1, p) }
        st.addBatch()
      }
      st.executeBatch()
    }
  }

  /** One write transaction: schema version checked, committed when `body` returns, rolled back otherwise. */
  private[catalog] def withWrite[T](what: String)(body: Jdbc.Conn => T): T = {
    val jdbc = try JdbcConnector.openForWrite(address, env)
    catch { case e: SQLException => throw OmniTableErrors.cannotConnect(display, e) }
    val conn = Jdbc.Conn(jdbc, queries)
    try {
      checkSchemaVersion(conn)
      val out = body(conn)
      jdbc.commit()
      hit("commit.after_commit")
      out
    } catch {
      case e: SQLException =>
        rollbackQuietly(jdbc)
        throw OmniTableErrors.catalogQueryFailed(display, what, e)
      case NonFatal(e) =>
        rollbackQuietly(jdbc)
        throw e
    } finally jdbc.close()
  }

  private def rollbackQuietly(jdbc: java.sql.Connection): Unit =
    try jdbc.rollback()
    catch { case NonFatal(_) => }

  /** A writer refuses a catalog schema it does not know (docs/catalog.md, "Schema version"). */
  private def checkSchemaVersion(conn: Jdbc.Conn): Unit = {
    val found = Jdbc.query(conn, CommitSql("schema_version"))(_.getString(1)).headOption
    found match {
      case None => throw OmniTableErrors.notACatalog(display, "omnitable_meta has no schema_version")
      case Some(v) if v.trim != SchemaFile.version.toString =>
        throw OmniTableErrors.schemaVersionMismatch(display, v.trim, SchemaFile.version)
      case _ =>
    }
  }
}

/** What an overwrite replaces: the batch ids of its name and their fragments (at its base). */
private[catalog] final case class Replaced(batchIds: Seq[String], fragmentIds: Seq[String])

object CatalogWriter {

  /**
   * commit.py `_check_keys`: an upsert checked its keys against the rows of `branch` as of version
   * `since`; when a commit after it (up to `head`) added or ended fragments or deletion vectors of
   * the branch (its own rows, or rows it inherits ended through `removals`), raises
   * [[KeysNotChecked]] (the exact check reads the key index, outside the transaction).
   */
  private[catalog] def checkKeys(conn: Jdbc.Conn, tableId: String, branch: String, op: String, since: Long, head: Long)
      : Unit =
    if (since < head) {
      val s = Long.box(since)
      val changed = Seq("fragments", "deletion_vectors").exists { kind =>
        Jdbc.query(conn, CommitSql("key_rows_changed_since").replace("{kind}", kind), tableId, branch, s, s)(_ => true)
          .nonEmpty ||
        Jdbc.query(conn, CommitSql("key_rows_removed_since"), tableId, branch, kind, s)(_ => true).nonEmpty
      }
      if (changed) throw new KeysNotChecked(op, since, head)
    }

  /** The largest `_ai_unique_id_` (python/omnitable/vocabulary/names.py `MAX_ROW_ID`). */
  val MaxRowId: Long = Long.MaxValue

  private[catalog] val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  private val Time = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'").withZone(ZoneOffset.UTC)

  def utcNow(): String = Time.format(Instant.now())

  /** A new run id of `kind` (Python's `Catalog.start_run`: the kind and 16 hex digits). */
  def newRunId(kind: String): String = s"$kind-${java.util.UUID.randomUUID().toString.replace("-", "").take(16)}"

  /** This driver as a run records it (Python: `socket.gethostname()`, `os.getpid()`). */
  lazy val host: String = java.net.InetAddress.getLocalHost.getHostName
  lazy val pid: Int = ProcessHandle.current().pid().toInt

  /**
   * JSON of a run's plan or metrics, keys sorted at every level (Python's
   * `json.dumps(sort_keys=True)`): nested Scala maps, sequences and options become JSON objects,
   * arrays and values/null (Jackson alone would write a Scala collection as a bean).
   */
  def json(values: Map[String, Any]): String = Json.writeValueAsString(javaValue(values))

  private def javaValue(v: Any): Any = v match {
    case m: scala.collection.Map[_, _] =>
      new java.util.TreeMap[String, Any](m.map { case (k, x) => k.toString -> javaValue(x) }.toMap.asJava)
    case Some(x) => javaValue(x)
    case None => null
    case s: Iterable[_] => s.map(javaValue).toSeq.asJava
    case a: Array[_] => a.toSeq.map(javaValue).asJava
    case other => other
  }

  private val CreateTable = """(?s)CREATE TABLE IF NOT EXISTS (\w+) \((.*)""".r

  /** The tables of schema.sql that hold rows of one table (a `table_id` column), `tables` last. */
  lazy val tableKinds: Seq[String] = {
    val kinds = SchemaFile.statements.map(_.linesIterator.filterNot(_.trim.startsWith("--")).mkString("\n").trim)
      .collect { case CreateTable(kind, body) if body.contains("table_id") => kind }
    kinds.filterNot(_ == "tables") :+ "tables"
  }

  /** The columns of a file in ascending column id, with the feature versions of feature outputs. */
  final case class ColumnSet(columnIds: Seq[Int], featureVersions: Map[Int, String] = Map.empty) {

    /** The content hash schema.sql specifies (python/omnitable/catalog/sets.py `ColumnSet.set_id`). */
    lazy val setId: String = {
      val key = columnIds.map(id => s"$id:${featureVersions.getOrElse(id, "")}").mkString(";")
      MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8))
        .map(b => f"${b & 0xff}%02x").mkString.take(16)
    }
  }

  /** `files.stats`: `[null_count, min, max]` per set position (sets.py `encode_stats`). */
  def encodeStats(set: ColumnSet, stats: Map[Int, FileColumnStats]): String = {
    if (stats.isEmpty) return null
    val entries = set.columnIds.map { cid =>
      stats.get(cid).map(st => Seq[Any](st.nullCount.map(Long.box).orNull, st.min.orNull, st.max.orNull).asJava).orNull
    }
    Json.writeValueAsString(entries.asJava)
  }

  /** The `_ai_unique_id_` bounds at `position` of a `files.stats` value (None: no statistics). */
  def idBounds(raw: String, position: Int): Option[(Long, Long)] = {
    val st = decodeStats(raw, position)
    for (lo <- st.min.flatMap(_.toLongOption); hi <- st.max.flatMap(_.toLongOption)) yield (lo, hi)
  }

  /** The statistics at `position` of a `files.stats` value (sets.py `decode_stats`). */
  def decodeStats(raw: String, position: Int): FileColumnStats = {
    if (raw == null) return FileColumnStats(Some(0L), None, None)
    val node = Json.readTree(raw)
    val entry = node.get(position)
    if (entry == null || entry.isNull) FileColumnStats(Some(0L), None, None)
    else {
      def text(i: Int): Option[String] = Option(entry.get(i)).filterNot(_.isNull).map(_.asText())
      FileColumnStats(text(0).map(_.toLong), text(1), text(2))
    }
  }
}
