package io.omnitable.spark.catalog

import java.sql.SQLException

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}

/**
 * Reads an OmniTable catalog over JDBC (SQLite or PostgreSQL): every method opens a read-only
 * connection, checks the schema version against the bundled schema.sql, runs its queries in one
 * read transaction and closes the connection. The only writes are namespace rows
 * ([[createNamespace]], [[dropNamespace]]), each in one write transaction (refs are written by
 * [[RefWriter]], on its own connection).
 *
 * @param warehouse the warehouse string as the user gave it (its display form is what we log)
 */
final class CatalogReader(
    val warehouse: String,
    private[catalog] val env: JdbcConnector.Env = JdbcConnector.systemEnv) {

  val address: CatalogAddress = CatalogAddress.parse(warehouse)

  /** Statements this reader ran and rows they returned. */
  val queries: QueryCounter = new QueryCounter

  /** The address safe to print (no literal password). */
  def display: String = address.display

  /** Addresses of all tables ([[TableNames]]: `web` in `default`, `ns.web` elsewhere), sorted. */
  def listTables(): Seq[String] = withConnection("the table list")(conn => allTables(conn))

  /** Names of the tables of `namespace`, sorted; None if there is no such namespace. */
  def listTables(namespace: String): Option[Seq[String]] =
    withConnection(s"the tables of namespace '$namespace'") { conn =>
      Option.when(namespaceExists(conn, namespace)) {
        Jdbc.query(conn, "SELECT name FROM tables WHERE namespace = ? ORDER BY name", namespace)(_.getString(1))
      }
    }

  /** Every namespace, sorted (`default` included). */
  def listNamespaces(): Seq[String] = withConnection("the namespace list") { conn =>
    Jdbc.query(conn, "SELECT name FROM namespaces ORDER BY name")(_.getString(1))
  }

  /** The properties of `namespace` (values as text); None if there is no such namespace. */
  def namespaceProperties(namespace: String): Option[Map[String, String]] =
    withConnection(s"namespace '$namespace'") { conn =>
      Jdbc.query(conn, "SELECT properties FROM namespaces WHERE name = ?", namespace)(_.getString(1))
        .headOption.map(json => jsonObject(s"namespace '$namespace'", json))
    }

  /**
   * Inserts namespace `namespace` with `properties` (JSON object of text values); false when it
   * exists already (nothing written).
   */
  def createNamespace(namespace: String, properties: Map[String, String]): Boolean =
    withWriteConnection(s"create namespace '$namespace'") { conn =>
      if (namespaceExists(conn, namespace)) false
      else {
        val json = CatalogReader.Json.writeValueAsString(properties.asJava)
        update(conn, "INSERT INTO namespaces (name, properties, created_at) VALUES (?, ?, ?)", namespace, json, now())
        true
      }
    }

  /**
   * Deletes namespace `namespace` if it holds no table (the Python writer's protocol: the row is
   * deleted before the tables are counted, so a concurrent create_table in it, which locks the
   * row, either committed first and is counted or finds no namespace). `default` is never dropped.
   */
  def dropNamespace(namespace: String): CatalogReader.DropOutcome =
    withWriteConnection(s"drop namespace '$namespace'") { conn =>
      if (namespace == TableNames.DefaultNamespace) CatalogReader.IsDefault
      else if (update(conn, "DELETE FROM namespaces WHERE name = ?", namespace) == 0) CatalogReader.NoSuchNamespace
      else {
        val held = Jdbc.query(conn, "SELECT name FROM tables WHERE namespace = ? ORDER BY name", namespace)(
          _.getString(1))
        if (held.nonEmpty) {
          conn.jdbc.rollback()
          CatalogReader.NotEmpty(held.map(TableNames.address(namespace, _)))
        } else CatalogReader.Dropped
      }
    }

  /** Whether table `name` (an address: `web` or `ns.web`) exists. */
  def tableExists(name: String): Boolean = withConnection(s"table '$name'") { conn =>
    findTable(conn, name).isDefined
  }

  /** The names of table `name`'s refs of `kind` ("branch" or "tag"), sorted; none if no such table. */
  def refNames(name: String, kind: String): Seq[String] = withConnection(s"the refs of table '$name'") { conn =>
    findTable(conn, name).toSeq.flatMap { t =>
      Jdbc.query(conn, "SELECT name FROM refs WHERE table_id = ? AND kind = ? ORDER BY name", t.tableId, kind)(
        _.getString(1))
    }
  }

  /**
   * Table `name` at the snapshot `spec` names: schema, segments and the number of visible
   * batches (no batch name, fragment or file). With `batches`, checks those names are visible
   * (reading only their rows) and fails with [[OmniTableErrors.batchNotFound]] otherwise.
   */
  def loadTable(name: String, spec: SnapshotSpec, batches: Option[Seq[String]] = None): TableSnapshot =
    withConnection(s"table '$name'") { conn =>
      val table = findTable(conn, name).getOrElse(throw missingTable(conn, name))
      val snapshot = new SnapshotResolver(conn, table, display).resolve(spec)
      val root = meta(conn, "root").getOrElse(
        throw OmniTableErrors.corruptCatalog(display, "omnitable_meta has no 'root' entry"))
      batches.foreach(checkBatches(conn, table, snapshot.segments, _))
      TableSnapshot(
        display,
        DataPaths.rootUri(root, address, display),
        table,
        snapshot,
        loadColumns(conn, table, snapshot.segments),
        countBatches(conn, table, snapshot.segments)
      )
    }

  /**
   * The snapshot table `t` has right after its create (version 0 of `main`, no batches), before it
   * exists: what a CTAS writes against until its create commits with its first batch
   * ([[DdlWriter.createWithAppend]]).
   */
  def createdSnapshot(t: NewTable): TableSnapshot = withConnection(s"table '${t.address}'") { conn =>
    val root = meta(conn, "root").getOrElse(
      throw OmniTableErrors.corruptCatalog(display, "omnitable_meta has no 'root' entry"))
    val entry = TableEntry(t.tableId, t.address, t.location, jsonObject(s"table '${t.address}'", t.propertiesJson))
    val columns = t.allColumns.zipWithIndex.map { case (c, i) =>
      val dataType = CatalogTypes.parse(c.ddl)
      ColumnEntry(i, c.name, c.name, c.ddl, dataType, c.nullable, i, "active", c.group, None)
    }
    val main = SystemColumns.MainBranch
    val snapshot = SnapshotId(0L, Seq(Segment(main, 0L)), s"branch $main (version 0)")
    TableSnapshot(display, DataPaths.rootUri(root, address, display), entry, snapshot, columns, 0)
  }

  /** The names of the visible batches of `snap`, in table order (one row per batch). */
  def batchNames(snap: TableSnapshot): Seq[String] =
    withConnection(s"the batches of table '${snap.table.name}'") { conn =>
      loadBatchNames(conn, snap.table, snap.snapshot.segments)
    }

  /** The visible fragments of `snap` with their visible files and all their column statistics. */
  def loadFragments(snap: TableSnapshot): Seq[FragmentEntry] = listFragments(snap, FragmentScope.All).fragments

  /**
   * The fragments of `scope` in `snap`, reading only their rows of `fragments`, `files` and
   * `column_sets` (docs/spark.md, "How planning scales"). Option lists longer than
   * `maxPushedValues` are applied in memory instead of as SQL parameters; the listing is the same.
   */
  def listFragments(
      snap: TableSnapshot,
      scope: FragmentScope,
      maxPushedValues: Int = FragmentQuery.MaxPushedValues): FragmentListing =
    withConnection(s"the fragments of table '${snap.table.name}'") { conn =>
      new FragmentQuery(conn, snap, scope, maxPushedValues).run()
    }

  /**
   * What planning a full scan of `columns` on the executors reads ([[ScanOutline]]): the visible
   * batches, and the count and bytes of the files of the sets carrying those columns; None
   * (after one statement) when the batches hold fewer than `minFragments` fragments.
   */
  def scanOutline(snap: TableSnapshot, columns: Option[Set[Int]], minFragments: Long = 0L): Option[ScanOutline] =
    withConnection(s"the batches of table '${snap.table.name}'") { conn =>
      new ScanOutlineQuery(conn, snap, display).outline(columns, minFragments)
    }

  /** `(seq, row_count)` of the visible fragments of `batchIds` by batch, in `seq` order. */
  def fragmentSeqs(snap: TableSnapshot, batchIds: Seq[String]): Map[String, IndexedSeq[(Long, Long)]] =
    withConnection(s"the fragments of table '${snap.table.name}'") { conn =>
      new ScanOutlineQuery(conn, snap, display).fragmentSeqs(batchIds)
    }

  /**
   * [[listFragments]] of `scope` as an executor runs it for its slice of a scan planned there:
   * in the same read transaction, checks the snapshot's version still has its commit and was
   * not expired ([[OmniTableErrors.snapshotGoneDuringScan]] otherwise).
   */
  def listSlice(snap: TableSnapshot, scope: FragmentScope): FragmentListing =
    withConnection(s"the fragments of table '${snap.table.name}'") { conn =>
      val listing = new FragmentQuery(conn, snap, scope, FragmentQuery.MaxPushedValues).run()
      new ScanOutlineQuery(conn, snap, display).checkStillReadable()
      listing
    }

  /**
   * This catalog's address as executors can use it: a SQLite file by its absolute path (an
   * executor's working directory is not the driver's), PostgreSQL as given; None when the
   * address holds a password itself (it is never sent to executors) or the path has a `?`.
   */
  def executorWarehouse: Option[String] = address match {
    // a `?` would start the address's query: such a path stays on the driver
    case a: SqliteAddress if !a.dbFile.getAbsolutePath.contains('?') => Some("sqlite:///" + a.dbFile.getAbsolutePath)
    case a: PostgresAddress if !a.hasLiteralPassword => Some(warehouse)
    case _ => None
  }

  /** The hot column-group views declared on `snap`'s table (docs/governance.md). */
  def columnViews(snap: TableSnapshot): Seq[ColumnView] =
    withConnection(s"the views of table '${snap.table.name}'") { conn =>
      meta(conn, ColumnViews.metaKey(snap.table.tableId)).map(ColumnViews.parse).getOrElse(Nil)
    }

  /**
   * Runs `body` with the metadata tables' queries on one read connection (docs/spark.md,
   * "Metadata tables"); `what` names the fact for errors.
   */
  def withMetadata[T](what: String)(body: MetadataQueries => T): T =
    withConnection(what)(conn => body(new MetadataQueries(conn)))

  // --- internals ----------------------------------------------------------------------------

  /** Table `address` (`web` or `ns.web`); its entry's `name` is that address. */
  private[catalog] def findTable(conn: Jdbc.Conn, address: String): Option[TableEntry] =
    TableNames.split(address).flatMap {
      case (namespace, name) =>
        Jdbc.query(
          conn,
          "SELECT table_id, location, properties FROM tables WHERE namespace = ? AND name = ?",
          namespace,
          name) { rs =>
          val qualified = TableNames.address(namespace, name)
          TableEntry(rs.getString(1), qualified, rs.getString(2), jsonObject(s"table '$qualified'", rs.getString(3)))
        }.headOption
    }

  private def allTables(conn: Jdbc.Conn): Seq[String] =
    Jdbc.query(conn, "SELECT namespace, name FROM tables")(rs => TableNames.address(rs.getString(1), rs.getString(2)))
      .sorted

  private def namespaceExists(conn: Jdbc.Conn, namespace: String): Boolean =
    Jdbc.query(conn, "SELECT 1 FROM namespaces WHERE name = ?", namespace)(_.getInt(1)).nonEmpty

  /** The missing-table error for `address`, saying when its namespace does not exist either. */
  private def missingTable(conn: Jdbc.Conn, address: String): OmniTableAnalysisException = {
    val namespace = TableNames.split(address).map(_._1).filterNot(namespaceExists(conn, _))
    OmniTableErrors.tableNotFound(display, address, allTables(conn), namespace)
  }

  /** The JSON object `json` (the properties of `what`), values as text. */
  private def jsonObject(what: String, json: String): Map[String, String] = {
    val node =
      try CatalogReader.Json.readTree(json)
      catch {
        case e: com.fasterxml.jackson.core.JacksonException =>
          throw OmniTableErrors.corruptCatalog(display, s"the properties of $what are not JSON", e)
      }
    if (node == null || !node.isObject) {
      throw OmniTableErrors.corruptCatalog(display, s"the properties of $what are not a JSON object")
    }
    node.properties().asScala.map { e =>
      e.getKey -> (if (e.getValue.isTextual) e.getValue.textValue() else e.getValue.toString)
    }.toMap
  }

  private def loadColumns(conn: Jdbc.Conn, table: TableEntry, segments: Seq[Segment]): Seq[ColumnEntry] = {
    val (where, params) = Jdbc.visible("c", "columns", segments)
    Jdbc.query(
      conn,
      "SELECT c.column_id, c.name, c.physical_name, c.data_type, c.nullable, c.position, c.state, " +
        s"c.group_name, c.feature FROM columns c WHERE c.table_id = ? AND $where " +
        "AND c.state = 'active' ORDER BY c.position, c.column_id",
      (table.tableId +: params): _*
    ) { rs =>
      val name = rs.getString(2)
      val ddl = rs.getString(4)
      val dataType = try CatalogTypes.parse(ddl)
      catch {
        case NonFatal(e) => throw OmniTableErrors.unsupportedDataType(table.name, name, ddl, e)
      }
      ColumnEntry(
        rs.getInt(1),
        name,
        rs.getString(3),
        ddl,
        dataType,
        rs.getInt(5) != 0,
        rs.getInt(6),
        rs.getString(7),
        rs.getString(8),
        Option(rs.getString(9)))
    }
  }

  private def loadBatchNames(conn: Jdbc.Conn, table: TableEntry, segments: Seq[Segment]): Seq[String] = {
    val (where, params) = Jdbc.visible("b", "batches", segments)
    Jdbc.query(
      conn,
      s"SELECT b.name FROM batches b WHERE b.table_id = ? AND $where " +
        "ORDER BY b.position, b.name",
      (table.tableId +: params): _*)(_.getString(1))
  }

  /** How many batches are visible (counted by the database). */
  private def countBatches(conn: Jdbc.Conn, table: TableEntry, segments: Seq[Segment]): Int = {
    val (where, params) = Jdbc.visible("b", "batches", segments)
    Jdbc.query(conn, s"SELECT COUNT(*) FROM batches b WHERE b.table_id = ? AND $where", (table.tableId +: params): _*)(
      _.getLong(1).toInt).head
  }

  /**
   * Fails unless every name of `wanted` is a visible batch: reads the rows of those names only
   * (all visible names when the list is too long to send, and for the error message).
   */
  private def checkBatches(conn: Jdbc.Conn, table: TableEntry, segments: Seq[Segment], wanted: Seq[String]): Unit = {
    val distinct = wanted.distinct
    val found =
      if (distinct.size > FragmentQuery.MaxPushedValues) loadBatchNames(conn, table, segments).toSet
      else {
        val (visible, visibleParams) = Jdbc.visible("b", "batches", segments)
        val (in, inParams) = Jdbc.in("b.name", distinct)
        Jdbc.query(
          conn,
          s"SELECT DISTINCT b.name FROM batches b WHERE b.table_id = ? AND $in AND $visible",
          (table.tableId +: (inParams ++ visibleParams)): _*)(_.getString(1)).toSet
      }
    val missing = wanted.filterNot(found.contains)
    if (missing.nonEmpty)
      throw OmniTableErrors.batchNotFound(table.name, missing, loadBatchNames(conn, table, segments))
  }

  private def update(conn: Jdbc.Conn, sql: String, params: AnyRef*): Int =
    scala.util.Using.resource(conn.jdbc.prepareStatement(sql)) { stmt =>
      params.zipWithIndex.foreach { case (p, i) => stmt.setObject(i + 1, p) }
      stmt.executeUpdate()
    }

  private def now(): String =
    java.time.format.DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")
      .withZone(java.time.ZoneOffset.UTC).format(java.time.Instant.now())

  /** Like [[withConnection]] in a write transaction, committed when `body` returns. */
  private def withWriteConnection[T](what: String)(body: Jdbc.Conn => T): T = {
    val jdbc = JdbcConnector.openForWrite(address, env)
    val conn = Jdbc.Conn(jdbc, queries)
    try {
      checkSchemaVersion(conn)
      val out = body(conn)
      jdbc.commit()
      out
    } catch {
      case e: OmniTableAnalysisException => throw e
      case e: SQLException => throw OmniTableErrors.catalogWriteFailed(display, what, e)
    } finally {
      try jdbc.rollback()
      catch { case NonFatal(_) => }
      jdbc.close()
    }
  }

  private def meta(conn: Jdbc.Conn, key: String): Option[String] =
    Jdbc.query(conn, "SELECT value FROM omnitable_meta WHERE key = ?", key)(_.getString(1)).headOption

  private[catalog] def checkSchemaVersion(conn: Jdbc.Conn): Unit = {
    val found = try meta(conn, "schema_version")
    catch {
      case e: SQLException => throw OmniTableErrors.notACatalog(
          display,
          s"it has no omnitable_meta table (${Option(e.getMessage).getOrElse(e.toString)})")
    }
    found match {
      case None => throw OmniTableErrors.notACatalog(display, "omnitable_meta has no schema_version")
      case Some(v) if v.trim != SchemaFile.version.toString =>
        throw OmniTableErrors.schemaVersionMismatch(display, v.trim, SchemaFile.version)
      case _ =>
    }
  }

  /**
   * Runs `body` in one read transaction on a checked connection (a kept PostgreSQL one when there
   * is one: [[ReadConnections]]), translates driver errors.
   */
  private[catalog] def withConnection[T](what: String)(body: Jdbc.Conn => T): T = {
    val lease = ReadConnections.borrow(address, env)
    val conn = Jdbc.Conn(lease.connection, queries)
    try {
      checkSchemaVersion(conn)
      body(conn)
    } catch {
      case e: OmniTableAnalysisException => throw e
      case e: SQLException => throw OmniTableErrors.catalogQueryFailed(display, what, e)
    } finally lease.release()
  }
}

