package io.omnitable.spark.catalog

import java.nio.file.{Files, Paths}

import org.scalatest.funsuite.AnyFunSuite

class SchemaFileSuite extends AnyFunSuite {

  test("the bundled schema is the Python package's schema.sql, byte for byte") {
    val root = Paths.get(sys.env.getOrElse("OMNITABLE_REPO_ROOT", "."))
    val source = new String(Files.readAllBytes(root.resolve("python/omnitable/catalog/schema.sql")), "UTF-8")
    assert(SchemaFile.text == source)
  }

  test("the schema version comes from the '-- omnitable-schema-version: N' line") {
    assert(SchemaFile.version >= 1)
  }

  test("statements split on lines holding a single ';' and are all DDL") {
    assert(SchemaFile.statements.nonEmpty)
    SchemaFile.statements.foreach { s =>
      val firstCode = s.linesIterator.map(_.trim).find(l => l.nonEmpty && !l.startsWith("--")).get
      assert(firstCode.startsWith("CREATE "), s)
    }
    assert(SchemaFile.statements.exists(_.contains("CREATE TABLE IF NOT EXISTS column_sets")))
    assert(SchemaFile.statements.exists(_.contains("CREATE TABLE IF NOT EXISTS deletion_vectors")))
  }
}
