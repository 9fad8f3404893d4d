package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets
import java.security.MessageDigest
import java.util.Locale

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.errors.ProcedureErrors
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser

/**
 * A feature definition as the catalog's `features.definition` holds it (python/omnitable/features/
 * definition.py `Feature.definition`): what registration needs of every feature, SQL or pandas.
 */
final case class FeatureDef(
    name: String,
    inputs: Seq[String],
    outputs: Seq[(String, String)],
    version: String,
    kind: String,
    expr: Option[String],
    fingerprint: String) {
  def id: String = s"$name@$version"
  def outputNames: Seq[String] = outputs.map(_._1)
}

object FeatureDef {

  /** A registered feature from its `features` row (`definition` JSON text, `fingerprint`). */
  def fromRow(definition: String, fingerprint: String): FeatureDef = {
    val d = CatalogWriter.Json.readTree(definition)
    val expr = Option(d.get("expr")).filterNot(_.isNull).map(_.asText())
    FeatureDef(
      d.get("name").asText(),
      d.path("inputs").elements().asScala.map(_.asText()).toSeq,
      d.path("outputs").properties().asScala.map(e => e.getKey -> e.getValue.asText()).toSeq,
      d.get("version").asText(),
      d.get("kind").asText(),
      expr,
      fingerprint
    )
  }
}

/**
 * `omnitable.sql_feature(name, expr, output_type, version, inputs=...)` of Python
 * (features/definition.py): the same validation and messages, the same definition JSON and code
 * fingerprint, so a feature registered from the JVM is the one Python registers.
 */
object SqlFeature {

  private val FeatureName = "^[A-Za-z_][A-Za-z0-9_]{0,63}$".r
  private val ColumnName = "^[A-Za-z_][A-Za-z0-9_\\-]{0,254}$".r

  /** vocabulary/types.py `_ALIASES` Spark's parser does not know. */
  private val Aliases = Map("bool" -> "boolean", "str" -> "string", "text" -> "string")

  private def invalid(msg: String): Throwable = ProcedureErrors.invalidOperation(msg)

  /** A validated SQL feature; `inputs` empty: inferred at registration. */
  def define(name: String, expr: String, outputType: String, version: String, inputs: Seq[String]): FeatureDef = {
    if (expr.strip().isEmpty) throw invalid(s"Cannot define SQL feature '$name': expr must be a SQL expression")
    if (!ColumnName.matches(name) || name.startsWith("_ai_")) {
      throw invalid(
        s"Cannot use column name ${PyRepr.str(name)}: names are 1-255 characters of letters, digits, '_' and '-', " +
          "start with a letter or '_', and the prefix '_ai_' is reserved")
    }
    val ddl = typeDdl(outputType, name)
    if (!FeatureName.matches(name)) {
      throw invalid(
        s"Cannot define feature ${PyRepr.str(name)}: names are 1-64 letters, digits and '_', starting with a " +
          "letter or '_'")
    }
    if (version.strip().isEmpty || version.length > 64) {
      throw invalid(s"Cannot define feature '$name': version must be a short non-empty string like '1'")
    }
    if (inputs.distinct.size != inputs.size) {
      throw invalid(s"Cannot define feature '$name': inputs ${PyRepr.list(inputs)} repeat a column")
    }
    val text = expr.strip()
    FeatureDef(name, inputs, Seq(name -> ddl), version, "sql", Some(text), fingerprint(text, name, ddl))
  }

  /** sha256 of `json.dumps([expr, outputs])` (definition.py `sql_feature`). */
  def fingerprint(expr: String, name: String, ddl: String): String = {
    val json = PyJson.dumps(Seq(expr, Map(name -> ddl)))
    MessageDigest.getInstance("SHA-256").digest(json.getBytes(StandardCharsets.UTF_8))
      .map(b => f"${b & 0xff}%02x").mkString
  }

  /** `json.dumps(Feature.definition(), sort_keys=True)` of a SQL feature. */
  def definitionJson(f: FeatureDef): String = PyJson.dumps(Map(
    "name" -> f.name,
    "inputs" -> f.inputs,
    "outputs" -> f.outputs.toMap,
    "version" -> f.version,
    "kind" -> f.kind,
    "prefer" -> "cpu",
    "options" -> Map.empty[String, Any],
    "expr" -> f.expr,
    "ref" -> None
  ))