object CatalogReader {

  /** What [[CatalogReader.dropNamespace]] did. */
  sealed trait DropOutcome
  case object Dropped extends DropOutcome
  case object NoSuchNamespace extends DropOutcome
  case object IsDefault extends DropOutcome
  final case class NotEmpty(tables: Seq[String]) extends DropOutcome

  private val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  /**
   * The reader of a warehouse configured in setting `key` (a session or catalog setting). A
   * literal password there is refused: Spark shows settings in its UI, event logs and `SET`
   * output and copies them into the Hadoop configuration executors get.
   */
  def configured(key: String, warehouse: String, env: JdbcConnector.Env = JdbcConnector.systemEnv): CatalogReader =
    checked(warehouse, env, s"setting $key")

  /**
   * The reader of a warehouse named by a read option. A literal password is refused (Spark prints
   * read options in plans: EXPLAIN, event logs), and an `env:NAME` password is read only when one
   * of the `configured` warehouses (the static configuration, see
   * `OmniTableConf.configuredWarehouses`) sends that same variable, as that same user, to that same
   * server (any database on it): a per-query option must not send this process's secrets to a
   * server it chooses.
   */
  def fromReadOption(
      warehouse: String,
      configured: => Seq[String],
      env: JdbcConnector.Env = JdbcConnector.systemEnv): CatalogReader = {
    val reader = checked(warehouse, env, "read option 'warehouse'")
    reader.address match {
      case a: PostgresAddress
          if a.password.exists(_.isInstanceOf[Secret.FromEnv]) && !configured.exists(sameSecretTarget(a, _)) =>
        throw OmniTableErrors.envPasswordInReadOption(a.display)
      case _ => reader
    }
  }

  /** Whether `other` (a configured warehouse) sends `a`'s env password, as `a`'s user, to `a`'s server. */
  private def sameSecretTarget(a: PostgresAddress, other: String): Boolean =
    scala.util.Try(CatalogAddress.parse(other)).toOption.exists {
      case b: PostgresAddress =>
        b.host.equalsIgnoreCase(a.host) && b.port == a.port && b.user == a.user && b.password == a.password
      case _ => false
    }

  private def checked(warehouse: String, env: JdbcConnector.Env, where: String): CatalogReader = {
    val reader = new CatalogReader(warehouse, env)
    reader.address match {
      case a: PostgresAddress if a.hasLiteralPassword => throw OmniTableErrors.passwordInConfig(a.display, where)
      case _ => reader
    }
  }
}
