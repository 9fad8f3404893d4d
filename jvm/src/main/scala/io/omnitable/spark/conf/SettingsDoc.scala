package io.omnitable.spark.conf

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}

/**
 * The settings table of docs/spark.md, rendered from [[OmniTableConf.entries]] so the docs cannot
 * drift from the code (`SettingsDocSuite` fails when they differ). Regenerate it with
 * `scripts/sbt -batch "Test/runMain io.omnitable.spark.conf.SettingsDoc docs/spark.md"`.
 */
object SettingsDoc {

  /** The lines the generated table sits between. */
  val Begin: String =
    "<!-- settings table: generated from OmniTableConf, do not edit by hand; regenerate with " +
      "scripts/sbt -batch \"Test/runMain io.omnitable.spark.conf.SettingsDoc docs/spark.md\" -->"
  val End = "<!-- end of settings table -->"

  private def cell(text: String): String = text.replace("|", "\\|").replace("\n", " ")

  private def code(text: Option[String]): String = text.map(t => s"`$t`").getOrElse("-")

  /** The markdown table: one row per setting, in declaration order. */
  def table: String = {
    val header = Seq(
      "| session setting | read option | table property | default | meaning |",
      "|---|---|---|---|---|")
    val rows = OmniTableConf.entries.map { e =>
      Seq(
        code(Some(e.sessionKey)),
        code(e.optionKey),
        code(e.tableKey),
        code(e.default.map(_.toString)),
        cell(e.doc)).mkString("| ", " | ", " |")
    }
    (header ++ rows).mkString("\n")
  }

  /** `doc` with the text between [[Begin]] and [[End]] replaced by [[table]]. */
  def render(doc: String): String = {
    val start = doc.indexOf(Begin)
    val end = doc.indexOf(End)
    require(
      start >= 0 && end > start,
      s"Cannot render the settings table: the document has no '$Begin' line followed by a '$End' line")
    doc.substring(0, start + Begin.length) + "\n" + table + "\n" + doc.substring(end)
  }

  /** Rewrites the settings table of the markdown file `args(0)` (e.g. docs/spark.md) in place. */
  def main(args: Array[String]): Unit = {
    require(args.length == 1, "usage: SettingsDoc <markdown file, e.g. docs/spark.md>")
    val path = Paths.get(args(0))
    val doc = new String(Files.readAllBytes(path), StandardCharsets.UTF_8)
    Files.write(path, render(doc).getBytes(StandardCharsets.UTF_8))
  }
}
