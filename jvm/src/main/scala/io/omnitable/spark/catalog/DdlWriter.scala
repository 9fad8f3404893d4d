package io.omnitable.spark.catalog

import java.sql.SQLException
import java.util.UUID

import scala.collection.mutable
import scala.util.control.NonFatal

import io.omnitable.spark.errors.{DdlErrors, OmniTableAnalysisException, WriteErrors}

/** A column a DDL statement adds: its Spark DDL type as the catalog stores it and its group. */
final case class NewColumn(name: String, ddl: String, nullable: Boolean, group: String)

/**
 * A table a CREATE TABLE inserts: table `name` of `namespace` with id `tableId` (chosen before its
 * transaction, so a CTAS writes its files under [[location]] before the table exists), `columns`
 * and the properties as Python's JSON text.
 */
final case class NewTable(
    namespace: String,
    name: String,
    tableId: String,
    columns: Seq[NewColumn],
    propertiesJson: String) {
  def address: String = TableNames.address(namespace, name)

  /** The data directory relative to the data root, as Python names it. */
  def location: String = s"$address-$tableId"

  /** `_ai_unique_id_` then `columns`: column ids and positions are their indexes. */
  def allColumns: Seq[NewColumn] =
    NewColumn(SystemColumns.RowId, "bigint", nullable = false, DdlWriter.BaseGroup) +: columns
}

object NewTable {
  def newId(): String = UUID.randomUUID().toString.replace("-", "")
}

/**
 * The JVM's table-creating and column-adding catalog writes, the same rows in the same single
 * transactions as Python's `Catalog.create_table` (python/omnitable/catalog/catalog.py) and the
 * `add_columns` commit (python/omnitable/catalog/commit.py) with its conflict rules: a column
 * added or a group created by a concurrent commit conflicts, an existing or retired column name
 * is refused, a group holds raw columns or one feature's outputs, never both.
 */
/** A run recorded once it has ended (a CTAS's ingest): its id, plan, start time and metrics. */
final case class FinishedRun(runId: String, plan: Map[String, Any], startedAt: String, metrics: Map[String, Any])

final class DdlWriter(writer: CatalogWriter) {
  import DdlWriter._

  private def display: String = writer.display

  /**
   * Create table `name` of namespace `namespace` (the namespace row locked first, as Python's
   * `namespaces.lock_for_create`): the `tables` row, `_ai_unique_id_` and `columns`, version 0
   * (`create`) and branch `main`. `propertiesJson` is the properties as Python's JSON text.
   */
  def createTable(namespace: String, name: String, columns: Seq[NewColumn], propertiesJson: String): CreateOutcome = {
    val table = NewTable(namespace, name, NewTable.newId(), columns, propertiesJson)
    writer.withWrite(s"create table '${table.address}'")(conn => create(conn, table))
  }

