package io.omnitable.spark.conf

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import io.omnitable.spark.TestWarehouses
import org.scalatest.funsuite.AnyFunSuite

class SettingsDocSuite extends AnyFunSuite {

  private val docFile = new File(TestWarehouses.repoRoot, "docs/spark.md")

  test("docs/spark.md's settings table is the one rendered from OmniTableConf") {
    val doc = new String(Files.readAllBytes(docFile.toPath), StandardCharsets.UTF_8)
    assert(
      SettingsDoc.render(doc) == doc,
      "docs/spark.md's settings table differs from OmniTableConf; regenerate it with " +
        "scripts/sbt -batch \"Test/runMain io.omnitable.spark.conf.SettingsDoc docs/spark.md\""
    )
  }

  test("the table has one row per setting, with its read option, table property and default") {
    val rows = SettingsDoc.table.split("\n").drop(2).toSeq
    assert(rows.size == OmniTableConf.entries.size)
    assert(rows.exists(_.startsWith(
      "| `spark.omnitable.read.batch_size` | `batch_size` | `read.batch_size` | `4096` | Rows per columnar batch")))
    assert(rows.exists(_.startsWith("| `spark.omnitable.optimizer.fuse_scans` | - | - | `true` |")))
    assert(rows.exists(_.startsWith("| `spark.omnitable.warehouse` | `warehouse` | - | - |")))
  }

  test("a document without the markers is refused") {
    val e = intercept[IllegalArgumentException](SettingsDoc.render("# no table here\n"))
    assert(e.getMessage.contains("Cannot render the settings table"))
  }
}
