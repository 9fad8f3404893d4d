package io.omnitable.spark.source

import scala.collection.mutable

import io.omnitable.spark.SharedSparkSession
import io.omnitable.spark.catalog.{HandMadeCatalog, PyJson}
import io.omnitable.spark.errors.OmniTableAnalysisException
import org.apache.spark.sql.AnalysisException
import org.scalatest.funsuite.AnyFunSuite

/**
 * CREATE TABLE, CTAS and ALTER TABLE … ADD COLUMNS of the catalog plugin on a fresh SQLite
 * catalog: the rows written (as Python's create_table and add_columns write them, checked
 * against Python itself in tests/spark/test_spark_ddl.py), the refusals, and a failed CTAS
 * leaving nothing behind.
 */
class TableDdlSuite extends AnyFunSuite with SharedSparkSession {

  /** A backslash and `u`: the start of a JSON unicode escape (s-strings escape nothing in `$U`). */
  private val U = "\\u"

  private def withCatalog(body: (String, HandMadeCatalog) => Unit): Unit = {
    val c = new HandMadeCatalog
    val name = s"ddl_${System.nanoTime()}"
    spark.conf.set(s"spark.sql.catalog.$name", classOf[OmniTableCatalog].getName)
    spark.conf.set(s"spark.sql.catalog.$name.warehouse", c.dir.getPath)
    try body(name, c)
    finally c.close()
  }

  private def rows(c: HandMadeCatalog, sql: String): Seq[String] = {
    val out = mutable.ArrayBuffer.empty[String]
    c.foreach(sql) { rs =>
      out += (1 to rs.getMetaData.getColumnCount).map(i => String.valueOf(rs.getObject(i))).mkString("|")
    }
    out.toSeq
  }

  private def columnsOf(c: HandMadeCatalog, table: String): Seq[String] = rows(
    c,
    "SELECT c.column_id, c.name, c.data_type, c.nullable, c.position, c.group_name, c.added_version " +
      s"FROM columns c JOIN tables t ON t.table_id = c.table_id WHERE t.name = '$table' ORDER BY c.column_id"
  )

  private def commitsOf(c: HandMadeCatalog, table: String): Seq[String] = rows(
    c,
    "SELECT m.version, m.parent_version, m.op, m.summary FROM commits m JOIN tables t ON t.table_id = m.table_id " +
      s"WHERE t.name = '$table' ORDER BY m.version"
  )

  private def failure(sql: String): AnalysisException = intercept[AnalysisException](spark.sql(sql).collect())

  test("CREATE TABLE writes Python's rows: columns, groups, key and properties as Python's JSON") {
    withCatalog { (cat, c) =>
      spark.sql(
        s"CREATE TABLE $cat.web (url STRING NOT NULL, title STRING, s STRUCT<a: INT, `b c`: ARRAY<DATE>>, " +
          "p DECIMAL(10,2)) USING omnitable TBLPROPERTIES ('groups.text' = 'title', 'key' = 'url', " +
          "'write.compression' = 'snappy', 'note' = 'é\"')").collect()
      assert(columnsOf(c, "web") == Seq(
        "0|_ai_unique_id_|bigint|0|0|base|0",
        "1|url|string|0|1|base|0",
        "2|title|string|1|2|text|0",
        "3|s|struct<a:int,`b c`:array<date>>|1|3|base|0",
        "4|p|decimal(10,2)|1|4|base|0"
      ))
      assert(rows(c, "SELECT properties, next_column_id, location LIKE 'web-%' FROM tables WHERE name = 'web'") ==
        Seq(s"""{"note": "${U}00e9\\"", "table.key": ["url"], "write.compression": "snappy"}|5|1"""))
      assert(commitsOf(c, "web") == Seq("""0|null|create|{"columns": 4}"""))
      assert(rows(
        c,
        "SELECT r.name, r.kind, r.version FROM refs r JOIN tables t ON t.table_id = r.table_id " +
          "WHERE t.name = 'web'") == Seq("main|branch|0"))
    }
  }

