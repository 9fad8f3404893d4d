package io.omnitable.spark.metadata

import java.util

import io.omnitable.spark.catalog.{CatalogReader, TableSnapshot}
import io.omnitable.spark.conf.OmniTableConf
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.read.ScanBuilder
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * Metadata table `name` ([[MetadataTables]]) of the table `snap` resolved, e.g.
 * `omnitable.web.history` (the head of `main`) or `omnitable.web.files VERSION AS OF 3`. Read
 * only, in batch; its rows are read from the catalog on the driver when a scan is built.
 */
final class MetadataTable(reader: CatalogReader, snap: TableSnapshot, metadataName: String)
    extends Table
    with SupportsRead {

  override def name(): String = s"${snap.table.name}.$metadataName"

  override def schema(): StructType = MetadataTables.schema(metadataName)

  override def capabilities(): util.Set[TableCapability] = util.EnumSet.of(TableCapability.BATCH_READ)

  override def properties(): util.Map[String, String] = util.Map.of(
    "provider",
    "omnitable",
    "snapshot",
    snap.snapshot.label,
    "version",
    snap.snapshot.version.toString)

  /** The session's `spark.omnitable.metadata.page_size` is read when the scan is built. */
  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
    val pageSize = OmniTableConf(Map.empty).metadataPageSize
    () => new MetadataScan(new MetadataRows(reader, snap, pageSize), metadataName, schema())
  }

  override def toString: String = s"MetadataTable(${name()}, ${snap.snapshot.label})"
}
