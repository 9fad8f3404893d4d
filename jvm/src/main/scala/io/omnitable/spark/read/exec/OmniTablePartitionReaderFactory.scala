package io.omnitable.spark.read.exec

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory}
import org.apache.spark.sql.vectorized.ColumnarBatch

/** Creates the reader of each packed partition (columnar; rows only on request). */
final class OmniTablePartitionReaderFactory(ctx: ReaderContext) extends PartitionReaderFactory {

  override def supportColumnarReads(partition: InputPartition): Boolean = true

  override def createColumnarReader(partition: InputPartition): PartitionReader[ColumnarBatch] = partition match {
    case packed: PackedInputPartition => new PackedColumnarReader(packed, ctx)
    case slice: SliceInputPartition =>
      val resolver = ctx.slices.getOrElse(
        throw new IllegalStateException(s"a scan of ${ctx.table} planned on the driver got partition $slice"))
      new PackedColumnarReader(resolver.resolve(slice), ctx)
    case other => throw new IllegalStateException(s"not a partition of an OmniTable scan: $other")
  }

  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = {
    val batches = createColumnarReader(partition)
    new PartitionReader[InternalRow] {
      private var rows: java.util.Iterator[InternalRow] = java.util.Collections.emptyIterator()
      override def next(): Boolean = {
        while (!rows.hasNext) {
          if (!batches.next()) return false
          rows = batches.get().rowIterator()
        }
        true
      }
      override def get(): InternalRow = rows.next()
      override def close(): Unit = batches.close()
    }
  }
}
