package io.omnitable.spark.source

import java.util

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{CatalogWriter, Failpoints}
import io.omnitable.spark.conf.{OmniTableConf, TableProperties}
import io.omnitable.spark.read.plan.{OmniTableScanBuilder, OptimizerMarks, ReadColumn, TableHandle}
import io.omnitable.spark.write.{MetadataDelete, OmniTableDeltaOperation, OmniTableWriteBuilder, RowChanges}
import org.apache.spark.sql.connector.catalog.{
  MetadataColumn,
  SupportsDeleteV2,
  SupportsMetadataColumns,
  SupportsRead,
  SupportsRowLevelOperations,
  SupportsWrite,
  Table,
  TableCapability
}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.read.ScanBuilder
import org.apache.spark.sql.connector.write.{
  LogicalWriteInfo,
  RowLevelOperationBuilder,
  RowLevelOperationInfo,
  WriteBuilder
}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{DataType, StructType}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * A logical wide table at one snapshot: `_ai_unique_id_`, `_ai_append_name_`, then its visible
 * columns in position order; metadata columns `_ai_fragment_` and `_ai_row_offset_` are
 * available by name. Appends write a new batch ([[OmniTableWriteBuilder]]); the table checks the
 * written columns itself (ACCEPT_ANY_SCHEMA: the data names the user columns, never the two system
 * columns).
 */
final class OmniTableTable(val handle: TableHandle, val marks: OptimizerMarks = OptimizerMarks.Empty)
    extends Table
    with SupportsRead
    with SupportsWrite
    with SupportsRowLevelOperations
    with SupportsDeleteV2
    with SupportsMetadataColumns {

  private val snap = handle.snapshot

  override def name(): String = snap.table.name

  override lazy val schema: StructType = ReadColumn.schema(ReadColumn.tableColumns(snap))

  override def capabilities(): util.Set[TableCapability] =
    util.EnumSet.of(
      TableCapability.BATCH_READ,
      TableCapability.BATCH_WRITE,
      TableCapability.TRUNCATE,
      TableCapability.ACCEPT_ANY_SCHEMA)

  override def newWriteBuilder(info: LogicalWriteInfo): WriteBuilder =
    new OmniTableWriteBuilder(snap, catalogWriter(), handle.options, info, defineColumns = TableDdl.mergeColumns)

  private def catalogWriter(): CatalogWriter = {
    val failpoints = Failpoints(Option(SQLConf.get.getConfString(OmniTableTable.FailpointConf, null)))
    new CatalogWriter(handle.reader.address, failpoints = failpoints)
  }

  /**
   * `DELETE FROM` (and, through [[RowChanges]], UPDATE and MERGE): a delta-based operation on
   * this snapshot, which must be a branch head (docs/spark.md, "Row-level DML").
   */
  override def newRowLevelOperationBuilder(info: RowLevelOperationInfo): RowLevelOperationBuilder = {
    OmniTableWriteBuilder.checkWritable(snap, handle.options)
    RowChanges.check(info.command(), snap.table.name)
    val writer = catalogWriter()
    () => new OmniTableDeltaOperation(handle, writer, info.command())
  }

  private lazy val metadataDelete = new MetadataDelete(handle, () => catalogWriter())

  /**
   * `DELETE FROM` whose predicates the catalog alone decides (whole batches or fragments, by batch
   * name, fragment id or statistics: [[MetadataDelete]]) runs without a Spark job; any other goes
   * through the row-level operation. `DELETE FROM t` without a predicate deletes every row this
   * way.
   */
  override def canDeleteWhere(predicates: Array[Predicate]): Boolean = metadataDelete.canDelete(predicates)

  override def deleteWhere(predicates: Array[Predicate]): Unit = metadataDelete.delete(predicates)

  override def properties(): util.Map[String, String] = Map(
    "provider" -> "omnitable",
    "location" -> snap.tableUri,
    "warehouse" -> snap.warehouse,
    "snapshot" -> snap.snapshot.label,
    "version" -> snap.snapshot.version.toString,
    "batches" -> snap.batchCount.toString
  ).asJava

  override def metadataColumns(): Array[MetadataColumn] = ReadColumn.metadataColumns.map { c =>
    new MetadataColumn {
      override def name(): String = c.field.name
      override def dataType(): DataType = c.field.dataType
      override def isNullable: Boolean = false
      override def comment(): String = c match {
        case ReadColumn.FragmentId => "id of the fragment holding the row"
        case _ => "position of the row in its fragment"
      }
    }
  }.toArray

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
    val merged = handle.options ++ options.asCaseSensitiveMap().asScala
    new OmniTableScanBuilder(
      handle,
      OmniTableConf(merged, TableProperties(snap.table.name, snap.table.properties)),
      marks)
  }

  /** The same table, read with what the optimizer rules decided (see [[OptimizerMarks]]). */
  def withMarks(m: OptimizerMarks): OmniTableTable = new OmniTableTable(handle, m)

  /**
   * What makes two reads return the same rows: warehouse, table, resolved snapshot, batch and
   * fragment restrictions and every other option (snapshot-naming options are covered by the
   * resolved version and segments, so `tag=t1` and `versionAsOf=3` can match).
   */
  def readIdentity(relationOptions: Map[String, String]): Product = {
    val naming = Set("path", "table", "warehouse", "versionasof", "timestampasof", "branch", "tag")
    val opts = (handle.options ++ relationOptions).map { case (k, v) => k.toLowerCase(java.util.Locale.ROOT) -> v }
    (
      snap.warehouse,
      snap.table.tableId,
      snap.snapshot.version,
      snap.snapshot.segments,
      handle.batches,
      handle.fragments,
      opts.filter { case (k, _) => !naming.contains(k) })
  }

  /**
   * Tables are equal when they read the same rows ([[readIdentity]] with the table's own options)
   * with the same [[OptimizerMarks]]: Spark then finds cached data (`CACHE TABLE`) for a later
   * read of the same snapshot, and reuses work between identical reads.
   */
  override def equals(other: Any): Boolean = other match {
    case t: OmniTableTable => identity == t.identity
    case _ => false
  }

  override def hashCode(): Int = identity.hashCode()

  private lazy val identity: (Product, OptimizerMarks) = (readIdentity(Map.empty), marks)

  override def toString: String = s"OmniTableTable(${snap.table.name}, ${snap.snapshot.label})"
}

object OmniTableTable {

  /** Fault injection in the JVM committer (tests only; see [[CatalogWriter]]). */
  val FailpointConf = "spark.omnitable.test.failpoint"
}
