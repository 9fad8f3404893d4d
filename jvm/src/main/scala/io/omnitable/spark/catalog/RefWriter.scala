package io.omnitable.spark.catalog

import java.sql.{Connection, SQLException}
import java.time.{Instant, ZoneOffset}
import java.time.format.DateTimeFormatter
import java.util.{Properties, UUID}

import scala.util.Using
import scala.util.control.NonFatal

import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors, ProcedureErrors}

/**
 * A branch or a tag as the `refs` table holds it (python/omnitable/catalog/refs.py `Ref`).
 * `parent`: the branch a branch forked from (None for main) or a tag's branch; `forkVersion`: the
 * version a branch forked at (None for main and tags); `maxAgeS`: a tag's retention in seconds.
 */
final case class RefRecord(
    name: String,
    kind: String,
    version: Long,
    parent: Option[String],
    forkVersion: Option[Long],
    createdAt: String,
    maxAgeS: Option[Long]) {

  /** When a tag with a retention stops protecting its version (ISO-8601 UTC), as Python's `Ref.expires_at`. */
  def expiresAt: Option[String] = maxAgeS.map { s =>
    RefWriter.Timestamp.format(Instant.parse(createdAt).plusSeconds(s).atOffset(ZoneOffset.UTC))
  }
}

object RefRecord {

  /** The `refs` columns [[fromRow]] decodes, in its order. */
  val Columns: String = "name, kind, version, parent_branch, fork_version, created_at, max_age_s"

  /** The record of the current row of a query selecting [[Columns]]. */
  def fromRow(rs: java.sql.ResultSet): RefRecord = RefRecord(
    rs.getString(1),
    rs.getString(2),
    rs.getLong(3),
    Option(rs.getString(4)),
    Jdbc.optLong(rs, 5),
    rs.getString(6),
    Jdbc.optLong(rs, 7))
}

/**
 * Writes `refs` rows, the JVM twin of python/omnitable/catalog/refs.py and `Catalog.create_ref` /
 * `delete_ref`: the same validation, the same rows, under the table's commit lock (docs/catalog.md,
 * "Commits and concurrency"): SQLite `BEGIN IMMEDIATE` (writers are serialized), PostgreSQL
 * `SELECT … FOR UPDATE` on the table's row in a READ COMMITTED transaction, so a new ref sees
 * every commit that landed before it and never a half-written one. Connections are opened as
 * the reader opens them (same drivers and `env:` passwords) and the schema version is checked
 * first; any error rolls the transaction back, so nothing changes.
 */
final class RefWriter(reader: CatalogReader) {

  private def display: String = reader.display

  /** Branch `name` of `table`, forked from `fromRef` (a branch at `version`, default its head; or a tag). */
  def createBranch(table: String, name: String, fromRef: String, version: Option[Long]): RefRecord = {
    RefWriter.checkName(name, "branch")
    RefWriter.checkName(fromRef, "branch or tag")
    withTableLock(table, s"create branch '$name' of table '$table'") { (conn, entry) =>
      val resolver = new SnapshotResolver(conn, entry, display)
      val (source, at) = refRow(conn, entry, fromRef) match {
        case Some(("tag", tagVersion, parent)) =>
          if (version.isDefined) throw ProcedureErrors.tagWithVersion(table, name, fromRef)
          (parent.getOrElse(fromRef), Some(tagVersion))
        case _ => (fromRef, version)
      }
      val (owner, resolved) = sourceVersion(conn, entry, resolver, "branch", name, source, at)
      insert(conn, entry, RefRecord(name, "branch", resolved, Some(owner), Some(resolved), RefWriter.now(), None))
    }
  }

  /** Tag `name` pinning `version` (default: the head) of `branch`'s history; `maxAgeS`: its retention. */
  def createTag(table: String, name: String, branch: String, version: Option[Long], maxAgeS: Option[Long])
      : RefRecord = {
    RefWriter.checkName(name, "tag")
    RefWriter.checkName(branch, "branch")
    withTableLock(table, s"create tag '$name' of table '$table'") { (conn, entry) =>
      val resolver = new SnapshotResolver(conn, entry, display)
      val (owner, resolved) = sourceVersion(conn, entry, resolver, "tag", name, branch, version)
      insert(conn, entry, RefRecord(name, "tag", resolved, Some(owner), None, RefWriter.now(), maxAgeS))
    }
  }

