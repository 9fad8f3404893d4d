package io.omnitable.spark.procedures

import io.omnitable.spark.errors.ProcedureErrors
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.ProcedureParameter
import org.apache.spark.sql.types.ArrayType

/** The arguments of one call, in the order of `params` (Spark has cast each to its parameter's type). */
final class ProcedureArgs(val procedure: String, params: Seq[ProcedureParameter], input: InternalRow) {

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

  def optDouble(name: String): Option[Double] = {
    val i = index(name)
    if (input.isNullAt(i)) None else Some(input.getDouble(i))
  }

  /** A BOOLEAN argument; NULL is refused. */
  def bool(name: String): Boolean = {
    val i = index(name)
    if (input.isNullAt(i)) throw ProcedureErrors.nullArgument(procedure, name) else input.getBoolean(i)
  }

  /**
   * A list parameter's names ([[OmniTableProcedure.lists]]): the elements of an array, or a string
   * split at commas (None: NULL); `what` names them in the error for an empty name or a NULL
   * element (whose 1-based position the error gives). Every array-taking parameter of every
   * procedure reads its names here, before the procedure does anything.
   */
  def optNames(name: String, what: String): Option[Seq[String]] = {
    val i = index(name)
    if (input.isNullAt(i)) return None
    val (names, given) = params(i).dataType() match {
      case _: ArrayType =>
        val array = input.getArray(i)
        val n = array.numElements()
        val names = (0 until n).map(j => if (array.isNullAt(j)) None else Some(array.getUTF8String(j).toString))
        val given = names.map(_.fold("NULL")(v => s"'$v'")).mkString("array(", ", ", ")")
        names.indexWhere(_.isEmpty) match {
          case -1 => ()
          case j => throw invalid(
              name,
              s"has a NULL element at position ${j + 1} of $n ($given): give $what as non-NULL strings, " +
                "e.g. array('a', 'b') (drop the NULL or replace it with a name); nothing was run"
            )
        }
        (names.map(_.get.trim), given)
      case _ =>
        val text = input.getUTF8String(i).toString
        (text.split(",", -1).map(_.trim).toSeq, s"'$text'")
    }
    if (names.isEmpty || names.exists(_.isEmpty)) {
      throw invalid(name, s"is $given: give $what separated by commas, or an array of them")
    }
    Some(names)
  }

  def invalid(name: String, detail: String): Throwable = ProcedureErrors.invalidArgument(procedure, name, detail)
}