  /**
   * CTAS: create `table` and commit `append`, its first batch (version 1), in ONE transaction, the
   * table's next free row id set to `nextRowId` (the ids its tasks generated lie below): nothing of
   * the table is visible before, and a name taken meanwhile (or a namespace dropped) leaves nothing.
   * A lost connection is resolved by the append's commit token, as [[CatalogWriter.commitAppend]]
   * does. `run`: the write's run, recorded already ended in the same transaction (the table did not
   * exist while the query ran; a CTAS that fails leaves no run, as it leaves no table).
   */
  def createWithAppend(table: NewTable, append: AppendCommit, nextRowId: Long, run: Option[FinishedRun] = None)
      : CreateOutcome =
    try writer.withWrite(s"create table '${table.address}'") { conn =>
        create(conn, table) match {
          case created: Created =>
            writer.update(conn, CommitSql("set_next_row_id"), Long.box(nextRowId), table.tableId)
            run.foreach(r => writer.insertRun(conn, r.runId, table.tableId, "ingest", r.plan, r.startedAt))
            writer.applyAppend(conn, append.copy(runId = run.map(_.runId)))
            run.foreach(r => writer.endRun(conn, r.runId, "succeeded", r.metrics, None))
            created
          case other => other
        }
      }
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        writer.findCommit(table.tableId, append.token).map(_ => Created(table.tableId)).getOrElse(
          throw WriteErrors.outcomeUnknown(
            s"the create of table '${table.address}' with batch '${append.name}'",
            e.getCause))
    }

  /** Inserts `table` unless its namespace is missing or its name taken (the namespace row locked first). */
  private def create(conn: Jdbc.Conn, table: NewTable): CreateOutcome = {
    val lock = writer.address match {
      case _: PostgresAddress => " FOR UPDATE"
      case _ => ""
    }
    if (Jdbc.query(conn, s"SELECT 1 FROM namespaces WHERE name = ?$lock", table.namespace)(_.getInt(1)).isEmpty) {
      NamespaceMissing
    } else if (Jdbc.query(conn, "SELECT 1 FROM tables WHERE namespace = ? AND name = ?", table.namespace, table.name)(
        _.getInt(1)).nonEmpty) TableExists
    else {
      writer.hit("create.before_insert")
      insertTable(conn, table)
      writer.hit("create.before_end")
      Created(table.tableId)
    }
  }

  private def insertTable(conn: Jdbc.Conn, table: NewTable): Unit = {
    val (tableId, columns) = (table.tableId, table.columns)
    val now = CatalogWriter.utcNow()
    writer.update(
      conn,
      "INSERT INTO tables (table_id, namespace, name, location, next_row_id, next_column_id, properties, " +
        "created_at) VALUES (?, ?, ?, ?, 0, 1, ?, ?)",
      tableId,
      table.namespace,
      table.name,
      table.location,
      table.propertiesJson,
      now
    )
    writer.batch(
      conn,
      InsertColumn,
      table.allColumns.zipWithIndex.map { case (c, i) =>
        columnRow(tableId, i, c, i, SystemColumns.MainBranch, 0L)
      })
    writer.update(
      conn,
      "UPDATE tables SET next_column_id = ? WHERE table_id = ?",
      Int.box(columns.size + 1),
      tableId)
    writer.update(
      conn,
      "INSERT INTO commits (table_id, version, parent_version, branch, op, run_id, summary, committed_at) " +
        "VALUES (?, 0, NULL, 'main', 'create', NULL, ?, ?)",
      tableId,
      PyJson.dumps(Map("columns" -> columns.size)),
      now
    )
    writer.update(
      conn,
      "INSERT INTO refs (table_id, name, kind, version, parent_branch, fork_version, created_at) " +
        "VALUES (?, 'main', 'branch', 0, NULL, NULL, ?)",
      tableId,
      now
    )
  }

  /**
   * Commit `columns` (all in `group`, no files: existing rows read NULL) on `main` of table
   * `tableId`, read at `baseVersion`: Python's `add_columns` commit with empty data. Returns the
   * new version.
   */
  def addColumns(tableId: String, table: String, baseVersion: Long, columns: Seq[NewColumn], group: String): Long = {
    val token = UUID.randomUUID().toString.replace("-", "")
    try writer.withWrite(s"table '$table'")(conn => applyAddColumns(conn, tableId, baseVersion, columns, group, token))
    catch {
      case e: OmniTableAnalysisException if e.getCause.isInstanceOf[SQLException] =>
        findCommit(tableId, token).getOrElse(
          throw WriteErrors.outcomeUnknown(s"the add_columns of ${columns.map(_.name).mkString(", ")}", e.getCause))
    }
  }

  private def applyAddColumns(
      conn: Jdbc.Conn,
      tableId: String,
      baseVersion: Long,
      columns: Seq[NewColumn],
      group: String,
      token: String): Long = {
    writer.lockTable(conn, tableId)
    val table = Jdbc.query(conn, CommitSql("table_row"), tableId) { rs =>
      TableEntry(rs.getString(1), rs.getString(2), rs.getString(3), Map.empty)
    }.headOption.getOrElse(throw WriteErrors.dropped(Op, tableId))
    val snap = new SnapshotResolver(conn, table, display).resolve(SnapshotSpec(branch = Some(SystemColumns.MainBranch)))
    val (head, segments) = (snap.version, snap.segments)
    CommitRows.checkBase(SystemColumns.MainBranch, baseVersion, head)
    val version = Jdbc.query(conn, CommitSql("next_version"), tableId)(_.getLong(1)).head
    writer.hit("commit.before_insert")
    val now = writer.commitTime(conn, tableId)
    insertColumns(conn, tableId, baseVersion, columns, segments, SystemColumns.MainBranch, version)
    writer.hit("commit.mid_insert")
    val summary = PyJson.dumps(Map("columns" -> columns.map(_.name), "group" -> group, "rows" -> 0, "files" -> 0))
    CommitRows.insertCommit(conn, tableId, version, head, SystemColumns.MainBranch, Op, None, summary, now, token)
    writer.hit("commit.before_end")
    version
  }

  /**
   * Check and insert `columns` (added at `version` on `branch`, read at `baseVersion`), as the
   * `add_columns` commit does, in the caller's transaction (the table locked): an append with
   * `mergeSchema` adds its new columns with its batch. Returns their names → column ids.
   */
  private[catalog] def insertColumns(
      conn: Jdbc.Conn,
      tableId: String,
      baseVersion: Long,
      columns: Seq[NewColumn],
      segments: Seq[Segment],
      branch: String,
      version: Long): Map[String, Int] = {
    checkNewColumns(conn, tableId, baseVersion, columns, segments)
    checkGroupOwnership(conn, tableId, baseVersion, columns, segments)
    val nextId = Jdbc.query(conn, "SELECT next_column_id FROM tables WHERE table_id = ?", tableId)(_.getInt(1)).head
    val maxPos = Jdbc.query(conn, "SELECT COALESCE(MAX(position), -1) FROM columns WHERE table_id = ?", tableId)(
      _.getInt(1)).head
    writer.batch(
      conn,
      InsertColumn,
      columns.zipWithIndex.map { case (c, i) => columnRow(tableId, nextId + i, c, maxPos + 1 + i, branch, version) })
    writer.update(
      conn,
      "UPDATE tables SET next_column_id = ? WHERE table_id = ?",
      Int.box(nextId + columns.size),
      tableId)
    columns.zipWithIndex.map { case (c, i) => c.name -> (nextId + i) }.toMap
  }

  /** commit.py `_validate` for new columns: not visible (else added concurrently, or existing), not retired. */
  private def checkNewColumns(
      conn: Jdbc.Conn,
      tableId: String,
      baseVersion: Long,
      columns: Seq[NewColumn],
      segments: Seq[Segment]): Unit = {
    val (vis, params) = Jdbc.visible("c", "columns", segments)
    val rows = Jdbc.query(conn, CommitSql("visible_columns").replace("{vis}", vis), (tableId +: params): _*) { rs =>
      (rs.getString(1), rs.getLong(3), rs.getString(4))
    }
    val active = rows.filter(_._3 == "active").map(r => r._1 -> r._2).toMap
    val retired = rows.filter(_._3 != "active").map(_._1).toSet
    columns.foreach { c =>
      active.get(c.name).foreach { added =>
        if (added > baseVersion) {
          throw WriteErrors.conflict(
            s"Cannot commit $Op: column '${c.name}' was added by a concurrent commit; retry the operation")
        }
        throw DdlErrors.columnExists(s"Cannot add column '${c.name}': it already exists")
      }
      if (retired.contains(c.name)) {
        throw DdlErrors.columnExists(
          s"Cannot add column '${c.name}': a retired column has that name; restore it (Table.restore) or " +
            "choose another name")
      }
    }
  }

  /** commit.py `_check_group_ownership` and `_check_group_is_not_new` for raw columns. */
  private def checkGroupOwnership(
      conn: Jdbc.Conn,
      tableId: String,
      baseVersion: Long,
      columns: Seq[NewColumn],
      segments: Seq[Segment]): Unit = {
    val (vis, params) = Jdbc.visible("c", "columns", segments)
    val held = mutable.LinkedHashMap.empty[String, mutable.ArrayBuffer[(String, Option[String], Long)]]
    Jdbc.foreach(
      conn,
      s"SELECT name, group_name, feature, added_version FROM columns c WHERE c.table_id = ? AND $vis " +
        "AND c.state <> 'dropped'",
      (tableId +: params): _*
    ) { rs =>
      held.getOrElseUpdate(rs.getString(2), mutable.ArrayBuffer.empty) +=
        ((rs.getString(1), Option(rs.getString(3)), rs.getLong(4)))
    }
    columns.foreach { col =>
      val inGroup = held.getOrElse(col.group, mutable.ArrayBuffer.empty).toSeq
      val clash = inGroup.filter(_._2.isDefined)
      if (clash.nonEmpty) {
        val racing = clash.exists(_._3 > baseVersion)
        val detail = s"Cannot commit $Op: column group '${col.group}' holds outputs of feature " +
          s"'${clash.head._2.get}' (${clash.take(5).map(_._1).mkString(", ")})" +
          (if (racing) ", added by a concurrent commit" else "") +
          s", so column '${col.name}' (a raw column) cannot be stored in it (a backfill replaces the " +
          "files of its feature's group); choose another group name or rename the feature"
        if (racing) throw WriteErrors.conflict(detail)
        throw DdlErrors.invalidDefinition(detail)
      }
      if (inGroup.nonEmpty && inGroup.forall(_._3 > baseVersion)) {
        throw WriteErrors.conflict(
          s"Cannot commit $Op: column group '${col.group}' was created by a concurrent commit (column(s) " +
            s"${inGroup.take(5).map(_._1).mkString(", ")}), so column '${col.name}' cannot be added to it; " +
            "nothing was committed. Choose another group name and retry.")
      }
    }
  }

  private def findCommit(tableId: String, token: String): Option[Long] =
    try writer.withWrite("the commit token")(conn =>
        Jdbc.query(conn, CommitSql("find_commit"), tableId, token)(_.getLong(1)).headOption)
    catch { case NonFatal(_) => None }
}

object DdlWriter {

  /** The group of `_ai_unique_id_` and of columns no group names (python/omnitable/vocabulary/names.py). */
  val BaseGroup = "base"

  private val Op = "add_columns"

  private val InsertColumn =
    "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, position, state, " +
      "group_name, feature, branch, added_version, removed_version) " +
      "VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, NULL, ?, ?, NULL)"

  private def columnRow(t: String, id: Int, c: NewColumn, pos: Int, branch: String, version: Long): Seq[AnyRef] =
    Seq(
      t,
      Int.box(id),
      c.name,
      c.name,
      c.ddl,
      Int.box(if (c.nullable) 1 else 0),
      Int.box(pos),
      c.group,
      branch,
      Long.box(version))

  sealed trait CreateOutcome
  final case class Created(tableId: String) extends CreateOutcome
  case object NamespaceMissing extends CreateOutcome
  case object TableExists extends CreateOutcome
}
