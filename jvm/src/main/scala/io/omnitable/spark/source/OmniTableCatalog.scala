package io.omnitable.spark.source

import java.util

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{CatalogReader, SnapshotSpec}
import io.omnitable.spark.conf.{OmniTableConf, SparkVersionCheck}
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}
import io.omnitable.spark.metadata.{MetadataTable, MetadataTables}
import io.omnitable.spark.procedures.OmniTableProcedures
import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.connector.catalog.{Column, Identifier, ProcedureCatalog, Table, TableCatalog, TableChange}
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * The tables of one warehouse as a Spark catalog (`spark.sql.catalog.omnitable`, option
 * `warehouse`, else session `spark.omnitable.warehouse`): `SELECT … FROM omnitable.web`,
 * `SHOW TABLES IN omnitable`, `DESCRIBE TABLE omnitable.web`, and time travel with
 * `VERSION AS OF <n>` (a version) or `VERSION AS OF '<ref>'` (a branch or tag) and
 * `TIMESTAMP AS OF`. Branches and tags are also tables of their own, Iceberg's way:
 * `omnitable.web.branch_audit`, `omnitable.web.tag_v1` ([[TableAddress]]); metadata tables
 * are `omnitable.web.history`, `omnitable.web.files VERSION AS OF 3`, ... ([[MetadataTables]]).
 * Read-only: tables are written through the Python API. Procedures:
 * `CALL omnitable.system.<name>(...)` ([[OmniTableProcedures]]).
 */
class OmniTableCatalog extends TableCatalog with ProcedureCatalog {

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

  private lazy val procedures = new OmniTableProcedures(() => reader)
  override def loadProcedure(ident: Identifier): UnboundProcedure = procedures.load(ident)
  override def listProcedures(namespace: Array[String]): Array[Identifier] = procedures.list(namespace)

  override def listTables(namespace: Array[String]): Array[Identifier] = {
    if (namespace.nonEmpty) throw new NoSuchNamespaceException(namespace)
    reader.listTables().map(t => Identifier.of(Array.empty[String], t)).toArray
  }

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
    val address = TableAddress.parse(ident).getOrElse(throw unknownIdentifier(ident))
    address.metadata match {
      case Some(name) => new MetadataTable(reader, reader.loadTable(address.table, spec), name)
      case None => loadData(address, spec)
    }
  }

  /**
   * `omnitable.web.<name>` of an existing table `web` where `name` is no metadata table and no
   * ref: an error listing the metadata tables; anything else is a missing table.
   */
  private def unknownIdentifier(ident: Identifier): Exception = ident.namespace() match {
    case Array(table) if reader.tableExists(table) =>
      OmniTableErrors.metadataTableNotFound(reader.display, table, ident.name(), MetadataTables.Names)
    case _ => new NoSuchTableException(ident)
  }

  private def loadData(address: TableAddress, spec: SnapshotSpec): Table = {
    val options = catalogOptions + (ReadOptions.Table -> address.table)
    val handle =
      try ReadOptions(address.table, address.spec(spec), None).load(reader, options)
      catch {
        case e: OmniTableAnalysisException if e.omniErrorClass == OmniTableErrors.RefNotFound =>
          throw missingRef(address).getOrElse(e)
      }
    new OmniTableTable(handle)
  }

  /** The error for `address` when the ref it names does not exist (None: it exists, or names none). */
  private def missingRef(address: TableAddress): Option[OmniTableAnalysisException] = address.ref.flatMap {
    case (kind, name) =>
      val existing = reader.refNames(address.table, kind)
      Option.when(!existing.contains(name)) {
        OmniTableErrors.refTableNotFound(reader.display, address.display, address.table, kind, name, existing)
      }
  }

  override def tableExists(ident: Identifier): Boolean = TableAddress.parse(ident).exists {
    case TableAddress(table, None, _) => reader.tableExists(table)
    case TableAddress(table, Some((kind, name)), _) => reader.refNames(table, kind).contains(name)
  }

  override def createTable(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): Table = throw OmniTableErrors.readOnly(s"create table $ident")

  override def alterTable(ident: Identifier, changes: TableChange*): Table =
    throw OmniTableErrors.readOnly(s"alter table $ident")

  override def dropTable(ident: Identifier): Boolean = throw OmniTableErrors.readOnly(s"drop table $ident")

  override def renameTable(oldIdent: Identifier, newIdent: Identifier): Unit =
    throw OmniTableErrors.readOnly(s"rename table $oldIdent")
}
