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

  test("secret query parameters are redacted and count as literal passwords") {
    val a = CatalogAddress.parse("postgresql://u@h/d?sslmode=require&password=hunter2&SSLPassword=k3y")
      .asInstanceOf[PostgresAddress]
    assert(!a.display.contains("hunter2") && !a.display.contains("k3y"), a.display)
    assert(a.display == "postgresql://u@h/d?sslmode=require&password=***&SSLPassword=***")
    assert(a.hasLiteralPassword)
    val env = CatalogAddress.parse("postgresql://u:env:OMNITABLE_PW@h/d?sslmode=require").asInstanceOf[PostgresAddress]
    assert(!env.hasLiteralPassword)
    val e = intercept[OmniTableAnalysisException](CatalogAddress.parse("postgresql://u:pw@h?password=hunter2"))
    assert(!e.getMessage.contains("hunter2") && !e.getMessage.contains(":pw@"), e.getMessage)
  }

  test("env: passwords read only variables under the allowed prefixes") {
    val vars = Map("AWS_SECRET_ACCESS_KEY" -> "aws-secret", "OMNITABLE_PW" -> "omni", "MYAPP_PW" -> "mine")
    val env: JdbcConnector.Env = vars.get
    // port 1: a connection attempt would fail with another error than the one expected here
    val aws = CatalogAddress.parse("postgresql://u:env:AWS_SECRET_ACCESS_KEY@127.0.0.1:1/d")
    val e = intercept[OmniTableAnalysisException](JdbcConnector.open(aws, env))
    assert(e.omniErrorClass == "OMNITABLE_CREDENTIAL_NOT_ALLOWED", e.getMessage)
    assert(e.getMessage.contains("OMNITABLE_, PG") && !e.getMessage.contains("aws-secret"))
    assert(JdbcConnector.envPassword("d", "OMNITABLE_PW", env) == "omni")
    val custom: JdbcConnector.Env = (vars + ("OMNITABLE_ENV_PREFIXES" -> "MYAPP_")).get
    assert(JdbcConnector.envPassword("d", "MYAPP_PW", custom) == "mine")
    intercept[OmniTableAnalysisException](JdbcConnector.envPassword("d", "OMNITABLE_PW", custom))
  }

  test("a read option's env: password resolves only for a configured warehouse") {
    val wh = "postgresql://u:env:OMNITABLE_PW@127.0.0.1:1/d"
    val e = intercept[OmniTableAnalysisException](CatalogReader.fromReadOption(wh, Seq.empty))
    assert(e.omniErrorClass == "OMNITABLE_CREDENTIAL_NOT_ALLOWED" && e.getMessage.contains("spark.omnitable.warehouse"))
    assert(CatalogReader.fromReadOption(wh, Seq("/other", wh)).address.isInstanceOf[PostgresAddress])
    // another database on the configured server, same user and variable: allowed
    val otherDb = "postgresql://u:env:OMNITABLE_PW@127.0.0.1:1/other"
    assert(CatalogReader.fromReadOption(otherDb, Seq(wh)).address.isInstanceOf[PostgresAddress])
    // another server, user or variable than the configured one: refused
    for (bad <- Seq(
        "postgresql://u:env:OMNITABLE_PW@evil.example:1/d",
        "postgresql://u:env:OMNITABLE_PW@127.0.0.1:2/d",
        "postgresql://v:env:OMNITABLE_PW@127.0.0.1:1/d",
        "postgresql://u:env:OMNITABLE_OTHER@127.0.0.1:1/d"
      )) {
      val err = intercept[OmniTableAnalysisException](CatalogReader.fromReadOption(bad, Seq(wh)))
      assert(err.omniErrorClass == "OMNITABLE_CREDENTIAL_NOT_ALLOWED", bad)
    }
  }

  test("a literal password in a setting or read option is refused without showing it") {
    for (wh <- Seq("postgresql://u:hunter2@h/d", "postgresql://u@h/d?sslpassword=hunter2")) {
      val e = intercept[OmniTableAnalysisException](CatalogReader.configured("spark.omnitable.warehouse", wh))
      assert(e.omniErrorClass == "OMNITABLE_PASSWORD_IN_CONFIG" && e.getMessage.contains("env:NAME"))
      assert(!e.getMessage.contains("hunter2") && e.getMessage.contains("spark.omnitable.warehouse"), e.getMessage)
      val o = intercept[OmniTableAnalysisException](CatalogReader.fromReadOption(wh, Seq(wh)))
      assert(o.omniErrorClass == "OMNITABLE_PASSWORD_IN_CONFIG" && !o.getMessage.contains("hunter2"))
    }
    assert(CatalogReader.configured("k", "postgresql://u:env:OMNITABLE_PW@h/d").display.contains("env:OMNITABLE_PW"))
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
