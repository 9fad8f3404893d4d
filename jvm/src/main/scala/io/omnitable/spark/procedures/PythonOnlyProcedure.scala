package io.omnitable.spark.procedures

import io.omnitable.spark.errors.ProcedureErrors
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, UnboundProcedure}
import org.apache.spark.sql.types.StructType

/** A procedure of [[OmniTableProcedures.PythonOnly]]: binding it fails with what to use instead. */
final class PythonOnlyProcedure(procedureName: String, instead: String) extends UnboundProcedure {
  override def name(): String = procedureName
  override def description(): String = s"Runs in OmniTable's Python engine only: use $instead."
  override def bind(inputType: StructType): BoundProcedure = throw ProcedureErrors.needsPython(procedureName, instead)
}
