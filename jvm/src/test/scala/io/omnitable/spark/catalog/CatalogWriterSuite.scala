package io.omnitable.spark.catalog

import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.funsuite.AnyFunSuite

/** The JVM committer's own transactions on a hand-made SQLite catalog (no Spark, no data files). */
class CatalogWriterSuite extends AnyFunSuite {

  private def writerOf(c: HandMadeCatalog) = new CatalogWriter(CatalogAddress.parse(c.dir.getPath))

  test("row ids are reserved in ranges that never overlap, moving next_row_id") {
    val c = new HandMadeCatalog
    try {
      val w = writerOf(c)
      assert(w.reserveRowIds(c.tableId, "hand", 10) == 0)
      assert(w.reserveRowIds(c.tableId, "hand", 1L << 33) == 10)
      var next = -1L
      c.foreach(s"SELECT next_row_id FROM tables WHERE table_id = '${c.tableId}'")(rs => next = rs.getLong(1))
      assert(next == 10 + (1L << 33))
    } finally c.close()
  }

  test("a writer refuses a catalog schema version it does not know, and changes nothing") {
    val c = new HandMadeCatalog
    try {
      c.exec("UPDATE omnitable_meta SET value = '999' WHERE key = 'schema_version'")
      val e = intercept[OmniTableAnalysisException](writerOf(c).reserveRowIds(c.tableId, "hand", 5))
      assert(e.omniErrorClass == "OMNITABLE_CATALOG_VERSION")
      assert(e.getMessage.contains("schema version is 999"))
      var next = -1L
      c.foreach(s"SELECT next_row_id FROM tables WHERE table_id = '${c.tableId}'")(rs => next = rs.getLong(1))
      assert(next == 0)
    } finally c.close()
  }

  test("dropping a table that is gone answers false; dropping one deletes all its rows") {
    val c = new HandMadeCatalog
    try {
      val w = writerOf(c)
      assert(!w.dropTable("nope", "nope"))
      assert(w.dropTable(c.tableId, "hand"))
      var rows = -1
      c.foreach(s"SELECT (SELECT COUNT(*) FROM tables) + (SELECT COUNT(*) FROM columns)")(rs => rows = rs.getInt(1))
      assert(rows == 0)
    } finally c.close()
  }
}
