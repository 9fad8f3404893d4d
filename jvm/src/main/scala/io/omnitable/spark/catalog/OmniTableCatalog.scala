package io.omnitable.spark.catalog

import java.util

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException
import org.apache.spark.sql.connector.catalog.{Column, Identifier, Table, TableCatalog, TableChange}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** Read-only Spark catalog of the tables of one OmniTable warehouse (`spark.sql.catalog.omnitable`). */
class OmniTableCatalog extends TableCatalog {

  private var catalogName: String = "omnitable"
  private var catalogOptions: Map[String, String] = Map.empty
  private[spark] def options: Map[String, String] = catalogOptions

  override def initialize(name: String, options: CaseInsensitiveStringMap): Unit = {
    catalogName = name
    import scala.jdk.CollectionConverters._
    catalogOptions = options.asCaseSensitiveMap().asScala.toMap
  }

  override def name(): String = catalogName

  override def listTables(namespace: Array[String]): Array[Identifier] = Array.empty

  override def loadTable(ident: Identifier): Table = throw new NoSuchTableException(ident)

  override def createTable(ident: Identifier, columns: Array[Column], partitions: Array[Transform],
      properties: util.Map[String, String]): Table = throw OmniTableErrors.readOnly(s"create table $ident")

  override def alterTable(ident: Identifier, changes: TableChange*): Table =
    throw OmniTableErrors.readOnly(s"alter table $ident")

  override def dropTable(ident: Identifier): Boolean = throw OmniTableErrors.readOnly(s"drop table $ident")

  override def renameTable(oldIdent: Identifier, newIdent: Identifier): Unit =
    throw OmniTableErrors.readOnly(s"rename table $oldIdent")
}
