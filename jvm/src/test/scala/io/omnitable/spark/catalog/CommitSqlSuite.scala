package io.omnitable.spark.catalog

import org.scalatest.funsuite.AnyFunSuite

/** commit.sql, the statements both committers share, as the JVM binds them. */
class CommitSqlSuite extends AnyFunSuite {

  test("every statement the JVM committer runs is in the bundled commit.sql") {
    val used = Seq(
      "schema_version",
      "lock_table",
      "table_row",
      "next_row_id",
      "set_next_row_id",
      "visible_columns",
      "live_batch_by_name",
      "row_id_stats_since",
      "key_rows_changed_since",
      "key_rows_removed_since",
      "next_version",
      "last_commit_time",
      "insert_batch",
      "insert_fragment",
      "existing_sets",
      "insert_column_set",
      "insert_file",
      "insert_commit",
      "move_ref",
      "find_commit",
      "start_run",
      "heartbeat_run",
      "finish_run"
    )
    assert(used.filterNot(CommitSql.statements.contains) == Nil)
  }

  test("named parameters become positional, in order of appearance") {
    val parsed = CommitSql.parse(
      "-- name: a\n-- (v, t)\nUPDATE refs SET version = :v\n  WHERE table_id = :t AND x = 'a:b'\n-- name: b\nSELECT 1\n")
    assert(parsed("a") == "UPDATE refs SET version = ? WHERE table_id = ? AND x = 'a:b'")
    assert(parsed("b") == "SELECT 1")
    assert(CommitSql("insert_commit").count(_ == '?') == 9)
  }

  test("the column set id is the content hash of python/omnitable/catalog/sets.py") {
    // hashlib.sha256(b"0:;2:;3:").hexdigest()[:16]
    assert(CatalogWriter.ColumnSet(Seq(0, 2, 3)).setId == "94da5c0d29f22e0e")
  }

  test("dropping a table deletes its rows from every table of schema.sql that has them") {
    val python = Seq(
      "lineage",
      "column_sets",
      "deletion_vectors",
      "removals",
      "files",
      "fragments",
      "batches",
      "columns",
      "refs",
      "commits",
      "features",
      "runs",
      "error_tables",
      "tables"
    ) // catalog.py drop_table
    assert(CatalogWriter.tableKinds.sorted == python.sorted)
    assert(CatalogWriter.tableKinds.last == "tables")
  }
}
