package io.omnitable.spark

import java.io.File
import java.nio.file.Files

import scala.sys.process._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}

/**
 * The test warehouses, built once per test JVM by tests/spark/fixtures/make_warehouses.py with
 * the Python API (Python is the only writer; the JVM suites never write table data).
 * `expected(name)` is what the Python reader returned for a case, as Parquet.
 */
object TestWarehouses {

  lazy val repoRoot: File = new File(sys.env.getOrElse("OMNITABLE_REPO_ROOT", ".")).getAbsoluteFile

  lazy val python: String = sys.env.get("OMNITABLE_PYTHON").getOrElse {
    val venv = new File(repoRoot, ".venv/bin/python")
    if (venv.canExecute) venv.getPath else "python3"
  }

  lazy val dir: File = {
    val out = new File(repoRoot, "target/test-warehouses")
    val script = new File(repoRoot, "tests/spark/fixtures/make_warehouses.py")
    val log = new StringBuilder
    val logger = ProcessLogger(line => log.append(line).append('\n'), line => log.append(line).append('\n'))
    val rc = Process(
      Seq(python, script.getPath, out.getPath),
      repoRoot,
      "SPARK_LOCAL_IP" -> "127.0.0.1").!(logger)
    if (rc != 0) throw new IllegalStateException(s"Cannot build the test warehouses ($python $script, exit $rc):\n$log")
    out
  }

  lazy val manifest: JsonNode = new ObjectMapper().readTree(new File(dir, "manifest.json"))

  /** The SQLite warehouse directory. */
  lazy val warehouse: String = manifest.get("warehouse").asText()

  def expected(name: String): String = new File(dir, s"expected/$name.parquet").getPath

  def version(table: String, key: String): Long = manifest.get(table).get(key).asLong()

  /** A scratch copy of the SQLite warehouse (for tests that must alter the catalog file). */
  def copyOfWarehouse(): File = {
    val target = Files.createTempDirectory("omnitable-wh-copy").toFile
    val src = new File(warehouse, "catalog.db")
    Files.copy(src.toPath, new File(target, "catalog.db").toPath)
    target
  }
}
