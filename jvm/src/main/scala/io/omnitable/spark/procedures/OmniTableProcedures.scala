package io.omnitable.spark.procedures

import io.omnitable.spark.catalog.CatalogReader
import io.omnitable.spark.errors.ProcedureErrors
import io.omnitable.spark.write.TableFrames
import org.apache.spark.sql.connector.catalog.Identifier
import org.apache.spark.sql.connector.catalog.procedures.UnboundProcedure

/**
 * OmniTable's stored procedures, `CALL <catalog>.system.<name>(...)` (docs/spark.md,
 * "Procedures"): the branch and tag procedures ([[RefProcedures]]), rollback, revert, merges and
 * rebases ([[UndoProcedures]]), the registration and backfill of SQL features
 * ([[FeatureProcedures]]) run in the JVM; the governance jobs ([[GovernanceProcedures]]) run in
 * OmniTable's Python engine on the driver; the
 * operations only the Python engine performs are listed too, and calling one fails with the
 * Python API and CLI command to use instead. `frames` reads tables through the catalog's reader,
 * for the jobs procedures run.
 */
final class OmniTableProcedures(reader: () => CatalogReader, frames: TableFrames) {
  import OmniTableProcedures._

  private lazy val native: Map[String, OmniTableProcedure] =
    (RefProcedures.all(reader) ++ UndoProcedures.all(reader) ++ FeatureProcedures.all(reader) ++
      FeatureProcedures.backfill(reader, frames) ++
      GovernanceProcedures.all(reader)).map(p =>
      p.name() -> p).toMap

  /** Every procedure name, sorted. */
  def names: Seq[String] = (native.keys ++ PythonOnly.keys).toSeq.sorted

  def list(namespace: Array[String]): Array[Identifier] = {
    if (!namespace.sameElements(Array(Namespace))) throw ProcedureErrors.unknownProcedureNamespace(namespace.toSeq)
    names.map(n => Identifier.of(Array(Namespace), n)).toArray
  }

  def load(ident: Identifier): UnboundProcedure = {
    val name = ident.name()
    if (!ident.namespace().sameElements(Array(Namespace))) {
      throw ProcedureErrors.unknownProcedure(name, ident.namespace().toSeq, names)
    }
    native.get(name).orElse(PythonOnly.get(name).map(new PythonOnlyProcedure(name, _))).getOrElse(
      throw ProcedureErrors.unknownProcedure(name, ident.namespace().toSeq, names))
  }
}

object OmniTableProcedures {

  val Namespace = "system"

  /** The operations that need OmniTable's Python engine, with the API and CLI that perform them. */
  val PythonOnly: Map[String, String] = Map.empty
}