  test("ALTER TABLE ADD COLUMNS commits the columns in a new group named after the first one") {
    withCatalog { (cat, c) =>
      spark.sql(s"CREATE TABLE $cat.web (url STRING, x INT) TBLPROPERTIES ('groups.lang' = 'x')").collect()
      spark.sql(s"ALTER TABLE $cat.web ADD COLUMNS (lang STRING, views BIGINT)").collect()
      assert(columnsOf(c, "web").drop(3) == Seq("3|lang|string|1|3|lang-2|1", "4|views|bigint|1|4|lang-2|1"))
      assert(commitsOf(c, "web").last ==
        """1|0|add_columns|{"columns": ["lang", "views"], "files": 0, "group": "lang-2", "rows": 0}""")
      assert(spark.table(s"$cat.web").columns.toSeq.filterNot(_.startsWith("_ai_")) == Seq("url", "x", "lang", "views"))
      val exists = failure(s"ALTER TABLE $cat.web ADD COLUMNS (views INT)")
      assert(exists.getCondition == "FIELD_ALREADY_EXISTS") // Spark checks the table schema first
      val drop = failure(s"ALTER TABLE $cat.web DROP COLUMN views")
      assert(drop.getMessage.contains("OMNITABLE_UNSUPPORTED_DDL") && drop.getMessage.contains(".retire("))
      assert(commitsOf(c, "web").size == 2)
    }
  }

  test("refused definitions write nothing; REPLACE TABLE is refused") {
    withCatalog { (cat, c) =>
      val bad = failure(s"CREATE TABLE $cat.t (a INT) TBLPROPERTIES ('write.row_group_size' = '1.5')")
      assert(bad.asInstanceOf[OmniTableAnalysisException].omniErrorClass == "OMNITABLE_INVALID_TABLE_DEFINITION")
      assert(bad.getMessage.contains(
        "Cannot create table: property 'write.row_group_size' must be a positive integer, got '1.5'"))
      val group = failure(s"CREATE TABLE $cat.t (a INT) TBLPROPERTIES ('groups.g' = 'b')")
      assert(group.getMessage.contains("Cannot put column 'b' in group 'g': no such column in the schema"))
      assert(failure(s"CREATE TABLE $cat.t (a INT) USING delta").getMessage.contains("USING delta"))
      val replace = failure(s"REPLACE TABLE $cat.hand (a INT)")
      assert(replace.getMessage.contains("OMNITABLE_UNSUPPORTED_DDL"))
      assert(rows(c, "SELECT name FROM tables") == Seq("hand"))
    }
  }

  test("a CTAS appends one named batch; a failed one leaves no table and no directory") {
    withCatalog { (cat, c) =>
      withConf("spark.omnitable.write.appendName" -> "b1") {
        spark.sql(s"CREATE TABLE $cat.ok AS SELECT id AS a, CAST(id AS STRING) AS s FROM range(3)").collect()
        assert(spark.sql(s"SELECT count(*) FROM $cat.ok").head().getLong(0) == 3)
        assert(commitsOf(c, "ok").map(_.split('|')(2)) == Seq("create", "append"))
        val dirs = Option(c.dir.listFiles()).toSeq.flatten.filter(_.isDirectory).map(_.getName).toSet
        intercept[Exception] {
          spark.sql(s"CREATE TABLE $cat.bad AS SELECT id, 10 / (id - 2) AS q FROM range(5)").collect()
        }
        assert(rows(c, "SELECT name FROM tables ORDER BY name") == Seq("hand", "ok"))
        assert(Option(c.dir.listFiles()).toSeq.flatten.filter(_.isDirectory).map(_.getName).toSet == dirs)
      }
    }
  }

  test("PyJson writes what Python's json.dumps(sort_keys=True) writes") {
    assert(PyJson.dumps(Map("b" -> Seq("x", "\u00e9\u007f\u0001\n\"\\"), "a" -> 1)) ==
      s"""{"a": 1, "b": ["x", "${U}00e9${U}007f${U}0001\\n\\"\\\\"]}""")
    assert(PyJson.dumps(Map.empty[String, String]) == "{}")
  }
}
