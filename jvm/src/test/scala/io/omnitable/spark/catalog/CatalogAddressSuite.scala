package io.omnitable.spark.catalog

import java.io.File

import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.funsuite.AnyFunSuite

class CatalogAddressSuite extends AnyFunSuite {

  test("a directory holds catalog.db") {
    val a = CatalogAddress.parse("/data/wh").asInstanceOf[SqliteAddress]
    assert(a.dbFile == new File("/data/wh/catalog.db"))
    val rel = CatalogAddress.parse("rel/wh").asInstanceOf[SqliteAddress]
    assert(rel.dbFile == new File(new File("rel/wh").getAbsoluteFile, "catalog.db"))
  }

  test("sqlite URLs name the database file (three slashes relative, four absolute)") {
    assert(CatalogAddress.parse("sqlite:////abs/c.db").asInstanceOf[SqliteAddress].dbFile == new File("/abs/c.db"))
    assert(CatalogAddress.parse("sqlite:///r/c.db").asInstanceOf[SqliteAddress].dbFile ==
      new File("r/c.db").getAbsoluteFile)
    intercept[OmniTableAnalysisException](CatalogAddress.parse("sqlite://"))
    intercept[OmniTableAnalysisException](CatalogAddress.parse("sqlite:///:memory:"))
  }

  test("postgresql URLs, with env: passwords and percent-encoding") {
    val a = CatalogAddress.parse("postgresql://omni:env:PG_PW@db.example:6543/cat?sslmode=require")
      .asInstanceOf[PostgresAddress]
    assert(a.host == "db.example" && a.port == 6543 && a.database == "cat")
    assert(a.user.contains("omni") && a.password.contains(Secret.FromEnv("PG_PW")))
    assert(a.jdbcUrl == "jdbc:postgresql://db.example:6543/cat?sslmode=require")
    val b = CatalogAddress.parse("postgresql+psycopg://u:p%40ss%3Aword@h/d").asInstanceOf[PostgresAddress]
    assert(b.password.contains(Secret.Literal("p@ss:word")) && b.port == 5432)
    val c = CatalogAddress.parse("postgresql://u:env%3AX@h/d").asInstanceOf[PostgresAddress]
    assert(c.password.contains(Secret.FromEnv("X")))
    assert(CatalogAddress.parse("postgres://u@h/d").isInstanceOf[PostgresAddress])
  }

  test("literal passwords never appear in the display form or messages") {
    val a = CatalogAddress.parse("postgresql://u:hunter2@h:5432/d")
    assert(!a.display.contains("hunter2") && a.display.contains("u:***@h"))
    assert(a.asInstanceOf[PostgresAddress].password.get.toString == "***")
    val e = intercept[OmniTableAnalysisException](CatalogAddress.parse("postgresql://u:hunter2@h:5432"))
    assert(!e.getMessage.contains("hunter2"))
    assert(CatalogAddress.parse("postgresql://u:env:PW@h/d").display.contains("env:PW"))
  }

  test("other schemes are refused with the accepted forms") {
    val e = intercept[OmniTableAnalysisException](CatalogAddress.parse("mysql://h/d"))
    assert(e.getMessage.contains("unsupported scheme 'mysql'") && e.getMessage.contains("postgresql://"))
    intercept[OmniTableAnalysisException](CatalogAddress.parse("  "))
  }

  test("data paths become absolute URIs executors can open") {
    val a = SqliteAddress(new File("/wh/catalog.db"), "/wh")
    assert(DataPaths.rootUri(".", a, "/wh") == "file:/wh" || DataPaths.rootUri(".", a, "/wh") == "file:///wh")
    assert(DataPaths.rootUri("s3://bucket/wh/", a, "/wh") == "s3://bucket/wh")
    assert(DataPaths.join("s3://bucket/wh", "web") == "s3://bucket/wh/web")
    assert(DataPaths.join("file:///wh/web", "data/b/f/x.parquet") == "file:///wh/web/data/b/f/x.parquet")
    assert(DataPaths.join("file:///wh", "gs://other/t") == "gs://other/t")
    val pg = PostgresAddress("h", 5432, "d", None, None, "", "pg")
    intercept[OmniTableAnalysisException](DataPaths.rootUri("relative/dir", pg, "pg"))
  }
}
