package io.omnitable.spark.source

import java.util

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{CatalogReader, CatalogWriter, Failpoints, SnapshotSpec, TableNames}
import io.omnitable.spark.conf.{OmniTableConf, SparkVersionCheck}
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}
import io.omnitable.spark.metadata.{MetadataTable, MetadataTables}
import io.omnitable.spark.procedures.OmniTableProcedures
import io.omnitable.spark.write.TableFrames
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.analysis.{
  NamespaceAlreadyExistsException,
  NonEmptyNamespaceException,
  NoSuchNamespaceException,
  NoSuchTableException
}
import org.apache.spark.sql.connector.catalog.{
  Column,
  Identifier,
  NamespaceChange,
  ProcedureCatalog,
  StagedTable,
  StagingTableCatalog,
  SupportsNamespaces,
  Table,
  TableChange
}
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.omnitable.SqlInternals
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * The tables of one warehouse as a Spark catalog (`spark.sql.catalog.omnitable`, option
 * `warehouse`, else session `spark.omnitable.warehouse`): `SELECT … FROM omnitable.web`,
 * `SHOW TABLES IN omnitable`, `DESCRIBE TABLE omnitable.web`, and time travel with
 * `VERSION AS OF <n>` (a version) or `VERSION AS OF '<ref>'` (a branch or tag) and
 * `TIMESTAMP AS OF`. Branches and tags are also tables of their own, Iceberg's way:
 * `omnitable.web.branch_audit`, `omnitable.web.tag_v1` ([[TableAddress]]); metadata tables
 * are `omnitable.web.history`, `omnitable.web.files VERSION AS OF 3`, ... ([[MetadataTables]]).
 * Namespaces (one level): `CREATE NAMESPACE omnitable.ns`, `SHOW NAMESPACES IN omnitable`,
 * `SHOW TABLES IN omnitable.ns`, `SELECT … FROM omnitable.ns.web`, `DROP NAMESPACE
 * omnitable.ns`; `default` holds the tables named without one. Procedures:
 * `CALL omnitable.system.<name>(...)` ([[OmniTableProcedures]]). Tables take appends
 * ([[OmniTableTable]]), `CREATE TABLE` (also `AS SELECT`), `ALTER TABLE … ADD COLUMNS` ([[TableDdl]])
 * and `DROP TABLE`.
 */
class OmniTableCatalog extends StagingTableCatalog with SupportsNamespaces with ProcedureCatalog {

  private var catalogName: String = "omnitable"
  private var catalogOptions: Map[String, String] = Map.empty
  @volatile private var cachedReader: CatalogReader = _

  override def initialize(name: String, options: CaseInsensitiveStringMap): Unit = {
    SparkVersionCheck.verified
    catalogName = name
    catalogOptions = options.asCaseSensitiveMap().asScala.toMap
  }

  override def name(): String = catalogName

  /**
   * Resolved on first use, so a session may set `spark.omnitable.warehouse` after startup. The
   * catalog's `warehouse` option, else that session setting: configuration, so `env:NAME`
   * passwords resolve and literal ones are refused.
   */
  private def reader: CatalogReader = {
    if (cachedReader == null) {
      val conf = OmniTableConf(catalogOptions)
      val key =
        if (conf.warehouseFromOptions) s"spark.sql.catalog.$catalogName.warehouse"
        else OmniTableConf.WAREHOUSE.sessionKey
      cachedReader = CatalogReader.configured(key, conf.warehouse)
    }
    cachedReader
  }

  private lazy val procedures = new OmniTableProcedures(() => reader, CatalogFrames)

  /** The tables of this catalog as DataFrames, read by its own reader (see [[TableFrames]]). */
  private object CatalogFrames extends TableFrames {
    override def read(table: String, options: Map[String, String]): DataFrame = {
      val all = catalogOptions.filter { case (k, _) => !k.equalsIgnoreCase("warehouse") } ++ options +
        (ReadOptions.Table -> table)
      val handle = ReadOptions.parse(all).load(reader, all)
      SqlInternals.dataFrame(SparkSession.active, new OmniTableTable(handle), all)
    }
  }
  override def loadProcedure(ident: Identifier): UnboundProcedure = procedures.load(ident)
  override def listProcedures(namespace: Array[String]): Array[Identifier] = procedures.list(namespace)

