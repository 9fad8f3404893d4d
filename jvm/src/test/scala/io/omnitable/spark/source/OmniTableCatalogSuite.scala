package io.omnitable.spark.source

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.assertSameRows
import org.apache.spark.sql.AnalysisException
import org.scalatest.funsuite.AnyFunSuite

class OmniTableCatalogSuite extends AnyFunSuite with SharedSparkSession {

  override protected def sparkConf: Map[String, String] = Map(
    "spark.sql.catalog.omnitable" -> classOf[OmniTableCatalog].getName,
    "spark.sql.catalog.omnitable.warehouse" -> TestWarehouses.warehouse)

  private def expected(name: String) = spark.read.parquet(TestWarehouses.expected(name))
  private def v(key: String) = TestWarehouses.version("refs", key)

  test("SHOW TABLES lists the warehouse's tables") {
    val names = spark.sql("SHOW TABLES IN omnitable").collect().map(_.getString(1)).toSeq.sorted
    assert(names == Seq("misaligned", "pruning", "refs", "types"))
  }

  test("DESCRIBE TABLE shows system columns first, then columns in position order") {
    val rows = spark.sql("DESCRIBE TABLE omnitable.refs").collect().map(r => r.getString(0) -> r.getString(1))
    assert(rows.toSeq.take(5) == Seq(
      "_ai_unique_id_" -> "bigint",
      "_ai_append_name_" -> "string",
      "x" -> "bigint",
      "s" -> "string",
      "y" -> "double"))
  }

  test("SELECT from a catalog table equals the Python reader") {
    assertSameRows(spark.sql("SELECT * FROM omnitable.types"), expected("types"))
    assertSameRows(spark.table("omnitable.misaligned"), expected("misaligned"))
  }

  test("VERSION AS OF a number, a tag or a branch") {
    assertSameRows(spark.sql(s"SELECT * FROM omnitable.refs VERSION AS OF ${v("v1")}"), expected("refs_v1"))
    assertSameRows(spark.sql(s"SELECT * FROM omnitable.refs VERSION AS OF ${v("v3")}"), expected("refs_v3"))
    assertSameRows(spark.sql("SELECT * FROM omnitable.refs VERSION AS OF 't1'"), expected("refs_t1"))
    assertSameRows(spark.sql("SELECT * FROM omnitable.refs VERSION AS OF 'dev'"), expected("refs_dev"))
  }

  test("branch_<name> and tag_<name> address a table's branches and tags") {
    assertSameRows(spark.sql("SELECT * FROM omnitable.refs.branch_dev"), expected("refs_dev"))
    assertSameRows(spark.table("omnitable.refs.tag_t1"), expected("refs_t1"))
    assertSameRows(spark.sql("SELECT * FROM omnitable.refs.branch_main"), expected("refs_head"))
    assertSameRows(spark.sql("SELECT * FROM omnitable.refs"), expected("refs_head"))
    // time travel inside the addressed branch's history
    assertSameRows(
      spark.sql(s"SELECT * FROM omnitable.refs.branch_dev VERSION AS OF ${v("v1")}"),
      expected("refs_v1"))
    assertSameRows(
      spark.sql("SELECT * FROM omnitable.refs.branch_dev TIMESTAMP AS OF '2999-01-01 00:00:00'"),
      expected("refs_dev"))
    val described = spark.sql("DESCRIBE TABLE omnitable.refs.branch_dev").collect().map(_.getString(0))
    assert(described.take(4).toSeq == Seq("_ai_unique_id_", "_ai_append_name_", "x", "s"))
    assert(!described.contains("y"), "dev forked before main added y")
    assert(spark.catalog.tableExists("omnitable.refs.branch_dev"))
    assert(spark.catalog.tableExists("omnitable.refs.tag_t1"))
    assert(!spark.catalog.tableExists("omnitable.refs.tag_dev"), "dev is a branch, not a tag")
    assert(!spark.catalog.tableExists("omnitable.refs.branch_nope"))
    assert(!spark.catalog.tableExists("omnitable.nope.branch_dev"))
    assert(!spark.catalog.tableExists("omnitable.refs.dev"))
  }

  test("an addressed ref the table lacks is a missing table naming the table and the ref") {
    def error(sql: String) = intercept[AnalysisException](spark.sql(sql).collect())
    val branch = error("SELECT * FROM omnitable.refs.branch_nope")
    assert(branch.getCondition == "TABLE_OR_VIEW_NOT_FOUND")
    assert(branch.getMessage.contains("Cannot find table 'refs.branch_nope' in warehouse '"))
    assert(branch.getMessage.contains("': table 'refs' has no branch 'nope' (branches: dev, main)."))
    val tag = error("SELECT * FROM omnitable.refs.tag_dev")
    assert(tag.getCondition == "TABLE_OR_VIEW_NOT_FOUND")
    assert(tag.getMessage.contains("table 'refs' has no tag 'dev' (tags: t1)"))
    assert(error("SELECT * FROM omnitable.nope.branch_dev").getMessage.contains("Cannot find table 'nope'"))
    assert(error("SELECT * FROM omnitable.refs.dev").getCondition == "TABLE_OR_VIEW_NOT_FOUND")
    assert(error("SELECT * FROM omnitable.refs.tag_t1 VERSION AS OF 1").getMessage.contains("select a snapshot"))
    assert(error("SELECT * FROM omnitable.refs.tag_t1 TIMESTAMP AS OF '2999-01-01'").getMessage.contains(
      "select a snapshot"))
    assert(error("SELECT * FROM omnitable.refs.branch_dev VERSION AS OF 't1'").getMessage.contains(
      "select a snapshot"))
  }

  test("TIMESTAMP AS OF picks the newest version committed by then") {
    assertSameRows(
      spark.sql("SELECT * FROM omnitable.refs TIMESTAMP AS OF '2999-01-01 00:00:00'"),
      expected("refs_head"))
    val e =
      intercept[AnalysisException](spark.sql("SELECT * FROM omnitable.refs TIMESTAMP AS OF '2000-01-01'").collect())
    assert(e.getMessage.contains("has no version committed at or before"))
  }

  test("metadata columns are selectable by name and stay out of SELECT *") {
    assert(!spark.table("omnitable.refs").columns.exists(_.startsWith("_ai_fragment")))
    val rows = spark.sql("SELECT _ai_fragment_, _ai_row_offset_, x FROM omnitable.refs VERSION AS OF 't1'").collect()
    assert(rows.map(_.getLong(1)).sorted.toSeq == (0L until 100L))
    assert(rows.forall(r => r.getLong(2) == r.getLong(1)), "one fragment: row offset = x")
    assert(rows.map(_.getString(0)).distinct.length == 1)
  }

  test("unknown tables and refs fail with clear errors; the catalog is read-only") {
    def msg(sql: String) = intercept[AnalysisException](spark.sql(sql).collect()).getMessage
    assert(msg("SELECT * FROM omnitable.nope").contains("Cannot find table 'nope'"))
    assert(msg("SELECT * FROM omnitable.refs VERSION AS OF 'nope'").contains("Cannot find branch or tag 'nope'"))
    assert(msg("SELECT * FROM omnitable.refs VERSION AS OF 42").contains("Cannot read version 42"))
    val e = intercept[Exception](spark.sql("ALTER TABLE omnitable.refs RENAME TO omnitable.r2").collect())
    assert(e.getMessage.contains("read-only"))
    assert(!spark.catalog.tableExists("omnitable.nope"))
    assert(spark.catalog.tableExists("omnitable.refs"))
  }
}
