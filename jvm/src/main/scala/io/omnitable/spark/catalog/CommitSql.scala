package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets

/**
 * The named statements of python/omnitable/catalog/commit.sql (bundled by build.sbt at
 * /omnitable/commit.sql, never copied in the repo): the SQL the Python and JVM committers share.
 * `:name` parameters become JDBC `?` (bound by position, in order of appearance).
 */
private[catalog] object CommitSql {

  val ResourcePath = "/omnitable/commit.sql"

  private val Header = """^--\s*name:\s*(\w+)\s*$""".r
  private val Param = """(?<![:\w]):([A-Za-z_]\w*)""".r

  /** Statement name → SQL with `?` placeholders (comments dropped). */
  lazy val statements: Map[String, String] = parse(load())

  def apply(name: String): String =
    statements.getOrElse(name, throw new IllegalStateException(s"$ResourcePath has no statement '$name'"))

  private def load(): String = {
    val in = getClass.getResourceAsStream(ResourcePath)
    if (in == null) throw new IllegalStateException(s"$ResourcePath is missing from the omnitable jar")
    try new String(in.readAllBytes(), StandardCharsets.UTF_8)
    finally in.close()
  }

  def parse(text: String): Map[String, String] = {
    var current: Option[String] = None
    val body = scala.collection.mutable.LinkedHashMap.empty[String, StringBuilder]
    text.linesIterator.foreach { line =>
      line.trim match {
        case Header(name) =>
          current = Some(name)
          body(name) = new StringBuilder
        case l if l.startsWith("--") || l.isEmpty =>
        case l => current.foreach(n => body(n).append(l).append(' '))
      }
    }
    body.map { case (n, sb) => n -> Param.replaceAllIn(sb.toString.trim, "?") }.toMap
  }
}
