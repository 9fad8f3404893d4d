package io.omnitable.spark

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.scalatest.funsuite.AnyFunSuite

/**
 * The packages of the jar form one order of layers; code may use packages below its own, never
 * above (docs/architecture.md, JVM section). Top to bottom:
 *
 *  1. `io.omnitable.spark`: the session extension, the single injection point into Spark
 *  2. `optimizer`: OmniTable's optimizer rules and planner strategy
 *  3. `source`: the data source, the catalog plugin, the table and its read options
 *  4. `procedures`: the stored procedures of the catalog plugin (`CALL omnitable.system.…`)
 *  4a. `backfill`: the JVM backfill of SQL features (planner and driver of the steps)
 *  4b. `metadata`, `write` (siblings): the metadata tables (`omnitable.web.history`, ...): their
 *     schemas, rows and local scans, read from the catalog on the driver; writes from Spark
 *     (write builder, batch write, fragment writers, column rewrites, statistics)
 *  5. `read.plan`: driver-side planning (scan builder, scan, planner, predicate conversion,
 *     selectivity, optimizer marks, table handle), and the slice planner executors run for a
 *     scan planned there (behind `read.exec.SliceResolver`)
 *  6. `read.exec`: executor-side reading (reader factory, fragment reader, column files, cursors,
 *     vectors) and the serializable descriptions the driver sends (input partitions, filters,
 *     statistics evaluation, late materialization, metrics)
 *  7. `metrics`: scan reports and the scan metrics listener
 *  8. `catalog`: the catalog over JDBC (addresses, reader, committer, ref writes, models, snapshot
 *     resolution)
 *  9. `org.apache.spark.omnitable`, `org.apache.spark.sql.omnitable`: bridges to Spark internals
 *  10. `conf`: settings, the jar's version and the Spark version check
 *  11. `errors`: OmniTable's errors
 *
 * A reference is an import of `io.omnitable.spark…`, a fully qualified name in code, or a name
 * relative to the file's package (`errors.OmniTableErrors` from `io.omnitable.spark`). Comments
 * and string literals are not references.
 */
class PackageLayersSuite extends AnyFunSuite {

  private val layers: Seq[Seq[String]] = Seq(
    Seq("io.omnitable.spark"),
    Seq("io.omnitable.spark.optimizer"),
    Seq("io.omnitable.spark.source"),
    Seq("io.omnitable.spark.procedures"),
    Seq("io.omnitable.spark.backfill"),
    Seq("io.omnitable.spark.metadata", "io.omnitable.spark.write"),
    Seq("io.omnitable.spark.read.plan"),
    Seq("io.omnitable.spark.read.exec"),
    Seq("io.omnitable.spark.metrics"),
    Seq("io.omnitable.spark.catalog"),
    Seq("org.apache.spark.omnitable", "org.apache.spark.sql.omnitable"),
    Seq("io.omnitable.spark.conf"),
    Seq("io.omnitable.spark.errors")
  )

  private val rank: Map[String, Int] = layers.zipWithIndex.flatMap { case (ps, i) => ps.map(_ -> i) }.toMap

  private val mainRoot = new File(TestWarehouses.repoRoot, "jvm/src/main/scala")

  private def sources: Seq[File] =
    Files.walk(mainRoot.toPath).iterator().asScala.map(_.toFile).filter(_.getName.endsWith(".scala")).toSeq.sorted

  private val StringLiteral = "(?s)\"\"\".*?\"\"\"|\"(?:[^\"\\\\\\n]|\\\\.)*\"".r
  private val Interpolated = "\\$\\{([^}]*)\\}".r

  /** The text of a Scala file without comments, and of its string literals only the `${...}` code. */
  private def code(text: String): String = {
    val noBlockComments = text.replaceAll("(?s)/\\*.*?\\*/", " ")
    val noStrings = StringLiteral.replaceAllIn(
      noBlockComments,
      m =>
        java.util.regex.Matcher.quoteReplacement(Interpolated.findAllMatchIn(m.matched).map(_.group(1)).mkString(
          " ",
          " ",
          " ")))
    noStrings.replaceAll("//[^\\n]*", " ")
  }

  private val Package = """(?m)^package ([\w.]+)""".r
  private val Qualified = """(?<![\w.])((?:io\.omnitable|org\.apache\.spark(?:\.sql)?\.omnitable)[\w.]*)""".r
  private val Relative = """(?<![\w.])([a-z]\w*(?:\.[a-z]\w*)*)\.[A-Z_{]""".r

  /** The known package a dotted name starts with (the longest one), if any. */
  private def packageOf(name: String): Option[String] =
    rank.keys.filter(p => name == p || name.startsWith(p + ".")).maxByOption(_.length)

  /** Every OmniTable package `file` refers to, with the line of the reference. */
  private def references(pkg: String, text: String): Seq[(String, String)] = {
    val body = code(text)
    val lines = body.split("\n").toSeq.filterNot(_.startsWith("package "))
    lines.flatMap { line =>
      val qualified = Qualified.findAllMatchIn(line).flatMap(m => packageOf(m.group(1)))
      val relative =
        Relative.findAllMatchIn(line).flatMap(m => rank.get(s"$pkg.${m.group(1)}").map(_ => s"$pkg.${m.group(1)}"))
      (qualified ++ relative).filter(_ != pkg).map(_ -> line.trim)
    }
  }

  test("every main package has a place in the layer order") {
    val packages = sources.flatMap(f => Package.findFirstMatchIn(Files.readString(f.toPath)).map(_.group(1))).distinct
    assert(packages.nonEmpty, s"no Scala sources under $mainRoot")
    assert(packages.filterNot(rank.contains).isEmpty, "add new packages to the layer order in this suite")
  }

  test("code only uses packages below its own (no package cycles)") {
    val violations = for {
      file <- sources
      text = Files.readString(file.toPath)
      pkg <- Package.findFirstMatchIn(text).map(_.group(1)).toSeq
      (used, line) <- references(pkg, text)
      if rank(used) <= rank(pkg)
    } yield s"${mainRoot.toPath.relativize(file.toPath)} ($pkg) uses $used: $line"
    assert(violations.isEmpty, violations.mkString("\n", "\n", ""))
  }

  test("the check sees imports, qualified and package-relative references") {
    val text = "package io.omnitable.spark\nimport io.omnitable.spark.read.plan.{A, B}\n" +
      "// io.omnitable.spark.conf.X in a comment\nval x = errors.OmniTableErrors.y(\"io.omnitable.spark.catalog.C\")\n" +
      "val y = io.omnitable.spark.source.OmniTableTable\n" +
      "val z = s\"as of ${io.omnitable.spark.catalog.SnapshotResolver.formatMicros(m)} in io.omnitable.spark.conf\""
    assert(references("io.omnitable.spark", text).map(_._1).toSet == Set(
      "io.omnitable.spark.read.plan",
      "io.omnitable.spark.errors",
      "io.omnitable.spark.source",
      "io.omnitable.spark.catalog"))
  }
}
