package io.omnitable.spark.source

import java.util

import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.sources.DataSourceRegister
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/** `spark.read.format("omnitable")`: reads one logical table of a warehouse. */
class OmniTableDataSource extends TableProvider with DataSourceRegister {

  override def shortName(): String = "omnitable"

  override def inferSchema(options: CaseInsensitiveStringMap): StructType =
    throw new UnsupportedOperationException("Cannot read omnitable tables yet: the connector is being built")

  override def getTable(schema: StructType, partitioning: Array[Transform],
      properties: util.Map[String, String]): Table =
    throw new UnsupportedOperationException("Cannot read omnitable tables yet: the connector is being built")
}