  /**
   * Deletes branch `name`: its rows move to a name no ref can hold (`~deleted~<name>~<12 hex>`),
   * its ref goes; returns the deleted ref. Refuses `main` and a branch other refs are based on.
   */
  def deleteBranch(table: String, name: String): RefRecord = {
    RefWriter.checkName(name, "branch")
    withTableLock(table, s"delete branch '$name' of table '$table'") { (conn, entry) =>
      if (name == SystemColumns.MainBranch) throw ProcedureErrors.deleteMain(table)
      val ref = getRef(conn, entry, name, "branch")
      val based = Jdbc.query(
        conn,
        "SELECT kind, name FROM refs WHERE table_id = ? AND parent_branch = ? ORDER BY name",
        entry.tableId,
        name)(rs => (rs.getString(1), rs.getString(2)))
      if (based.nonEmpty) throw ProcedureErrors.branchHasDependents(table, name, based)
      val moved = s"${RefWriter.DeletedPrefix}$name~${UUID.randomUUID().toString.replace("-", "").take(12)}"
      RefWriter.BranchTables.foreach { t =>
        update(conn, s"UPDATE $t SET branch = ? WHERE table_id = ? AND branch = ?", moved, entry.tableId, name)
      }
      update(conn, "DELETE FROM refs WHERE table_id = ? AND name = ?", entry.tableId, name)
      ref
    }
  }

  /** Deletes tag `name` (its version stays in the history); returns the deleted ref. */
  def deleteTag(table: String, name: String): RefRecord = {
    RefWriter.checkName(name, "tag")
    withTableLock(table, s"delete tag '$name' of table '$table'") { (conn, entry) =>
      val ref = getRef(conn, entry, name, "tag")
      update(conn, "DELETE FROM refs WHERE table_id = ? AND name = ?", entry.tableId, name)
      ref
    }
  }

  // --- internals ----------------------------------------------------------------------------

  /** `(kind, version, parent_branch)` of ref `name`, if the table has one. */
  private def refRow(conn: Jdbc.Conn, entry: TableEntry, name: String): Option[(String, Long, Option[String])] =
    Jdbc.query(
      conn,
      "SELECT kind, version, parent_branch FROM refs WHERE table_id = ? AND name = ?",
      entry.tableId,
      name)(rs => (rs.getString(1), rs.getLong(2), Option(rs.getString(3)))).headOption

  /** `(the branch that committed it, version)` for `version` (None: the head) of `branch`'s history. */
  private def sourceVersion(
      conn: Jdbc.Conn,
      entry: TableEntry,
      resolver: SnapshotResolver,
      kind: String,
      name: String,
      branch: String,
      version: Option[Long]): (String, Long) = {
    val resolved =
      try resolver.resolve(SnapshotSpec(branch = Some(branch), version = version)).version
      catch {
        case e: OmniTableAnalysisException => throw ProcedureErrors.refSourceNotFound(kind, name, entry.name, e)
      }
    val owner = Jdbc.query(
      conn,
      "SELECT branch FROM commits WHERE table_id = ? AND version = ?",
      entry.tableId,
      Long.box(resolved))(_.getString(1)).headOption.getOrElse(
      throw OmniTableErrors.corruptCatalog(display, s"table '${entry.name}' has no commit of version $resolved"))
    (owner, resolved)
  }

  private def insert(conn: Jdbc.Conn, entry: TableEntry, ref: RefRecord): RefRecord = {
    refRow(conn, entry, ref.name).foreach { case (taken, _, _) =>
      throw ProcedureErrors.refExists(entry.name, ref.kind, ref.name, taken)
    }
    update(
      conn,
      "INSERT INTO refs (table_id, name, kind, version, parent_branch, fork_version, created_at, max_age_s) " +
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
      entry.tableId,
      ref.name,
      ref.kind,
      Long.box(ref.version),
      ref.parent.orNull,
      ref.forkVersion.map(Long.box).orNull,
      ref.createdAt,
      ref.maxAgeS.map(Long.box).orNull
    )
    ref
  }

  private def getRef(conn: Jdbc.Conn, entry: TableEntry, name: String, kind: String): RefRecord = {
    val found = Jdbc.query(
      conn,
      s"SELECT ${RefRecord.Columns} FROM refs WHERE table_id = ? AND name = ?",
      entry.tableId,
      name
    )(RefRecord.fromRow).headOption
    found.filter(_.kind == kind).getOrElse {
      val names = Jdbc.query(
        conn,
        "SELECT name FROM refs WHERE table_id = ? AND kind = ? ORDER BY name",
        entry.tableId,
        kind)(_.getString(1))
      throw OmniTableErrors.refNotFound(entry.name, kind, name, names)
    }
  }

  /** Runs `sql` (INSERT, UPDATE or DELETE) with positional `params`; NULLs are sent untyped. */
  private def update(conn: Jdbc.Conn, sql: String, params: AnyRef*): Unit =
    Using.resource(conn.jdbc.prepareStatement(sql)) { stmt =>
      params.zipWithIndex.foreach {
        case (null, i) => stmt.setNull(i + 1, java.sql.Types.NULL)
        case (p, i) => stmt.setObject(i + 1, p)
      }
      conn.counter.add(stmt.executeUpdate().toLong)
    }

