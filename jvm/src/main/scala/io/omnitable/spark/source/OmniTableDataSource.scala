package io.omnitable.spark.source

import java.util

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.CatalogReader
import io.omnitable.spark.conf.{OmniTableConf, SparkVersionCheck}
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.read.plan.TableHandle
import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.sources.DataSourceRegister
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * `spark.read.format("omnitable").option("warehouse", uri).load("web")`: one logical table.
 * Options: `warehouse` (else session `spark.omnitable.warehouse`), `versionAsOf`,
 * `timestampAsOf`, `branch`, `tag`, `batches` (comma list) and the `spark.omnitable.read.*`
 * settings by their short names (see [[OmniTableConf]]). A `warehouse` option with an `env:NAME`
 * password must name a warehouse configured for the session (`CatalogReader.fromReadOption`).
 */
class OmniTableDataSource extends TableProvider with DataSourceRegister {

  // Spark calls inferSchema then getTable on this instance: load once so both see one snapshot.
  private var loaded: Option[(Map[String, String], TableHandle)] = None

  override def shortName(): String = "omnitable"

  override def supportsExternalMetadata(): Boolean = false

  override def inferSchema(options: CaseInsensitiveStringMap): StructType =
    new OmniTableTable(handle(options.asCaseSensitiveMap().asScala.toMap)).schema

  override def getTable(
      schema: StructType,
      partitioning: Array[Transform],
      properties: util.Map[String, String]): Table = {
    if (partitioning.nonEmpty) {
      throw OmniTableErrors.invalidOption(
        "partitioning",
        partitioning.mkString(", "),
        "omnitable tables are not partitioned")
    }
    new OmniTableTable(handle(properties.asScala.toMap))
  }

  // Checked on use, not in the constructor: Spark instantiates every registered source to
  // look up any format name.
  private def handle(options: Map[String, String]): TableHandle = loaded match {
    case Some((opts, h)) if opts == options => h
    case _ =>
      SparkVersionCheck.verified
      val conf = OmniTableConf(options)
      val reader =
        if (conf.warehouseFromOptions)
          CatalogReader.fromReadOption(conf.warehouse, OmniTableConf.configuredWarehouses())
        else CatalogReader.configured(OmniTableConf.WAREHOUSE.sessionKey, conf.warehouse)
      val h = ReadOptions.parse(options).load(reader, options)
      loaded = Some(options -> h)
      h
  }
}
