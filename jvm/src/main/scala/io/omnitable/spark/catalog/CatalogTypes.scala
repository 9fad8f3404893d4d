package io.omnitable.spark.catalog

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.sql.catalyst.parser.CatalystSqlParser
import org.apache.spark.sql.types._

/**
 * Spark types as the catalog stores them (python/omnitable/format/types.py `to_ddl`): the one
 * mapping of `CREATE TABLE` / `ALTER TABLE` columns (source/TableDefinition.scala) and SQL
 * features' output types ([[FeatureDef]]).
 */
object CatalogTypes {
  private val Plain = "^[A-Za-z_][A-Za-z0-9_]*$".r

  /** Distinct DDL strings whose parsed type is kept; the cache is emptied when it is full. */
  val MaxParsedTypes = 4096
  private val parsed = new ConcurrentHashMap[String, DataType]()

  /**
   * The Spark type of a catalog DDL string (`CatalystSqlParser.parseDataType`), parsed once per
   * distinct string: a 2,500-column table has a few distinct types, and parsing each column's
   * took most of loading its schema. Throws what the parser throws.
   */
  def parse(ddl: String): DataType = {
    val known = parsed.get(ddl)
    if (known != null) known
    else {
      val t = CatalystSqlParser.parseDataType(ddl)
      if (parsed.size >= MaxParsedTypes) parsed.clear()
      parsed.put(ddl, t)
      t
    }
  }

  /** A plain `string` (no CHAR/VARCHAR, the default collation). */
  def plainString(s: StringType): Boolean =
    !s.isInstanceOf[CharType] && !s.isInstanceOf[VarcharType] && s.collationId == StringType.collationId

  /**
   * The catalog's DDL of `t` (a column named `column`); Left: the first part that is no OmniTable
   * type, with its path (`column` or `column.field`).
   */
  def ddl(t: DataType, column: String): Either[(String, DataType), String] = t match {
    case BooleanType => Right("boolean")
    case ByteType => Right("tinyint")
    case ShortType => Right("smallint")
    case IntegerType => Right("int")
    case LongType => Right("bigint")
    case FloatType => Right("float")
    case DoubleType => Right("double")
    case s: StringType if plainString(s) => Right("string")
    case BinaryType => Right("binary")
    case DateType => Right("date")
    case TimestampType => Right("timestamp")
    case TimestampNTZType => Right("timestamp_ntz")
    case d: DecimalType => Right(s"decimal(${d.precision},${d.scale})")
    case ArrayType(e, _) => ddl(e, column).map(x => s"array<$x>")
    case MapType(k, v, _) => for (a <- ddl(k, column); b <- ddl(v, column)) yield s"map<$a,$b>"
    case StructType(fields) =>
      fields.foldLeft[Either[(String, DataType), Seq[String]]](Right(Vector.empty)) { (acc, f) =>
        acc.flatMap(done => ddl(f.dataType, s"$column.${f.name}").map(x => done :+ s"${quote(f.name)}:$x"))
      }.map(_.mkString("struct<", ",", ">"))
    case other => Left((column, other))
  }

  private def quote(name: String): String =
    if (Plain.matches(name)) name else "`" + name.replace("`", "``") + "`"
}