  /**
   * Opens a write connection, checks the schema version, finds `table`, takes its commit lock and
   * runs `body`; commits when it returns, rolls back on any error.
   */
  private def withTableLock[T](table: String, what: String)(body: (Jdbc.Conn, TableEntry) => T): T = {
    val sqlite = reader.address.isInstanceOf[SqliteAddress]
    val jdbc = RefWriter.openForWrite(reader.address, reader.env)
    val conn = Jdbc.Conn(jdbc, reader.queries)
    var open = false
    try {
      if (sqlite) execute(jdbc, "BEGIN IMMEDIATE") // the database write lock, taken now
      open = true
      reader.checkSchemaVersion(conn)
      val entry = reader.findTable(conn, table).getOrElse(throw OmniTableErrors.tableNotFound(
        display,
        table,
        Jdbc.query(conn, "SELECT namespace, name FROM tables")(rs =>
          TableNames.address(rs.getString(1), rs.getString(2)))))
      if (!sqlite) {
        Jdbc.query(conn, "SELECT table_id FROM tables WHERE table_id = ? FOR UPDATE", entry.tableId)(_.getString(1))
      }
      val out = body(conn, entry)
      if (sqlite) execute(jdbc, "COMMIT") else jdbc.commit()
      open = false
      out
    } catch {
      case e: OmniTableAnalysisException => throw e
      case e: SQLException => throw ProcedureErrors.catalogWriteFailed(display, what, e)
    } finally {
      if (open) {
        try if (sqlite) execute(jdbc, "ROLLBACK") else jdbc.rollback()
        catch { case NonFatal(_) => }
      }
      jdbc.close()
    }
  }

  private def execute(jdbc: Connection, sql: String): Unit = Using.resource(jdbc.createStatement())(_.execute(sql))
}

object RefWriter {

  /** Tables whose rows carry the branch they were written on (refs.py `BRANCH_TABLES`). */
  val BranchTables: Seq[String] = Seq(
    "commits",
    "columns",
    "batches",
    "fragments",
    "files",
    "deletion_vectors",
    "removals",
    "features")

  val DeletedPrefix = "~deleted~"

  private val NamePattern = "[A-Za-z0-9][A-Za-z0-9_-]{0,99}".r

  /** A branch or tag name as refs.py `check_ref_name` accepts it. */
  def checkName(name: String, kind: String): String = {
    if (!NamePattern.matches(name) || name.forall(_.isDigit)) throw ProcedureErrors.invalidRefName(kind, name)
    name
  }

  /** Python's `utcnow()` format: microseconds and a `Z`. */
  val Timestamp: DateTimeFormatter = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")

  private def now(): String = Timestamp.format(Instant.now().atOffset(ZoneOffset.UTC))

  /** As python/omnitable/catalog/store.py's writers: 60 s busy timeout, WAL, synchronous NORMAL. */
  val SqliteBusyTimeoutMs = 60000

  /**
   * A connection for one write transaction: SQLite in autocommit mode (the caller sends
   * `BEGIN IMMEDIATE`, as Python's writers do), PostgreSQL READ COMMITTED without autocommit (the
   * table lock is `FOR UPDATE`).
   */
  private[catalog] def openForWrite(address: CatalogAddress, env: JdbcConnector.Env): Connection = address match {
    case a: SqliteAddress =>
      if (!a.dbFile.isFile)
        throw OmniTableErrors.notACatalog(a.display, s"there is no catalog file ${a.dbFile.getPath}")
      val props = new Properties()
      props.setProperty("busy_timeout", SqliteBusyTimeoutMs.toString)
      props.setProperty("journal_mode", "WAL")
      props.setProperty("synchronous", "NORMAL")
      // autocommit: the writer issues BEGIN IMMEDIATE / COMMIT itself (the driver would begin again at once)
      connect(a.display)(new org.sqlite.JDBC().connect("jdbc:sqlite:" + a.dbFile.getPath, props))
    case a: PostgresAddress =>
      val props = new Properties()
      a.user.foreach(props.setProperty("user", _))
      a.password.foreach {
        case Secret.Literal(pw) => props.setProperty("password", pw)
        case Secret.FromEnv(name) => props.setProperty("password", JdbcConnector.envPassword(a.display, name, env))
      }
      props.setProperty("ApplicationName", "omnitable-spark")
      val conn = configure(a.display, connect(a.display)(new org.postgresql.Driver().connect(a.jdbcUrl, props)))
      try conn.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED)
      catch { case e: SQLException => conn.close(); throw OmniTableErrors.cannotConnect(a.display, e) }
      conn
  }

  private def configure(display: String, conn: Connection): Connection =
    try {
      conn.setAutoCommit(false)
      conn
    } catch {
      case e: SQLException => conn.close(); throw OmniTableErrors.cannotConnect(display, e)
    }

  private def connect(display: String)(open: => Connection): Connection = {
    val conn = try open
    catch { case e: SQLException => throw OmniTableErrors.cannotConnect(display, e) }
    if (conn == null) throw OmniTableErrors.cannotConnect(display, new SQLException("driver rejected the URL"))
    conn
  }
}
