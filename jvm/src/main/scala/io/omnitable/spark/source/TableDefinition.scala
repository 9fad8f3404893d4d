package io.omnitable.spark.source

import java.util.Locale

import scala.util.Try

import com.fasterxml.jackson.databind.{DeserializationFeature, JsonNode, ObjectMapper}
import io.omnitable.spark.catalog.{CatalogTypes, DdlWriter, NewColumn, PyJson, PyRepr, SystemColumns, TableNames}
import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.errors.DdlErrors
import org.apache.spark.sql.connector.catalog.{Column, TableCatalog}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.types._

/**
 * A CREATE TABLE of the omnitable catalog as Python's `Warehouse.create_table(name, schema,
 * groups, properties, key)` takes it, with Python's checks and messages (python/omnitable/
 * warehouse.py, settings.py, vocabulary/names.py, keys.py, types.py):
 *
 *  - columns: Spark types map onto the types Python stores (its canonical DDL strings); others are
 *    refused. `_ai_unique_id_ BIGINT` and `_ai_append_name_` are skipped, as in Python.
 *  - `TBLPROPERTIES ('groups.<group>' = 'col1,col2')`: Python's `groups={group: [col1, col2]}`
 *    (unlisted columns go to group `base`); `'key' = 'col'` or `'col1,col2'`: Python's `key=`.
 *  - every other property is a table property, checked as `check_properties` does (a key under
 *    `read.`, `write.`, `backfill.`, `table.` must name a setting; a setting's value must parse);
 *    `COMMENT` is stored as property `comment`.
 *  - USING other than omnitable, PARTITIONED BY, LOCATION, OPTIONS, DEFAULT COLLATION, column
 *    defaults, generated and identity columns and column comments are refused.
 */
