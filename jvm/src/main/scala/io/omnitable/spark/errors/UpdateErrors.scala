package io.omnitable.spark.errors

/** Errors of updates from Spark (the JVM twin of python/omnitable/dataops/update.py's refusals). */
object UpdateErrors {

  val InvalidUpdate = "OMNITABLE_INVALID_UPDATE"
  val RowsNotFound = "OMNITABLE_ROWS_NOT_FOUND"

  private def analysis(cls: String, msg: String): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, None)

  def noColumns(table: String): OmniTableAnalysisException =
    analysis(InvalidUpdate, s"Cannot update table '$table': give the columns to update (a list of names), found none")

  def missingInData(table: String, names: Seq[String]): OmniTableAnalysisException =
    analysis(InvalidUpdate, s"Cannot update table '$table': data has no column(s) ${names.mkString(", ")}")

  def systemColumn(table: String, name: String): OmniTableAnalysisException =
    analysis(
      InvalidUpdate,
      s"Cannot update $name of table '$table': a system column (_ai_unique_id_ identifies a row for " +
        "good, _ai_append_name_ is its batch); nothing was updated"
    )

  def keyColumn(table: String, name: String): OmniTableAnalysisException =
    analysis(
      InvalidUpdate,
      s"Cannot update key column '$name' of table '$table': a row's key never changes; delete the row " +
        "and upsert it under its new key")

  def unknownColumns(table: String, names: Seq[String]): OmniTableAnalysisException =
    analysis(
      "OMNITABLE_SCHEMA_MISMATCH",
      s"Cannot update table '$table': unknown column(s) ${names.mkString(", ")}")

  def badIds(table: String, detail: String): OmniTableAnalysisException =
    analysis(InvalidUpdate, s"Cannot update table '$table': $detail; nothing was updated")

  def notLive(table: String, missing: Long, total: Long): OmniTableAnalysisException =
    analysis(
      RowsNotFound,
      s"Cannot update table '$table': $missing of the $total _ai_unique_id_ values are not live rows " +
        "(never written, or deleted); nothing was updated"
    )
}
