package io.omnitable.spark.errors

/**
 * Errors of CREATE TABLE, CTAS and ALTER TABLE on the omnitable catalog. Definitions Python's
 * `Warehouse.create_table` / `Table.add_columns` refuse carry Python's message
 * (`OMNITABLE_INVALID_TABLE_DEFINITION`, `OMNITABLE_COLUMN_EXISTS`); clauses and statements
 * OmniTable does not take are `OMNITABLE_UNSUPPORTED_DDL`, naming what to do instead.
 */
object DdlErrors {

  val InvalidDefinition = "OMNITABLE_INVALID_TABLE_DEFINITION"
  val ColumnExists = "OMNITABLE_COLUMN_EXISTS"
  val UnsupportedDdl = "OMNITABLE_UNSUPPORTED_DDL"
  val UnsupportedType = "OMNITABLE_UNSUPPORTED_TYPE"

  private def analysis(cls: String, msg: String): OmniTableAnalysisException =
    new OmniTableAnalysisException(cls, msg, None)

  /** A definition Python refuses too (`ValidationError`, `UnknownColumnError`): Python's message. */
  def invalidDefinition(message: String): OmniTableAnalysisException = analysis(InvalidDefinition, message)

  /** A column name taken (Python's `AlreadyExistsError`): Python's message. */
  def columnExists(message: String): OmniTableAnalysisException = analysis(ColumnExists, message)

  def unsupported(what: String, instead: String): OmniTableAnalysisException =
    analysis(UnsupportedDdl, s"Cannot $what: $instead")

  def unsupportedType(action: String, column: String, sparkType: String): OmniTableAnalysisException =
    analysis(
      UnsupportedType,
      s"Cannot $action: column '$column' has type $sparkType, which OmniTable cannot store; use boolean, " +
        "tinyint, smallint, int, bigint, float, double, decimal(p,s), string, binary, date, timestamp, " +
        "timestamp_ntz, or arrays, maps and structs of them"
    )
}