private[source] object TableDefinition {

  val GroupPrefix = "groups."
  val KeyProperty = "key"
  private val KeyStored = "table.key"
  private val Provider = "omnitable"

  /** The columns and the properties JSON Python's create_table would store for this statement. */
  def apply(
      address: String,
      columns: Seq[Column],
      partitions: Seq[Transform],
      properties: Map[String, String]): (Seq[NewColumn], String) = {
    refuseClauses(address, partitions, properties)
    val groupSpecs = properties.collect { case (k, v) if k.startsWith(GroupPrefix) => k.stripPrefix(GroupPrefix) -> v }
    val keySpec = properties.get(KeyProperty)
    val props = (properties -- Seq(TableCatalog.PROP_PROVIDER, TableCatalog.PROP_OWNER, KeyProperty))
      .filterNot(_._1.startsWith(GroupPrefix))
    PropertyCheck.check(props)
    val fields = schemaFields(columns, s"create table '$address'")
    val groupOf = groupMap(groupSpecs, fields.map(_._1))
    val newColumns = fields.map { case (n, _, nullable, ddl) =>
      NewColumn(n, ddl, nullable, groupOf.getOrElse(n, DdlWriter.BaseGroup))
    }
    val stored: Map[String, Any] = props ++ keySpec.map { k =>
      KeyStored -> checkKey(k, fields.map(f => f._1 -> f._2), s"create table '$address'")
    }
    (newColumns, PyJson.dumps(stored))
  }

  private def refuseClauses(address: String, partitions: Seq[Transform], properties: Map[String, String]): Unit = {
    val what = s"create table '$address'"
    properties.get(TableCatalog.PROP_PROVIDER).filterNot(_.equalsIgnoreCase(Provider)).foreach { p =>
      throw DdlErrors.unsupported(
        what,
        s"USING $p: the omnitable catalog holds OmniTable tables only (USING omnitable)")
    }
    if (partitions.nonEmpty) {
      throw DdlErrors.unsupported(
        what,
        "PARTITIONED BY: OmniTable tables are not partitioned (rows are laid out in fragments of append " +
          "batches; filters prune by file statistics); drop the clause"
      )
    }
    Seq(TableCatalog.PROP_LOCATION, TableCatalog.PROP_EXTERNAL, TableCatalog.PROP_IS_MANAGED_LOCATION)
      .filter(properties.contains).foreach { _ =>
        throw DdlErrors.unsupported(
          what,
          "LOCATION / EXTERNAL: a table's files are always under the warehouse data root, in a directory " +
            "of the table's own; drop the clause")
      }
    if (properties.contains(TableCatalog.PROP_COLLATION)) {
      throw DdlErrors.unsupported(what, "DEFAULT COLLATION: OmniTable strings use Spark's default (UTF8_BINARY)")
    }
    properties.keys.find(_.startsWith(TableCatalog.OPTION_PREFIX)).foreach { k =>
      throw DdlErrors.unsupported(
        what,
        s"OPTIONS (${k.stripPrefix(TableCatalog.OPTION_PREFIX)}): settings are TBLPROPERTIES; a CTAS names its " +
          "batch with SET spark.omnitable.write.appendName = '<name>' (or writeTo(...).option(\"append_name\", ...))"
      )
    }
  }

  /** warehouse.py `_schema_fields`: (name, Spark type, nullable, DDL) without the system columns. */
  private def schemaFields(columns: Seq[Column], action: String): Seq[(String, DataType, Boolean, String)] = {
    val seen = scala.collection.mutable.HashSet.empty[String]
    columns.flatMap { c =>
      refuseColumnClauses(c)
      c.name() match {
        case SystemColumns.RowId if c.dataType() != LongType =>
          throw DdlErrors.invalidDefinition(s"Cannot create table: ${SystemColumns.RowId} is always bigint")
        case SystemColumns.RowId | SystemColumns.AppendName => None
        case name =>
          Names.checkColumn(name)
          if (!seen.add(name)) throw DdlErrors.invalidDefinition(s"Cannot create table: column '$name' is listed twice")
          Some((name, c.dataType(), c.nullable(), DdlTypes.ddl(c.dataType(), name, action)))
      }
    }
  }

  def refuseColumnClauses(c: Column): Unit = {
    def no(clause: String, instead: String) =
      throw DdlErrors.unsupported(s"define column '${c.name()}' with $clause", instead)
    if (c.defaultValue() != null) no("a DEFAULT value", "OmniTable columns have no defaults (missing values are NULL)")
    if (c.generationExpression() != null) no("GENERATED ALWAYS AS", "compute it in the query that writes the rows")
    if (c.identityColumnSpec() != null) {
      no("an IDENTITY", s"every row has a generated ${SystemColumns.RowId} (bigint) already")
    }
    if (c.comment() != null) no("a COMMENT", "OmniTable stores no column comments; drop the COMMENT")
  }

  /** warehouse.py `_group_map`: column → group, groups in name order. */
  private def groupMap(groups: Map[String, String], names: Seq[String]): Map[String, String] = {
    val known = names.toSet
    val out = scala.collection.mutable.LinkedHashMap.empty[String, String]
    groups.toSeq.sortBy(_._1).foreach { case (group, cols) =>
      Names.checkGroup(group)
      cols.split(",").map(_.trim).filter(_.nonEmpty).foreach { c =>
        if (!known.contains(c)) {
          throw DdlErrors.invalidDefinition(s"Cannot put column '$c' in group '$group': no such column in the schema")
        }
        out.get(c).foreach { other =>
          throw DdlErrors.invalidDefinition(s"Cannot create table: column '$c' is in groups '$other' and '$group'")
        }
        out(c) = group
      }
    }
    out.toMap
  }

  /** keys.py `check_key`: the key columns, in order. */
  private def checkKey(spec: String, columns: Seq[(String, DataType)], what: String): Seq[String] = {
    val names = spec.split(",", -1).map(_.trim).toSeq
    if (spec.trim.isEmpty)
      throw DdlErrors.invalidDefinition(s"Cannot $what: key must be a column name or a non-empty list")
    val types = columns.toMap
    names.foldLeft(Vector.empty[String]) { (out, name) =>
      val t = types.getOrElse(
        name,
        throw DdlErrors.invalidDefinition(
          s"Cannot $what: key column ${PyRepr.str(name)} is not a column of the schema (${columns.map(_._1).mkString(", ")})")
      )
      if (!keyTypeOk(t)) {
        throw DdlErrors.invalidDefinition(
          s"Cannot $what: key column '$name' has type ${DdlTypes.arrowName(t)}; keys are strings, integers or dates")
      }
      if (out.contains(name)) throw DdlErrors.invalidDefinition(s"Cannot $what: key column '$name' is listed twice")
      out :+ name
    }
  }

  private def keyTypeOk(t: DataType): Boolean = t match {
    case ByteType | ShortType | IntegerType | LongType | DateType => true
    case s: StringType => DdlTypes.plainString(s)
    case _ => false
  }
}

