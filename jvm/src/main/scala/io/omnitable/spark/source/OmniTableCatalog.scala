package io.omnitable.spark.source

import java.util

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{CatalogReader, CatalogWriter, Failpoints, SnapshotSpec}
import io.omnitable.spark.conf.{OmniTableConf, SparkVersionCheck}
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.analysis.{NoSuchNamespaceException, NoSuchTableException}
import org.apache.spark.sql.connector.catalog.{Column, Identifier, Table, TableCatalog, TableChange}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * The tables of one warehouse as a Spark catalog (`spark.sql.catalog.omnitable`, option
 * `warehouse`, else session `spark.omnitable.warehouse`): `SELECT … FROM omnitable.web`,
 * `SHOW TABLES IN omnitable`, `DESCRIBE TABLE omnitable.web`, and time travel with
 * `VERSION AS OF <n>` (a version) or `VERSION AS OF '<ref>'` (a branch or tag) and
 * `TIMESTAMP AS OF`. Branches and tags are also tables of their own, Iceberg's way:
 * `omnitable.web.branch_audit`, `omnitable.web.tag_v1` ([[TableAddress]]). Tables take appends
 * ([[OmniTableTable]]) and `DROP TABLE`; creating and altering tables is the Python API's.
 */
class OmniTableCatalog extends TableCatalog {

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
    val address = TableAddress.parse(ident).getOrElse(throw new NoSuchTableException(ident))
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
    case TableAddress(table, None) => reader.tableExists(table)
    case TableAddress(table, Some((kind, name))) => reader.refNames(table, kind).contains(name)
  }

  override def createTable(
      ident: Identifier,
      columns: Array[Column],
      partitions: Array[Transform],
      properties: util.Map[String, String]): Table = throw OmniTableErrors.readOnly(s"create table $ident")

  override def alterTable(ident: Identifier, changes: TableChange*): Table =
    throw OmniTableErrors.readOnly(s"alter table $ident")

  /**
   * `DROP TABLE omnitable.web`: as `Warehouse.drop_table` — every catalog row of the table in one
   * transaction, then its directory `<name>-<table_id>` (unique to the dropped table, so a table
   * re-created under the name keeps its files). False (Spark: table not found) for a missing
   * table; a branch or tag address is refused (drop a ref with the Python API).
   */
  override def dropTable(ident: Identifier): Boolean = TableAddress.parse(ident) match {
    case Some(TableAddress(table, None)) if reader.tableExists(table) =>
      val snap = reader.loadTable(table, SnapshotSpec.Head)
      val failpoints = Failpoints(Option(SQLConf.get.getConfString(OmniTableTable.FailpointConf, null)))
      val dropped = new CatalogWriter(reader.address, failpoints = failpoints).dropTable(snap.table.tableId, table)
      if (dropped) {
        val dir = new Path(snap.tableUri)
        try dir.getFileSystem(SparkSession.active.sessionState.newHadoopConf()).delete(dir, true)
        catch { case NonFatal(_) => } // the rows are gone: the files are unreferenced
      }
      dropped
    case Some(TableAddress(_, Some(_))) => throw OmniTableErrors.readOnly(s"drop the branch or tag $ident")
    case _ => false
  }

  override def renameTable(oldIdent: Identifier, newIdent: Identifier): Unit =
    throw OmniTableErrors.readOnly(s"rename table $oldIdent")
}
