package io.omnitable.spark.read.exec

import java.lang.reflect.{InvocationHandler, Method, Proxy}

import org.apache.parquet.column.page.PageReadStore
import org.apache.parquet.hadoop.ParquetFileReader
import org.apache.parquet.internal.column.columnindex.OffsetIndex
import org.apache.parquet.internal.filter2.columnindex.RowRanges
import org.apache.spark.sql.execution.datasources.parquet.{
  SpecificParquetRecordReaderBase,
  VectorizedParquetRecordReader
}

/**
 * Spark's vectorized Parquet reader, decoding only chosen rows of each row group (late
 * materialization). After `initialize(...)` as usual, [[restrictTo]] hands it a file reader and
 * one [[RowRanges]] per row group of the footer it was initialized with: Parquet then fetches
 * only the pages holding those rows (through the file's offset index, which the file must have)
 * and Spark decodes only those rows; batches hold exactly them, in order.
 *
 * Spark reads row groups through a package-private interface (`ParquetRowGroupReader`), which
 * code in another jar cannot implement directly (a different class loader makes a different
 * runtime package), so the replacement is a dynamic proxy set by reflection.
 */
private[exec] final class RowRangesParquetReader(batchSize: Int)
    extends VectorizedParquetRecordReader(null, "CORRECTED", "UTC", "CORRECTED", "UTC", false, batchSize) {

  /** Reads row group `i` of `file`'s blocks through `ranges(i)` (non-empty) from now on. */
  def restrictTo(file: ParquetFileReader, ranges: IndexedSeq[RowRanges]): Unit = {
    file.setRequestedSchema(requestedSchema)
    val handler = new InvocationHandler {
      private var next = 0
      override def invoke(proxy: Any, method: Method, args: Array[AnyRef]): AnyRef = method.getName match {
        case "readNextRowGroup" =>
          if (next >= ranges.size) null
          else {
            val pages: PageReadStore = file.readFilteredRowGroup(next, ranges(next))
            next += 1
            pages
          }
        case "close" =>
          file.close()
          null
        case "hashCode" => Int.box(System.identityHashCode(proxy))
        case "equals" => Boolean.box(proxy.asInstanceOf[AnyRef] eq args(0))
        case "toString" => "RowRangesParquetReader.rowGroups"
        case other => throw new UnsupportedOperationException(other)
      }
    }
    val field = RowRangesParquetReader.ReaderField
    Option(field.get(this)).foreach(_.asInstanceOf[java.io.Closeable].close())
    val iface = RowRangesParquetReader.RowGroupReaderInterface
    field.set(this, Proxy.newProxyInstance(iface.getClassLoader, Array(iface), handler))
    totalRowCount = ranges.map(_.rowCount()).sum
  }
}

private[exec] object RowRangesParquetReader {

  private val ReaderField = {
    val f = classOf[SpecificParquetRecordReaderBase[_]].getDeclaredField("reader")
    f.setAccessible(true)
    f
  }

  private val RowGroupReaderInterface: Class[_] = ReaderField.getType

  /**
   * Row ranges holding exactly the rows `runs` (`(first, last)` inclusive, sorted, row
   * numbers within a row group of `rowCount` rows). Parquet builds ranges only from page
   * indexes, so the runs are presented as the "pages" of an offset index.
   */
  def rowRanges(rowCount: Long, runs: IndexedSeq[(Long, Long)]): RowRanges = {
    val index = new OffsetIndex {
      override def getPageCount: Int = runs.size
      override def getOffset(pageIndex: Int): Long = 0L
      override def getCompressedPageSize(pageIndex: Int): Int = 0
      override def getFirstRowIndex(pageIndex: Int): Long = runs(pageIndex)._1
      override def getLastRowIndex(pageIndex: Int, rowGroupRowCount: Long): Long = runs(pageIndex)._2
    }
    RowRanges.create(rowCount, java.util.stream.IntStream.range(0, runs.size).iterator(), index)
  }
}
