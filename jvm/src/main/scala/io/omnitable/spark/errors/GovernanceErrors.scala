package io.omnitable.spark.errors

/**
 * The errors of the governance procedures (`CALL <catalog>.system.compact(...)` and the others,
 * [[io.omnitable.spark.procedures.GovernanceProcedures]]), which run OmniTable's Python engine on
 * the driver: a stable class and a message "Cannot <verb> <object>: <detail>" saying what to do.
 */
object GovernanceErrors {

  private def analysis(cls: String, msg: String, cause: Throwable = null): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, Option(cause))

  private val Fix =
    "set spark.omnitable.python (or spark.pyspark.python, or PYSPARK_PYTHON on the driver) to a Python " +
      "that has the omnitable package (pip install omnitable), or run the job with Table.maintain or " +
      "`omnitable govern`"

  /** `python` cannot be started, or has no omnitable package (`why`). */
  def engineUnavailable(procedure: String, python: String, why: String, cause: Throwable = null)
      : OmniTableAnalysisException =
    analysis(
      "OMNITABLE_PYTHON_ENGINE_UNAVAILABLE",
      s"Cannot run procedure system.$procedure: it runs OmniTable's Python engine on the driver, and " +
        s"'$python' $why; $Fix.",
      cause
    )

  /** The Python engine refused the arguments (`message`: its ValidationError); nothing was changed. */
  def invalidArguments(procedure: String, message: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_INVALID_PROCEDURE_ARGUMENT",
      s"Cannot run procedure system.$procedure: $message. Nothing was changed."
    )

  /** The table or branch does not exist (`message`: the Python engine's NotFoundError). */
  def notFound(procedure: String, message: String): OmniTableAnalysisException =
    analysis("OMNITABLE_NOT_FOUND", s"Cannot run procedure system.$procedure: $message.")

  /** The job failed (`kind` of error `type`); the job's contract leaves nothing of it visible. */
  def failed(procedure: String, kind: String, errorType: String, message: String): OmniTableAnalysisException = {
    val cls = if (kind == "conflict") "OMNITABLE_COMMIT_CONFLICT" else "OMNITABLE_PROCEDURE_FAILED"
    analysis(
      cls,
      s"Cannot run procedure system.$procedure: $errorType: $message. The failed job committed nothing " +
        "(the jobs before it in the call kept their commits); call it again."
    )
  }

  /** The Python engine ended without an answer (exit status `rc`, the end of its stderr `log`). */
  def engineCrashed(procedure: String, python: String, rc: Int, log: String): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_PROCEDURE_FAILED",
      s"Cannot run procedure system.$procedure: OmniTable's Python engine ('$python -m omnitable.cli.procedure') " +
        s"exited with status $rc without an answer; nothing it had not committed is visible. Its output ends " +
        s"with:\n$log"
    )
}
