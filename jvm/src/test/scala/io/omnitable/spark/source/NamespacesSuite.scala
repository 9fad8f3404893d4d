package io.omnitable.spark.source

import java.io.File
import java.util.Properties

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.assertSameRows
import io.omnitable.spark.catalog.TableNames
import org.apache.spark.sql.AnalysisException
import org.apache.spark.sql.connector.catalog.Identifier
import org.scalatest.funsuite.AnyFunSuite

/**
 * Namespaces in the catalog plugin on a copy of the test warehouse whose catalog moves `types`
 * into namespace `ns` and `misaligned` into namespace `refs` as table `branch_dev` (a name that
 * is also the branch form of table `refs`), data files left where they are (the copy's root is
 * the original warehouse).
 */
class NamespacesSuite extends AnyFunSuite with SharedSparkSession {

  private lazy val copy: String = {
    val dir = TestWarehouses.copyOfWarehouse()
    val root = new File(TestWarehouses.warehouse).getAbsolutePath.replace("'", "''")
    val conn = new org.sqlite.JDBC().connect("jdbc:sqlite:" + new File(dir, "catalog.db"), new Properties())
    try Seq(
        s"UPDATE omnitable_meta SET value = '$root' WHERE key = 'root'",
        "INSERT INTO namespaces (name, properties, created_at) VALUES ('ns', '{\"comment\": \"web\"}', 'x')",
        "INSERT INTO namespaces (name, properties, created_at) VALUES ('refs', '{}', 'x')",
        "UPDATE tables SET namespace = 'ns' WHERE name = 'types'",
        "UPDATE tables SET namespace = 'refs', name = 'branch_dev' WHERE name = 'misaligned'"
      ).foreach(conn.createStatement().executeUpdate)
    finally conn.close()
    dir.getPath
  }

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    spark.conf.set("spark.sql.catalog.nscat", classOf[OmniTableCatalog].getName)
    spark.conf.set("spark.sql.catalog.nscat.warehouse", copy)
  }

  private def expected(name: String) = spark.read.parquet(TestWarehouses.expected(name))
  private def error(sql: String) = intercept[AnalysisException](spark.sql(sql).collect())
  private def names(sql: String, column: Int) = spark.sql(sql).collect().map(_.getString(column)).toSeq.sorted

  test("SHOW NAMESPACES and SHOW TABLES per namespace; default holds the tables named without one") {
    assert(names("SHOW NAMESPACES IN nscat", 0) == Seq("default", "ns", "refs"))
    assert(names("SHOW TABLES IN nscat.ns", 1) == Seq("types"))
    assert(names("SHOW TABLES IN nscat.default", 1) == Seq("pruning", "refs"))
    assert(names("SHOW TABLES IN nscat", 1) == Seq("pruning", "refs"))
    assert(error("SHOW TABLES IN nscat.nope").getCondition == "SCHEMA_NOT_FOUND")
    val described = spark.sql("DESCRIBE NAMESPACE EXTENDED nscat.ns").collect().map(_.mkString("|"))
    assert(described.exists(_.contains("web")), described.mkString("\n"))
  }

  test("omnitable.<namespace>.<table> reads the table; omnitable.web is omnitable.default.web") {
    assertSameRows(spark.sql("SELECT * FROM nscat.ns.types"), expected("types"))
    assertSameRows(spark.table("nscat.default.refs"), expected("refs_head"))
    assertSameRows(spark.table("nscat.refs"), expected("refs_head"))
    val moved = error("SELECT * FROM nscat.types")
    assert(moved.getCondition == "TABLE_OR_VIEW_NOT_FOUND")
    assert(moved.getMessage.contains("Cannot find table 'types'"), moved.getMessage)
    val missingNs = error("SELECT * FROM nscat.nope.web")
    assert(missingNs.getMessage.contains("Namespace 'nope' does not exist"), missingNs.getMessage)
    assert(spark.catalog.tableExists("nscat.ns.types"))
    assert(!spark.catalog.tableExists("nscat.types"))
    val read = spark.read.format("omnitable").option("warehouse", copy).load("ns.types")
    assertSameRows(read, expected("types"))
    assertSameRows(
      spark.read.format("omnitable").option("warehouse", copy).option("table", "default.refs").load(),
      expected("refs_head"))
  }

  test("a table wins over the branch form: omnitable.refs.branch_dev is table branch_dev of namespace refs") {
    assertSameRows(spark.table("nscat.refs.branch_dev"), expected("misaligned"))
    assertSameRows(spark.table("nscat.default.refs.branch_dev"), expected("refs_dev"))
    assertSameRows(spark.table("nscat.refs.tag_t1"), expected("refs_t1")) // no table refs.tag_t1
    assertSameRows(spark.table("nscat.ns.types.branch_main"), expected("types"))
    assert(spark.catalog.tableExists("nscat.default.refs.branch_dev"))
    assert(!spark.catalog.tableExists("nscat.ns.types.branch_nope"))
  }

  test("CREATE NAMESPACE, DROP NAMESPACE and their errors") {
    spark.sql("CREATE NAMESPACE nscat.fresh COMMENT 'made by Spark'")
    assert(names("SHOW NAMESPACES IN nscat", 0).contains("fresh"))
    assert(error("CREATE NAMESPACE nscat.fresh").getCondition == "SCHEMA_ALREADY_EXISTS")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS nscat.fresh")
    assert(names("SHOW TABLES IN nscat.fresh", 1).isEmpty)
    spark.sql("DROP NAMESPACE nscat.fresh")
    assert(!names("SHOW NAMESPACES IN nscat", 0).contains("fresh"))
    assert(error("DROP NAMESPACE nscat.fresh").getCondition == "SCHEMA_NOT_FOUND")
    spark.sql("DROP NAMESPACE IF EXISTS nscat.fresh")
    assert(error("DROP NAMESPACE nscat.ns").getCondition == "SCHEMA_NOT_EMPTY") // CASCADE: tests/spark
    assert(error("DROP NAMESPACE nscat.default").getMessage.contains("Cannot drop namespace 'default'"))
    assert(error("DROP NAMESPACE nscat.default CASCADE").getMessage.contains("Cannot drop namespace 'default'"))
    assert(error("CREATE NAMESPACE nscat.a.b").getMessage.contains("namespaces have one level"))
    assert(error("CREATE NAMESPACE nscat.`a-b`").getMessage.contains("Cannot use namespace 'a-b'"))
    assert(names("SHOW NAMESPACES IN nscat", 0) == Seq("default", "ns", "refs"))
    assertSameRows(spark.sql("SELECT * FROM nscat.ns.types"), expected("types"))
  }

  test("TableAddress: candidates in order, and the first whose table exists wins") {
    def ident(parts: String*) = Identifier.of(parts.init.toArray, parts.last)
    val d = TableNames.DefaultNamespace
    assert(TableAddress.candidates(ident("web")) == Seq(TableAddress(d, "web", None)))
    assert(TableAddress.candidates(ident("a", "branch_x")) == Seq(
      TableAddress("a", "branch_x", None),
      TableAddress(d, "a", Some("branch" -> "x"))))
    assert(TableAddress.candidates(ident("ns", "web", "tag_v1")) == Seq(TableAddress("ns", "web", Some("tag" -> "v1"))))
    assert(TableAddress.candidates(ident("a", "b", "c")).isEmpty)
    assert(TableAddress.candidates(ident("a", "b", "c", "d")).isEmpty)
    val onlyA = Set("a")
    assert(TableAddress.resolve(ident("a", "branch_x"), onlyA).contains(TableAddress(d, "a", Some("branch" -> "x"))))
    assert(TableAddress.resolve(ident("a", "branch_x"), Set("a", "a.branch_x")).contains(
      TableAddress("a", "branch_x", None)))
    assert(TableAddress.resolve(ident("ns", "web"), Set.empty[String]).contains(TableAddress("ns", "web", None)))
    val noLookup = (t: String) => fail(s"looked up $t for an identifier with one candidate")
    assert(TableAddress.resolve(ident("web"), noLookup).contains(TableAddress(d, "web", None)))
    assert(TableAddress(d, "web", None).tableAddress == "web")
    assert(TableAddress("ns", "web", Some("branch" -> "x")).display == "ns.web.branch_x")
    assert(TableNames.split("ns.web").contains("ns" -> "web"))
    assert(TableNames.split("web").contains(d -> "web"))
    assert(TableNames.split("a.b.c").isEmpty && TableNames.split(".web").isEmpty)
  }
}
