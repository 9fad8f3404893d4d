package io.omnitable.spark.procedures

import io.omnitable.spark.errors.ProcedureErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter

/** The arguments of one call, in the order of `params` (Spark has cast each to its parameter's type). */
final class ProcedureArgs(procedure: String, params: Seq[ProcedureParameter], input: InternalRow) {

  private def index(name: String): Int = {
    val i = params.indexWhere(_.name == name)
    require(i >= 0, s"procedure $procedure has no parameter $name")
    i
  }

  def optString(name: String): Option[String] = {
    val i = index(name)
    if (input.isNullAt(i)) None else Some(input.getUTF8String(i).toString)
  }

  def string(name: String): String = optString(name).getOrElse(throw ProcedureErrors.nullArgument(procedure, name))

  def optLong(name: String): Option[Long] = {
    val i = index(name)
    if (input.isNullAt(i)) None else Some(input.getLong(i))
  }

  def invalid(name: String, detail: String): Throwable = ProcedureErrors.invalidArgument(procedure, name, detail)
}