/** python/omnitable/vocabulary/names.py's checks, with its messages. */
private[source] object Names {
  private val ColumnName = "^[A-Za-z_][A-Za-z0-9_\\-]{0,254}$".r
  private val GroupName = "^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$".r

  def checkColumn(name: String): Unit =
    if (!ColumnName.matches(name) || name.startsWith("_ai_")) {
      throw DdlErrors.invalidDefinition(
        s"Cannot use column name ${PyRepr.str(name)}: names are 1-255 characters of letters, digits, '_' and '-', " +
          "start with a letter or '_', and the prefix '_ai_' is reserved")
    }

  def checkGroup(group: String): Unit =
    if (!GroupName.matches(group)) {
      throw DdlErrors.invalidDefinition(
        s"Cannot use column group ${PyRepr.str(group)}: group names are 1-64 characters from [A-Za-z0-9_.-] and " +
          "start with a letter, digit or '_'")
    }

  def checkTable(name: String): Unit =
    if (!TableNames.validName(name)) {
      throw DdlErrors.invalidDefinition(
        s"Cannot use table name ${PyRepr.str(name)}: names are 1-128 characters of letters, digits and '_', " +
          "starting with a letter or '_' (no path separators, dots, quotes or spaces)")
    }
}

/** Spark types → the DDL strings Python stores (vocabulary/types.py `to_ddl` of the canonical types). */
private[source] object DdlTypes {
  def plainString(s: StringType): Boolean = CatalogTypes.plainString(s)

  /** The catalog's DDL of `t` ([[CatalogTypes.ddl]]); an unsupported type is refused naming `column` and `action`. */
  def ddl(t: DataType, column: String, action: String): String =
    CatalogTypes.ddl(t, column).fold(
      { case (c, other) => throw DdlErrors.unsupportedType(action, c, other.sql.toLowerCase(Locale.ROOT)) },
      identity)

  /** Arrow's name of the type Python stores for `t` (`str(pa.DataType)`, in key errors). */
  def arrowName(t: DataType): String = t match {
    case BooleanType => "bool"
    case ByteType => "int8"
    case ShortType => "int16"
    case IntegerType => "int32"
    case LongType => "int64"
    case FloatType => "float"
    case DoubleType => "double"
    case _: StringType => "string"
    case BinaryType => "binary"
    case DateType => "date32[day]"
    case TimestampType => "timestamp[us, tz=UTC]"
    case TimestampNTZType => "timestamp[us]"
    case d: DecimalType => s"decimal128(${d.precision}, ${d.scale})"
    case ArrayType(e, _) => s"list<item: ${arrowName(e)}>"
    case MapType(k, v, _) => s"map<${arrowName(k)}, ${arrowName(v)}>"
    case StructType(fs) => fs.map(f => s"${f.name}: ${arrowName(f.dataType)}").mkString("struct<", ", ", ">")
    case other => other.sql.toLowerCase(Locale.ROOT)
  }
}

/**
 * settings.py `check_properties` for table properties given as text (TBLPROPERTIES): the
 * Python settings with their value rules (mirrored here; tests/test_settings.py checks the keys
 * against Python's), the JVM's `read.*` settings by name, any key outside the reserved prefixes.
 */
