package io.omnitable.spark.metadata

import scala.collection.mutable

import org.apache.spark.sql.catalyst.{CatalystTypeConverters, InternalRow}
import org.apache.spark.sql.connector.read.LocalScan
import org.apache.spark.sql.types.StructType

/**
 * A metadata table's rows, read once from the catalog on the driver (Spark plans a local table
 * scan over them). Rows are converted as they arrive, so a paged listing is held once.
 */
private[metadata] final class MetadataScan(source: MetadataRows, name: String, schema: StructType) extends LocalScan {

  private lazy val loaded: Array[InternalRow] = {
    val convert = CatalystTypeConverters.createToCatalystConverter(schema)
    val out = mutable.ArrayBuffer.empty[InternalRow]
    source.foreach(name)(row => out += convert(row).asInstanceOf[InternalRow])
    out.toArray
  }

  override def rows(): Array[InternalRow] = loaded

  override def readSchema(): StructType = schema

  override def description(): String = s"OmniTable metadata table $name"
}
