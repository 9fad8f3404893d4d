package io.omnitable.spark.write

import java.util.BitSet

import scala.collection.mutable

import io.omnitable.spark.catalog.SystemColumns
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.write.{DeltaWriter, DeltaWriterFactory, WriterCommitMessage}
import org.apache.spark.sql.types.StructType
import org.apache.spark.unsafe.types.UTF8String

/**
 * What one task of a row-level statement did: the physical offsets it deleted per fragment id
 * (deletion-vector positions, counting already deleted rows), and what its [[RowChanges]] wrote.
 */
final case class RowsChanged(deleted: Map[String, BitSet], changes: Option[Serializable]) extends WriterCommitMessage

/** Sent to the tasks: where the metadata columns are in Spark's metadata rows, and the row changes. */
private[write] final class DeltaWriterFactoryImpl(metadataSchema: StructType, changes: RowChangesFactory)
    extends DeltaWriterFactory {
  override def createWriter(partitionId: Int, taskId: Long): DeltaWriter[InternalRow] =
    new OmniTableDeltaWriter(metadataSchema, changes.create(partitionId, taskId))
}

/**
 * The task side of a row-level statement (DSv2 `DeltaWriter`): `delete` records the row's
 * (`_ai_fragment_`, `_ai_row_offset_`) — no file is written, the driver commits one cumulative
 * deletion vector per fragment; `update`, `reinsert` and `insert` go to [[RowChanges]].
 */
final class OmniTableDeltaWriter(metadataSchema: StructType, changes: RowChanges) extends DeltaWriter[InternalRow] {

  private val fragmentAt = metadataSchema.fieldIndex(SystemColumns.Fragment)
  private val offsetAt = metadataSchema.fieldIndex(SystemColumns.RowOffset)
  private val deleted = mutable.HashMap.empty[String, BitSet]
  private var lastFragment: UTF8String = _
  private var lastBits: BitSet = _

  override def delete(metadata: InternalRow, id: InternalRow): Unit = {
    val fragment = metadata.getUTF8String(fragmentAt)
    if (lastFragment == null || lastFragment != fragment) { // rows come fragment by fragment
      lastFragment = fragment.clone()
      lastBits = deleted.getOrElseUpdate(lastFragment.toString, new BitSet)
    }
    val offset = metadata.getLong(offsetAt)
    if (offset < 0 || offset > Int.MaxValue) throw new IllegalStateException(s"row offset $offset out of range")
    lastBits.set(offset.toInt)
  }

  override def update(metadata: InternalRow, id: InternalRow, row: InternalRow): Unit =
    changes.update(metadata, id, row)

  override def reinsert(metadata: InternalRow, row: InternalRow): Unit = changes.reinsert(metadata, row)

  override def insert(row: InternalRow): Unit = changes.insert(row)

  override def commit(): WriterCommitMessage = RowsChanged(deleted.toMap, changes.commit())

  override def abort(): Unit = changes.abort()

  override def close(): Unit = changes.close()
}
