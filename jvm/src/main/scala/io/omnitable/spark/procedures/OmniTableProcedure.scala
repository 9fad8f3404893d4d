package io.omnitable.spark.procedures

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * A procedure of OmniTable's `system` namespace. Its parameters do not depend on the argument
 * types, so it binds to itself; Spark matches named and positional arguments to `params`, fills
 * defaults, casts each argument to its parameter's type and reports missing, unknown and
 * mistyped arguments before `call` runs.
 */
abstract class OmniTableProcedure(procedureName: String, params: Seq[ProcedureParameter], doc: String)
    extends UnboundProcedure
    with BoundProcedure {

  override def name(): String = procedureName

  /** `doc` and the signature, e.g. `Arguments: table, tag, version => NULL` (DESCRIBE PROCEDURE shows it). */
  override def description(): String = {
    val args = params.map(p => Option(p.defaultValue()).fold(p.name)(d => s"${p.name} => ${d.getSql}"))
    s"$doc Arguments: ${args.mkString(", ")}."
  }
  override def bind(inputType: StructType): BoundProcedure = this
  override def parameters(): Array[ProcedureParameter] = params.toArray
  override def isDeterministic: Boolean = false

  /** The result rows (one per change) for the arguments in `input`, in parameter order. */
  protected def run(args: ProcedureArgs): ProcedureResult

  override def call(input: InternalRow): java.util.Iterator[Scan] =
    java.util.List.of[Scan](run(new ProcedureArgs(procedureName, params, input))).iterator()
}

object OmniTableProcedure {

  /** A required parameter. */
  def required(name: String, dataType: DataType, comment: String): ProcedureParameter =
    ProcedureParameter.in(name, dataType).comment(comment).build()

  /** An optional parameter; `default` is SQL (`'main'`, `NULL`). */
  def optional(name: String, dataType: DataType, default: String, comment: String): ProcedureParameter =
    ProcedureParameter.in(name, dataType).defaultValue(default).comment(comment).build()
}