  /** `SHOW TABLES IN omnitable` lists `default`'s tables (as `omnitable.<name>`). */
  override def listTables(namespace: Array[String]): Array[Identifier] = {
    val ns = namespace match {
      case Array() => TableNames.DefaultNamespace
      case Array(one) => one
      case _ => throw new NoSuchNamespaceException(namespace)
    }
    val names = reader.listTables(ns).getOrElse(throw new NoSuchNamespaceException(namespace))
    names.map(t => Identifier.of(namespace, t)).toArray
  }

  // --- namespaces ------------------------------------------------------------------------------

  override def defaultNamespace(): Array[String] = Array(TableNames.DefaultNamespace)

  override def listNamespaces(): Array[Array[String]] = reader.listNamespaces().map(Array(_)).toArray

  /** Namespaces have one level: none is inside another. */
  override def listNamespaces(namespace: Array[String]): Array[Array[String]] = namespace match {
    case Array() => listNamespaces()
    case _ if namespaceExists(namespace) => Array.empty
    case _ => throw new NoSuchNamespaceException(namespace)
  }

  override def namespaceExists(namespace: Array[String]): Boolean = namespace match {
    case Array(one) => reader.namespaceProperties(one).isDefined
    case _ => false
  }

  override def loadNamespaceMetadata(namespace: Array[String]): util.Map[String, String] =
    namespace match {
      case Array(one) => reader.namespaceProperties(one).getOrElse(throw new NoSuchNamespaceException(namespace)).asJava
      case _ => throw new NoSuchNamespaceException(namespace)
    }

  override def createNamespace(namespace: Array[String], metadata: util.Map[String, String]): Unit = {
    val name = oneLevel(namespace)
    if (!reader.createNamespace(name, metadata.asScala.toMap)) throw new NamespaceAlreadyExistsException(namespace)
  }

  override def alterNamespace(namespace: Array[String], changes: NamespaceChange*): Unit =
    throw OmniTableErrors.readOnly(s"alter namespace ${namespace.mkString(".")}")

  /**
   * Spark's rule: a namespace holding tables is refused (NON_EMPTY_NAMESPACE) without CASCADE.
   * With CASCADE it is refused too while it holds tables: dropping tables (and deleting their
   * files) is the Python API's (`Warehouse.drop_namespace(name, cascade=True)`).
   */
  /**
   * DROP NAMESPACE: an empty namespace is dropped; one holding tables fails with Spark's
   * NON_EMPTY_NAMESPACE error unless CASCADE, which drops it and every table in it in one catalog
   * transaction (tables in name order, as DROP TABLE: their rows, then their directories).
   * `default` is never dropped.
   */
  override def dropNamespace(namespace: Array[String], cascade: Boolean): Boolean = {
    val name = oneLevel(namespace)
    if (name == TableNames.DefaultNamespace)
      throw OmniTableErrors.cannotDropNamespace(name, "it holds the tables named without a namespace")
    if (cascade) dropCascade(namespace, name)
    else reader.dropNamespace(name) match {
      case CatalogReader.Dropped => true
      case CatalogReader.NoSuchNamespace => throw new NoSuchNamespaceException(namespace)
      case CatalogReader.IsDefault =>
        throw OmniTableErrors.cannotDropNamespace(name, "it holds the tables named without a namespace")
      case CatalogReader.NotEmpty(_) => throw new NonEmptyNamespaceException(namespace)
    }
  }

  private def dropCascade(namespace: Array[String], name: String): Boolean = {
    val failpoints = Failpoints(Option(SQLConf.get.getConfString(OmniTableTable.FailpointConf, null)))
    val writer = new CatalogWriter(reader.address, failpoints = failpoints)
    val dropped = writer.dropNamespaceCascade(name).getOrElse(throw new NoSuchNamespaceException(namespace))
    val conf = SparkSession.active.sessionState.newHadoopConf()
    dropped.foreach { case (_, uri) =>
      val dir = new Path(uri)
      try dir.getFileSystem(conf).delete(dir, true)
      catch { case NonFatal(_) => } // the rows are gone: the files are unreferenced
    }
    true
  }

