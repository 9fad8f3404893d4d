package io.omnitable.spark.procedures

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.read.LocalScan
import org.apache.spark.sql.types.StructType

/** A procedure's output: `rows` of `schema`, computed by the call (a local scan). */
final class ProcedureResult(schema: StructType, resultRows: Seq[InternalRow]) extends LocalScan {
  override def readSchema(): StructType = schema
  override def rows(): Array[InternalRow] = resultRows.toArray
  override def description(): String = s"OmniTable procedure result (${resultRows.size} rows)"
}