  /** The catalog's DDL of a type spec (types.py `to_ddl(parse_type_spec(spec))`). */
  def typeDdl(spec: String, column: String): String = {
    val text = Aliases.getOrElse(spec.trim.toLowerCase(Locale.ROOT), spec)
    val parsed =
      try CatalystSqlParser.parseDataType(text)
      catch {
        case NonFatal(e) =>
          throw invalid(s"Cannot use type '$spec' for column '$column': ${e.getMessage.linesIterator.next()}")
      }
    CatalogTypes.ddl(parsed, column).toOption.getOrElse(throw invalid(
      s"Cannot use type '$spec' for column '$column': ${parsed.sql.toLowerCase(Locale.ROOT)} is not an " +
        "OmniTable type"))
  }

  private val Ident = "(?U)`((?:[^`]|``)+)`|\\b([A-Za-z_][A-Za-z0-9_]*)\\b".r
  private val Strings = "'(?:[^'\\\\]|\\\\.)*'|\"(?:[^\"\\\\]|\\\\.)*\"".r

  /**
   * The columns of `known` the expression of `f` mentions (registry.py `_sql_inputs`): quoted or
   * not, case-insensitively unless `caseSensitive` (spark.sql.caseSensitive), string literals
   * skipped, the feature's own output excluded, in order of first mention.
   */
  def inferInputs(f: FeatureDef, known: Set[String], caseSensitive: Boolean): Seq[String] = {
    val fold: String => String = if (caseSensitive) identity else _.toLowerCase(Locale.ROOT)
    val byKey = mutable.LinkedHashMap.empty[String, mutable.ArrayBuffer[String]]
    known.toSeq.sorted.foreach(n => byKey.getOrElseUpdate(fold(n), mutable.ArrayBuffer.empty) += n)
    val outputs = f.outputNames.map(fold).toSet
    val text = Strings.replaceAllIn(f.expr.getOrElse(""), " ")
    val found = mutable.ArrayBuffer.empty[String]
    Ident.findAllMatchIn(text).foreach { m =>
      val key = fold(Option(m.group(1)).map(_.replace("``", "`")).getOrElse(m.group(2)))
      val matches = byKey.get(key).map(_.toSeq).getOrElse(Nil)
      if (matches.size > 1) {
        throw invalid(
          s"Cannot register SQL feature '${f.name}': '$key' is ambiguous among columns ${PyRepr.list(matches)} " +
            "(identifiers are case-insensitive); pass inputs=[...] explicitly")
      }
      if (matches.nonEmpty && !outputs.contains(key) && !found.contains(matches.head)) found += matches.head
    }
    if (found.isEmpty) {
      throw invalid(
        s"Cannot register SQL feature '${f.name}': its expression mentions no column of the table; pass " +
          "inputs=[...] explicitly")
    }
    found.toSeq
  }

  /**
   * graph.py `FeatureGraph.build`: outputs clash with no raw column nor another feature's output,
   * every input exists, no feature reads its own output, no cycle.
   */
  def checkGraph(features: Seq[FeatureDef], raw: Set[String]): Unit = {
    val producer = mutable.HashMap.empty[String, String]
    features.foreach { f =>
      f.outputNames.foreach { out =>
        if (raw.contains(out)) {
          throw invalid(s"Cannot register feature '${f.name}': output '$out' clashes with an existing raw column")
        }
        producer.get(out).foreach(p =>
          throw invalid(s"Cannot register feature '${f.name}': output '$out' is already produced by feature '$p'"))
        producer(out) = f.name
      }
    }
    features.foreach(f =>
      f.inputs.foreach { i =>
        if (!raw.contains(i) && !producer.contains(i)) {
          throw invalid(
            s"Cannot register feature '${f.name}': input '$i' is neither a column of the table nor an output " +
              "of a registered feature")
        }
        if (producer.get(i).contains(f.name)) {
          throw invalid(s"Cannot register feature '${f.name}': it reads its own output '$i'")
        }
      })
    checkCycles(features.map(f => f.name -> f.inputs.flatMap(producer.get).distinct.sorted).toMap)
  }

  private def checkCycles(deps: Map[String, Seq[String]]): Unit = {
    val done = mutable.HashSet.empty[String]
    val visiting = mutable.ArrayBuffer.empty[String]
    def visit(name: String): Unit = if (!done.contains(name)) {
      if (visiting.contains(name)) {
        val cycle = visiting.drop(visiting.indexOf(name)) :+ name
        throw invalid("Cannot register features: dependency cycle " + cycle.mkString(" -> "))
      }
      visiting += name
      deps(name).foreach(visit)
      visiting.remove(visiting.size - 1)
      done += name
    }
    deps.keys.toSeq.sorted.foreach(visit)
  }
}