  private def oneLevel(namespace: Array[String]): String = namespace match {
    case Array(one) if TableNames.validName(one) => one
    case _ => throw OmniTableErrors.invalidNamespace(namespace.mkString("."))
  }

  // --- tables ----------------------------------------------------------------------------------

  override def loadTable(ident: Identifier): Table = load(ident, SnapshotSpec.Head)

  override def loadTable(ident: Identifier, version: String): Table = {
    val v = version.trim
    load(
      ident,
      v.toLongOption match {
        case Some(n) => SnapshotSpec(version = Some(n))
        case None => SnapshotSpec(ref = Some(v))
      })
  }

  override def loadTable(ident: Identifier, timestamp: Long): Table =
    load(ident, SnapshotSpec(asOfMicros = Some(timestamp)))

  /**
   * A missing table raises OmniTable's "Cannot find table" error (condition
   * TABLE_OR_VIEW_NOT_FOUND) rather than a NoSuchTableException: on that one Spark would go on
   * to read `omnitable.<name>` as a file query on the `omnitable` data source (the same name as
   * this catalog) and report a confusing "unsupported data source" error instead. A branch or
   * tag address ([[TableAddress]]) reads through the same path as the read options `branch` and
   * `tag`; a ref the table lacks is a missing table naming the table and the ref.
   */
  private def load(ident: Identifier, spec: SnapshotSpec): Table = {
    val address = resolve(ident).getOrElse(throw unknownIdentifier(ident))
    address.metadata match {
      case Some(name) => new MetadataTable(reader, reader.loadTable(address.tableAddress, spec), name)
      case None =>
        misspeltMetadata(ident, address).foreach(e => throw e)
        loadData(address, spec)
    }
  }

  /**
   * `omnitable.web.<name>` (or `omnitable.ns.web.<name>`) of an existing table where `name` is no
   * metadata table and no ref: an error listing the metadata tables; anything else is a missing
   * table.
   */
  private def unknownIdentifier(ident: Identifier): Exception =
    metadataNotFound(ident).getOrElse(new NoSuchTableException(ident))

  private def metadataNotFound(ident: Identifier): Option[Exception] = {
    val table = ident.namespace() match {
      case Array(t) => Some(t)
      case Array(ns, t) => Some(TableNames.address(ns, t))
      case _ => None
    }
    table.filter(reader.tableExists).map { t =>
      OmniTableErrors.metadataTableNotFound(reader.display, t, ident.name(), MetadataTables.Names)
    }
  }

  /** `omnitable.web.histroy`: no table `web.histroy`, but a table `web` (see [[unknownIdentifier]]). */
  private def misspeltMetadata(ident: Identifier, address: TableAddress): Option[Exception] =
    if (address.ref.isDefined || ident.namespace().length != 1 || reader.tableExists(address.tableAddress)) None
    else metadataNotFound(ident)

  private def loadData(address: TableAddress, spec: SnapshotSpec): Table = {
    val options = catalogOptions + (ReadOptions.Table -> address.tableAddress)
    val handle =
      try ReadOptions(address.tableAddress, address.spec(spec), None).load(reader, options)
      catch {
        case e: OmniTableAnalysisException if e.omniErrorClass == OmniTableErrors.RefNotFound =>
          throw missingRef(address).getOrElse(e)
      }
    new OmniTableTable(handle)
  }

  /** The error for `address` when the ref it names does not exist (None: it exists, or names none). */
  private def missingRef(address: TableAddress): Option[OmniTableAnalysisException] = address.ref.flatMap {
    case (kind, name) =>
      val existing = reader.refNames(address.tableAddress, kind)
      Option.when(!existing.contains(name)) {
        OmniTableErrors.refTableNotFound(reader.display, address.display, address.tableAddress, kind, name, existing)
      }
  }

  private def resolve(ident: Identifier): Option[TableAddress] = TableAddress.resolve(ident, reader.tableExists)

