package io.omnitable.spark.errors

/**
 * The errors of OmniTable's stored procedures (`CALL omnitable.system.<name>(...)`), built like
 * [[OmniTableErrors]]: a stable class and a message "Cannot <verb> <object>: <detail>" saying
 * what to do next.
 */
object ProcedureErrors {

  private def analysis(cls: String, msg: String, cause: Throwable = null): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, Option(cause))

  def unknownProcedure(name: String, namespace: Seq[String], valid: Seq[String]): OmniTableAnalysisException = {
    val where = if (namespace.isEmpty) name else (namespace :+ name).mkString(".")
    analysis(
      "OMNITABLE_UNKNOWN_PROCEDURE",
      s"Cannot find procedure '$where': OmniTable's procedures are in namespace 'system' " +
        s"(CALL <catalog>.system.<name>(...)): ${valid.mkString(", ")}."
    )
  }

  def unknownProcedureNamespace(namespace: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_UNKNOWN_PROCEDURE",
      s"Cannot list procedures of namespace '${namespace.mkString(".")}': OmniTable's procedures are in " +
        "namespace 'system' (SHOW PROCEDURES IN <catalog>.system)."
    )

  /** A procedure whose work only the Python engine does; `instead`: the Python API and CLI to use. */
  def needsPython(name: String, instead: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_PROCEDURE_NEEDS_PYTHON",
      s"Cannot run procedure system.$name in Spark SQL: it needs OmniTable's Python engine. Use $instead."
    )

  def nullArgument(procedure: String, parameter: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_PROCEDURE_ARGUMENT",
      s"Cannot run procedure system.$procedure: argument '$parameter' is NULL; give a value."
    )

  def invalidArgument(procedure: String, parameter: String, detail: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_PROCEDURE_ARGUMENT",
      s"Cannot run procedure system.$procedure: argument '$parameter' $detail."
    )

  def invalidRefName(kind: String, name: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_REF_NAME",
      s"Invalid $kind name '$name': use 1-100 letters, digits, '_' and '-', starting with a letter or " +
        "digit and not only digits (no '/', '.', spaces or quotes)."
    )

  def refExists(table: String, kind: String, name: String, existingKind: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_REF_EXISTS",
      s"Cannot create $kind '$name' of table '$table': a $existingKind of that name exists (branches " +
        "and tags share names); choose another name or delete it."
    )

  def tagWithVersion(table: String, name: String, tag: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_PROCEDURE_ARGUMENT",
      s"Cannot create branch '$name' of table '$table': from_ref '$tag' is a tag, which pins a version; " +
        "give a tag without a version, or a branch and a version."
    )

  /** `cause`: why the source of a new ref cannot be resolved (an unknown branch, a version outside it). */
  def refSourceNotFound(kind: String, name: String, table: String, cause: OmniTableAnalysisException)
      : OmniTableAnalysisException = {
    val detail = cause.getMessage.stripPrefix(s"[${cause.omniErrorClass}] ")
    analysis(cause.omniErrorClass, s"Cannot create $kind '$name' of table '$table': $detail", cause)
  }

  def deleteMain(table: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_REF_OPERATION",
      s"Cannot delete branch 'main' of table '$table': every table has it; drop the table to delete everything."
    )

  def branchHasDependents(
      table: String,
      name: String,
      dependents: Seq[(String, String)]): OmniTableAnalysisException = {
    val listed = dependents.map { case (kind, ref) => s"$kind '$ref'" }.mkString(", ")
    analysis(
      "OMNITABLE_INVALID_REF_OPERATION",
      s"Cannot delete branch '$name' of table '$table': $listed are based on it; delete them (or merge them) first."
    )
  }

  def catalogWriteFailed(warehouse: String, what: String, cause: Throwable): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_CATALOG_WRITE",
      s"Cannot $what in warehouse '$warehouse': ${Option(cause.getMessage).getOrElse(cause.toString)}; " +
        "nothing was changed.",
      cause
    )

  /** An operation Python refuses with a ValidationError; `message`: Python's message. */
  def invalidOperation(message: String): OmniTableAnalysisException = analysis("OMNITABLE_INVALID_OPERATION", message)

  /** Python's `ErrorRatioExceeded`: too many records of a feature failed; the step committed nothing. */
  def errorRatioExceeded(message: String): OmniTableAnalysisException =
    analysis("OMNITABLE_ERROR_RATIO_EXCEEDED", message)

  /** Something Python reports with a NotFoundError (a version, a branch); `message`: Python's message. */
  def notFound(message: String): OmniTableAnalysisException = analysis("OMNITABLE_NOT_FOUND", message)

  /** A merge only the Python engine performs (a three-way merge that may need conflict resolution). */
  def mergeNeedsPython(source: String, target: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_PROCEDURE_NEEDS_PYTHON",
      s"Cannot merge branch '$source' into '$target' in Spark SQL: '$target' moved since '$source' forked, so " +
        "the merge is a three-way merge (conflicts resolved cell by cell), which needs OmniTable's Python " +
        s"engine. Use Table.merge('$source', into='$target', strategy=...) or `omnitable branch merge`."
    )

  /** merge.py's MergeConflict: conflicts with strategy 'fail'; `message`: Python's message. */
  def mergeConflict(message: String): OmniTableCommitException = new OmniTableCommitException(MergeConflict, message)

  val MergeConflict = "OMNITABLE_MERGE_CONFLICT"
}
