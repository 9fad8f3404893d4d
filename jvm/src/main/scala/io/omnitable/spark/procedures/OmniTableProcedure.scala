package io.omnitable.spark.procedures

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.procedures.{BoundProcedure, ProcedureParameter, UnboundProcedure}
import org.apache.spark.sql.connector.read.Scan
import org.apache.spark.sql.types.{ArrayType, DataType, NullType, StringType, StructType}

/**
 * A procedure of OmniTable's `system` namespace. Its parameters do not depend on the argument
 * types, except a list parameter ([[lists]]: a STRING of comma-separated names) given an
 * `array(...)` of strings, which binds it as `ARRAY<STRING>` (an array of another element type is
 * refused, `OMNITABLE_INVALID_PROCEDURE_ARGUMENT`); Spark matches named and positional arguments
 * to `params`, fills defaults, casts each argument to its parameter's type and reports missing,
 * unknown and mistyped arguments before `call` runs.
 *
 * It is only an [[UnboundProcedure]]: [[bind]] always returns a new bound procedure. (Were it a
 * `BoundProcedure` itself, Spark's argument coercion would take it as bound before binding and
 * cast the arguments as they stand, positionally, to its parameters whenever an argument needs
 * coercion to resolve, e.g. `array('a', NULL)`: the call then failed inside Spark with
 * "number of args and params must match after binding".)
 */
abstract class OmniTableProcedure(procedureName: String, params: Seq[ProcedureParameter], doc: String)
    extends UnboundProcedure {

  override def name(): String = procedureName

  /** `doc` and the signature, e.g. `Arguments: table, tag, version => NULL` (DESCRIBE PROCEDURE shows it). */
  override def description(): String = {
    val args = params.map(p => Option(p.defaultValue()).fold(p.name)(d => s"${p.name} => ${d.getSql}"))
    s"$doc Arguments: ${args.mkString(", ")}."
  }
  override def bind(inputType: StructType): BoundProcedure = {
    val arrays = params.zipWithIndex.filter { case (p, i) =>
      lists(p.name) && argType(inputType, p.name, i).exists(isArray(p.name, _))
    }.map(_._1.name).toSet
    new Bound(params.map { p =>
      if (!arrays(p.name)) p
      else {
        val b = ProcedureParameter.in(p.name, ArrayType(StringType)).comment(p.comment())
        Option(p.defaultValue()).fold(b)(d => b.defaultValue(d)).build()
      }
    })
  }

  /** Parameters taking names: a STRING of comma-separated names, or an array of strings. */
  protected def lists: Set[String] = Set.empty

  /** The type of the argument given for parameter `name` (at position `i`), named or positional. */
  private def argType(inputType: StructType, name: String, i: Int): Option[DataType] =
    inputType.fields.find(_.name == name).orElse {
      inputType.fields.lift(i).filter(f => f.name == s"param$i")
    }.map(_.dataType)

  /** An array of strings (or an empty `array()`); an array of anything else is refused. */
  private def isArray(name: String, t: DataType): Boolean = t match {
    case ArrayType(StringType | NullType, _) => true
    case ArrayType(other, _) =>
      throw io.omnitable.spark.errors.ProcedureErrors.invalidArgument(
        procedureName,
        name,
        s"is an array of ${other.sql}: give an array of names (strings), e.g. array('a', 'b'), or one string of " +
          "names separated by commas"
      )
    case _ => false
  }

  /** The result rows (one per change) for the arguments in `input`, in parameter order. */
  protected def run(args: ProcedureArgs): ProcedureResult

  /** This procedure bound with `bound` (its parameters, a list parameter given as an array as ARRAY<STRING>). */
  private final class Bound(bound: Seq[ProcedureParameter]) extends BoundProcedure {
    override def name(): String = procedureName
    override def description(): String = OmniTableProcedure.this.description()
    override def parameters(): Array[ProcedureParameter] = bound.toArray
    override def isDeterministic: Boolean = false
    override def call(input: InternalRow): java.util.Iterator[Scan] =
      java.util.List.of[Scan](run(new ProcedureArgs(procedureName, bound, input))).iterator()
  }
}

object OmniTableProcedure {

  /** A required parameter. */
  def required(name: String, dataType: DataType, comment: String): ProcedureParameter =
    ProcedureParameter.in(name, dataType).comment(comment).build()

  /** An optional parameter; `default` is SQL (`'main'`, `NULL`). */
  def optional(name: String, dataType: DataType, default: String, comment: String): ProcedureParameter =
    ProcedureParameter.in(name, dataType).defaultValue(default).comment(comment).build()
}
