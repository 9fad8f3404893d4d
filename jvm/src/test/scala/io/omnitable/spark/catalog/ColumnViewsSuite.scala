package io.omnitable.spark.catalog

import org.scalatest.funsuite.AnyFunSuite

/** The view records python `catalog/views.py` writes, as the JVM reads them. */
class ColumnViewsSuite extends AnyFunSuite {

  private val base =
    """"columns": ["_ai_unique_id_", "a"], "column_ids": {"_ai_unique_id_": 0, "a": 1},
      |"path": "views/hot-1", "delta_version": 3, "batches": {"b1": "f1"},
      |"refreshed_version": 7, "branch": "main"""".stripMargin

  test("a refreshed record carries its data files and schema") {
    val schema = """{"type":"struct","fields":[]}"""
    val json = s"""{"hot": {$base, "files": [["_view_batch_=b1/part-0.parquet", 123]], "schema": ${quote(schema)}}}"""
    val Seq(v) = ColumnViews.parse(json)
    assert(v.name == "hot" && v.deltaVersion.contains(3L) && v.batches == Map("b1" -> "f1"))
    assert(v.files.contains(Seq("_view_batch_=b1/part-0.parquet" -> 123L)))
    assert(v.schema.contains(schema))
  }

  test("a record without files (older, or not plain Parquet) has none: the rule reads Delta") {
    for (extra <- Seq("", """, "files": null, "schema": null""")) {
      val Seq(v) = ColumnViews.parse(s"""{"hot": {$base$extra}}""")
      assert(v.files.isEmpty && v.schema.isEmpty && v.deltaVersion.contains(3L))
    }
  }

  test("an unreadable record holds no views (never a wrong file list)") {
    assert(ColumnViews.parse(s"""{"hot": {$base, "files": [["only-a-path"]]}}""").isEmpty)
    assert(ColumnViews.parse("not json").isEmpty)
  }

  private def quote(s: String): String = "\"" + s.replace("\"", "\\\"") + "\""
}