  override def tableExists(ident: Identifier): Boolean = resolve(ident).exists {
    case a @ TableAddress(_, _, None, None) => reader.tableExists(a.tableAddress)
    case a @ TableAddress(_, _, None, Some(_)) => reader.tableExists(a.tableAddress)
    case a @ TableAddress(_, _, Some((kind, name)), _) => reader.refNames(a.tableAddress, kind).contains(name)
  }

  private def failpoints: Failpoints = Failpoints(Option(SQLConf.get.getConfString(OmniTableTable.FailpointConf, null)))

  /**
   * `CREATE TABLE omnitable.web (...) USING omnitable TBLPROPERTIES (...)`: Python's
   * `create_table` ([[TableDdl]]). A CTAS takes [[stageCreate]] instead.
   */
  override def createTable(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): Table = {
    new TableDdl(reader, failpoints).create(ident, columns.toSeq, partitions.toSeq, properties.asScala.toMap)
    loadTable(ident)
  }

  /**
   * The create of a CTAS (`CREATE TABLE … AS SELECT`, `writeTo(...).create()`), atomic: checked
   * here, nothing written; the query's tasks write the first batch's files, and its commit creates
   * the table with that batch in ONE catalog transaction ([[TableDdl.stage]]), so nothing is
   * visible before and a failed job, a killed commit or a name taken meanwhile
   * (TABLE_OR_VIEW_ALREADY_EXISTS) leave no table, no rows and no files. REPLACE TABLE is refused:
   * Spark's non-atomic REPLACE drops the table before its query runs.
   */
  override def stageCreate(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): StagedTable =
    new TableDdl(reader, failpoints).stage(ident, columns.toSeq, partitions.toSeq, properties.asScala.toMap)

  override def stageReplace(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): StagedTable = throw TableDdl.refuseReplace(ident)

  override def stageCreateOrReplace(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): StagedTable = throw TableDdl.refuseReplace(ident)

  /** `ALTER TABLE omnitable.web ADD COLUMNS (...)`: Python's `add_columns` of no data ([[TableDdl]]). */
  override def alterTable(ident: Identifier, changes: TableChange*): Table = resolve(ident) match {
    case Some(a @ TableAddress(_, _, None, None)) if reader.tableExists(a.tableAddress) =>
      new TableDdl(reader, failpoints).alter(a, changes)
      loadTable(ident)
    case Some(TableAddress(_, _, Some(_), _)) => throw TableDdl.refuseRef(ident)
    case Some(TableAddress(_, _, _, Some(_))) => throw OmniTableErrors.readOnly(s"alter the metadata table $ident")
    case _ => throw new NoSuchTableException(ident)
  }

  /**
   * `DROP TABLE omnitable.web`: as `Warehouse.drop_table` — every catalog row of the table in one
   * transaction, then its directory `<name>-<table_id>` (unique to the dropped table, so a table
   * re-created under the name keeps its files). False (Spark: table not found) for a missing
   * table; a branch or tag address is refused (drop a ref with the Python API).
   */
  override def dropTable(ident: Identifier): Boolean = resolve(ident) match {
    case Some(a @ TableAddress(_, _, None, None)) if reader.tableExists(a.tableAddress) =>
      val snap = reader.loadTable(a.tableAddress, SnapshotSpec.Head)
      val writer = new CatalogWriter(reader.address, failpoints = failpoints)
      val dropped = writer.dropTable(snap.table.tableId, a.tableAddress)
      if (dropped) {
        val dir = new Path(snap.tableUri)
        try dir.getFileSystem(SparkSession.active.sessionState.newHadoopConf()).delete(dir, true)
        catch { case NonFatal(_) => } // the rows are gone: the files are unreferenced
      }
      dropped
    case Some(TableAddress(_, _, Some(_), _)) => throw OmniTableErrors.readOnly(s"drop the branch or tag $ident")
    case Some(TableAddress(_, _, _, Some(_))) => throw OmniTableErrors.readOnly(s"drop the metadata table $ident")
    case _ => false
  }

  override def renameTable(oldIdent: Identifier, newIdent: Identifier): Unit =
    throw OmniTableErrors.readOnly(s"rename table $oldIdent")
}