private[source] object PropertyCheck {
  private sealed trait Rule
  private case object PositiveInt extends Rule
  private case object PositiveIntOrNone extends Rule
  private case object IntOrNone extends Rule
  private case object Codec extends Rule
  private final case class Ratio(lowOpen: Boolean) extends Rule
  private case object NonNegativeNumber extends Rule
  private case object PositiveNumber extends Rule
  private final case class OneOf(values: String*) extends Rule

  /** Python's settings (settings.py SETTINGS), key → rule. */
  private val PythonSettings: Seq[(String, Rule)] = Seq(
    "write.row_group_size" -> PositiveInt,
    "write.row_group_bytes" -> PositiveIntOrNone,
    "write.compression" -> Codec,
    "write.compression_level" -> IntOrNone,
    "write.wide_row_bytes" -> PositiveInt,
    "write.wide_data_page_size" -> PositiveInt,
    "write.page_rows" -> PositiveIntOrNone,
    "write.target_fragment_rows" -> PositiveInt,
    "write.target_fragment_bytes" -> PositiveInt,
    "read.late_materialization_max_selectivity" -> Ratio(lowOpen = true),
    "read.access_log" -> OneOf("true", "false"),
    "read.views" -> OneOf("true", "false"),
    "backfill.max_error_ratio" -> Ratio(lowOpen = false),
    "backfill.max_skip_ratio" -> Ratio(lowOpen = false),
    "backfill.on_corrupt" -> OneOf("skip", "fail"),
    "backfill.tuning" -> OneOf("on", "off"),
    "backfill.engine" -> OneOf("spark", "python"),
    "governance.orphan_min_age_s" -> NonNegativeNumber,
    "governance.lease_ttl_s" -> PositiveNumber
  )
  private val Reserved = Seq("read.", "write.", "backfill.", "table.")
  private lazy val jvmReadKeys: Seq[String] = OmniTableConf.entries.flatMap(_.tableKey)
  private val Json = new ObjectMapper().enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS)

  def check(properties: Map[String, String]): Unit = properties.toSeq.sortBy(_._1).foreach { case (key, value) =>
    PythonSettings.find(_._1 == key) match {
      case Some((_, rule)) =>
        expected(rule, value).foreach { e =>
          throw DdlErrors.invalidDefinition(
            s"Cannot create table: property ${PyRepr.str(key)} must be $e, got ${PyRepr.str(value)}")
        }
      case None if Reserved.exists(key.startsWith) && !jvmReadKeys.contains(key) =>
        val known = PythonSettings.map(_._1) ++ jvmReadKeys
        val prefix = key.split("\\.", 2)(0) + "."
        val same = Some(known.filter(_.startsWith(prefix)).sorted).filter(_.nonEmpty).getOrElse(known.sorted)
        throw DdlErrors.invalidDefinition(
          s"Cannot create table: unknown setting ${PyRepr.str(key)}; known: ${same.mkString(", ")}")
      case None =>
    }
  }

  /** None when `value` is valid for `rule`, else what Python says it expects. */
  private def expected(rule: Rule, value: String): Option[String] = {
    lazy val json: Option[JsonNode] = Try(Json.readTree(value)).toOption.filter(_ != null)
    def isInt = json.exists(n => n.isIntegralNumber)
    def isNull = json.exists(_.isNull)
    def number = json.filter(_.isNumber).map(_.asDouble())
    rule match {
      case PositiveInt => Option.when(!(isInt && json.get.bigIntegerValue.signum > 0))("a positive integer")
      case PositiveIntOrNone =>
        Option.when(!(isNull || (isInt && json.get.bigIntegerValue.signum > 0)))("a positive integer or None")
      case IntOrNone => Option.when(!(isNull || isInt))("an integer or None")
      case Codec => Option.when(value.trim.isEmpty)("a codec name or None")
      case Ratio(open) =>
        val ok = number.exists(v => if (open) v > 0 && v <= 1 else v >= 0 && v <= 1)
        Option.when(!ok)(if (open) "a number in (0, 1]" else "between 0 and 1")
      case NonNegativeNumber => Option.when(!number.exists(_ >= 0))("a number >= 0")
      case PositiveNumber => Option.when(!number.exists(_ > 0))("a number > 0")
      case OneOf(values @ _*) => Option.when(!values.contains(value))(s"one of ${values.mkString(", ")}")
    }
  }
}
