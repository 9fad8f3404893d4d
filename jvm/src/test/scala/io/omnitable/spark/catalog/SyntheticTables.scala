package io.omnitable.spark.catalog

/**
 * Synthetic catalog rows (no data files) under the table of a [[HandMadeCatalog]], for planning
 * measurements and tests: `fragments` fragments of `rowsPerFragment` rows in batches of
 * `fragmentsPerBatch`, one commit per batch, each fragment with one file per group `g0`..`g<groups-1>`;
 * user column `c<i>` (i = 1..columns, type double) lives in group `g<i % groups>`, the row id in `g0`.
 */
object SyntheticTables {

  val At = "2026-01-01T00:00:00.000000Z"

  final case class Shape(fragments: Int, groups: Int, columns: Int, fragmentsPerBatch: Int = 20) {
    def batches: Int = (fragments + fragmentsPerBatch - 1) / fragmentsPerBatch
    def files: Long = fragments.toLong * groups
    def fileColumns: Long = fragments.toLong * (columns + 1)
    override def toString: String = s"$fragments fragments x $groups groups x $columns columns"
  }

  def batchName(b: Int): String = f"b$b%06d"
  def fragmentId(f: Int): String = f"F$f%08d"

  /** Writes `shape` on branch main, versions 1..batches (version 0 creates the table). */
  def uniform(hand: HandMadeCatalog, shape: Shape, rowsPerFragment: Long = 1000): Unit = {
    val t = hand.tableId
    hand.insert(
      "columns",
      (1 to shape.columns).iterator.map { c =>
        Seq(t, c, s"c$c", s"c$c", "double", 1, c, "active", s"g${c % shape.groups}", null, "main", 0L, null)
      })
    hand.insert(
      "commits",
      (0 to shape.batches).iterator.map(v => Seq(t, v.toLong, null, "main", "test", null, "{}", At, null)))
    hand.ref("main", "branch", shape.batches.toLong, None, None)
    hand.insert(
      "batches",
      (0 until shape.batches).iterator.map(b => Seq(t, s"B$b", batchName(b), "main", b + 1L, null, At)))
    def version(f: Int): Long = f / shape.fragmentsPerBatch + 1L
    hand.insert(
      "fragments",
      (0 until shape.fragments).iterator.map { f =>
        val b = f / shape.fragmentsPerBatch
        Seq(
          t,
          fragmentId(f),
          s"B$b",
          (f % shape.fragmentsPerBatch).toLong,
          rowsPerFragment,
          s"data/${fragmentId(f)}",
          "main",
          version(f),
          null)
      }
    )
    def fileId(f: Int, g: Int) = s"${fragmentId(f)}-g$g"
    hand.insert(
      "files",
      for (f <- (0 until shape.fragments).iterator; g <- 0 until shape.groups)
        yield Seq(
          t,
          fileId(f, g),
          fragmentId(f),
          s"g$g",
          s"data/${fragmentId(f)}/g$g.parquet",
          rowsPerFragment,
          4096L * (g + 1),
          "main",
          version(f),
          null,
          null)
    )
    hand.insert(
      "file_columns",
      for (f <- (0 until shape.fragments).iterator; c <- 0 to shape.columns)
        yield Seq(t, fileId(f, c % shape.groups), c, 0L, s"${f * 10}.0", s"${f * 10 + 9}.5", null)
    )
  }
}
