package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets

/**
 * The catalog schema this jar was built against: python/omnitable/catalog/schema.sql, bundled by
 * build.sbt at /omnitable/schema.sql (never copied in the repo). The JVM only reads catalogs, so
 * it needs the version line; the statements are exposed for test fixtures.
 */
object SchemaFile {

  val ResourcePath = "/omnitable/schema.sql"

  private val VersionLine = """(?m)^--\s*omnitable-schema-version:\s*(\d+)\s*$""".r

  lazy val text: String = {
    val in = getClass.getResourceAsStream(ResourcePath)
    if (in == null) throw new IllegalStateException(s"$ResourcePath is missing from the omnitable jar")
    try new String(in.readAllBytes(), StandardCharsets.UTF_8)
    finally in.close()
  }

  /** The `-- omnitable-schema-version: N` of the bundled schema. */
  lazy val version: Int = VersionLine.findFirstMatchIn(text).map(_.group(1).toInt).getOrElse(
    throw new IllegalStateException(s"$ResourcePath has no '-- omnitable-schema-version: N' line"))

  /** The DDL statements (separated by lines holding a single ';'), comments kept. */
  lazy val statements: Seq[String] =
    text.split("(?m)^\\s*;\\s*$").toSeq.map(_.trim).filter { stmt =>
      stmt.linesIterator.exists(l => l.trim.nonEmpty && !l.trim.startsWith("--"))
    }
}
