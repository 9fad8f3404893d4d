package io.omnitable.spark.catalog

import scala.collection.mutable

import io.omnitable.spark.catalog.HandMadeCatalog.HandFile

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

    /** `column_sets` rows: one set per group (its columns and, in `g0`, the row id). */
    def setRows: Long = columns + 1L
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
      (0 until shape.batches).iterator.map { b =>
        val n = math.min(shape.fragmentsPerBatch, shape.fragments - b * shape.fragmentsPerBatch).toLong
        Seq(t, s"B$b", batchName(b), "main", b + 1L, null, At, n * rowsPerFragment, n, b + 1L)
      }
    )
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
          null,
          version(f))
      }
    )
    hand.insertFiles(
      for (f <- (0 until shape.fragments).iterator; g <- 0 until shape.groups)
        yield HandFile(
          Seq(
            t,
            s"${fragmentId(f)}-g$g",
            fragmentId(f),
            s"g$g",
            s"data/${fragmentId(f)}/g$g.parquet",
            rowsPerFragment,
            4096L * (g + 1),
            "main",
            version(f),
            null,
            null),
          (0 to shape.columns).filter(_ % shape.groups == g),
          Some(_ => Some(FileColumnStats(Some(0L), Some(s"${f * 10}.0"), Some(s"${f * 10 + 9}.5"))))
        )
    )
  }

  /**
   * A random small table: versions 1..`versions` on `main` and, after version 2, on branch `dev`
   * (forked at 2); batches named from a small pool (a name re-used on a branch replaces that
   * branch's batch), fragments of 0..60 rows with one file per group, later files carrying some
   * columns again (sometimes removing an older file), random statistics (some NULL: a bound, a
   * null count, a column's entry or a file's whole `stats`). Returns
   * the version -> branch map.
   */
  def random(hand: HandMadeCatalog, rng: scala.util.Random, versions: Int = 10): Map[Long, String] = {
    val t = hand.tableId
    val columns = 2 + rng.nextInt(6)
    hand.insert(
      "columns",
      (1 to columns).iterator.map { c =>
        Seq(t, c, s"c$c", s"c$c", "double", 1, c, "active", s"g${c % 3}", null, "main", 0L, null)
      })
    val branchOf = (0 to versions).map(v => v.toLong -> (if (v > 2 && rng.nextBoolean()) "dev" else "main")).toMap
    hand.insert("commits", branchOf.iterator.map { case (v, b) => Seq(t, v, null, b, "test", null, "{}", At, null) })
    hand.ref("main", "branch", branchOf.filter(_._2 == "main").keys.max, None, None)
    hand.ref("dev", "branch", branchOf.filter(_._2 == "dev").keys.maxOption.getOrElse(2L), Some("main"), Some(2L))
    val fragments = mutable.ArrayBuffer.empty[String]
    (1 to versions).foreach { v =>
      val branch = branchOf(v.toLong)
      if (rng.nextInt(3) > 0) addBatch(hand, rng, v.toLong, branch, columns, fragments)
      if (fragments.nonEmpty && rng.nextBoolean()) {
        addFile(
          hand,
          rng,
          v.toLong,
          branch,
          fragments(rng.nextInt(fragments.size)),
          (1 to columns).filter(_ => rng.nextBoolean()))
      }
    }
    branchOf
  }

  /**
   * Deletion vectors on some fragments of a [[random]] table (any branch): a vector from the
   * fragment's version on, sometimes replaced one version later by another, so a snapshot sees at
   * most one per fragment; `deleted_count` is 1..row_count (all rows: the fragment drops out of
   * planning). The vectors' text is not a bitmap: planning never decodes it.
   */
  def randomDeletes(hand: HandMadeCatalog, rng: scala.util.Random): Unit = {
    val rows = mutable.ArrayBuffer.empty[Seq[Any]]
    hand.foreach("SELECT fragment_id, batch_id, row_count, branch, added_version FROM fragments WHERE row_count > 0") {
      rs =>
        val (fragment, batch, count, branch, added) =
          (rs.getString(1), rs.getString(2), rs.getLong(3), rs.getString(4), rs.getLong(5))
        if (rng.nextBoolean()) {
          def vector(id: String, from: Long, until: Option[Long]): Seq[Any] =
            Seq(hand.tableId, id, fragment, batch, 1L + rng.nextInt(count.toInt), s"v-$id", branch, from, until.orNull)
          if (rng.nextInt(3) == 0) {
            rows += vector(s"$fragment-a", added, Some(added + 1))
            rows += vector(s"$fragment-b", added + 1, None)
          } else rows += vector(s"$fragment-a", added, None)
        }
    }
    hand.insert("deletion_vectors", rows.iterator)
  }

  private def addBatch(
      hand: HandMadeCatalog,
      rng: scala.util.Random,
      v: Long,
      branch: String,
      columns: Int,
      fragments: mutable.ArrayBuffer[String]): Unit = {
    val name = s"p${rng.nextInt(4)}"
    val old = s"SELECT batch_id FROM batches WHERE name = '$name' AND branch = '$branch' AND removed_version IS NULL"
    Seq(
      "files" -> s"fragment_id IN (SELECT fragment_id FROM fragments WHERE batch_id IN ($old))",
      "fragments" ->
        s"batch_id IN ($old)",
      "batches" -> s"batch_id IN ($old)"
    ).foreach { case (table, where) =>
      hand.exec(s"UPDATE $table SET removed_version = $v WHERE removed_version IS NULL AND $where")
    }
    val batchId = s"B$v"
    val counts = (0 until 1 + rng.nextInt(3)).map { seq =>
      val id = s"F$v-$seq"
      val rows = if (rng.nextInt(5) == 0) 0L else 1L + rng.nextInt(60)
      hand.insert(
        "fragments",
        Iterator(Seq(hand.tableId, id, batchId, seq.toLong, rows, s"data/$id", branch, v, null, v)))
      fragments += id
      (0 until 3).foreach(g => addFile(hand, rng, v, branch, id, (0 to columns).filter(_ % 3 == g), s"g$g", rows))
      rows
    }
    hand.insert(
      "batches",
      Iterator(Seq(hand.tableId, batchId, name, branch, v, null, At, counts.sum, counts.size.toLong, v)))
  }

  private def addFile(
      hand: HandMadeCatalog,
      rng: scala.util.Random,
      v: Long,
      branch: String,
      fragment: String,
      columns: Seq[Int],
      group: String = "feat",
      rows: Long = -1): Unit = {
    val t = hand.tableId
    val fileId = s"$fragment-$group-v$v"
    if (group == "feat" && rng.nextBoolean()) {
      hand.exec(s"UPDATE files SET removed_version = $v WHERE fragment_id = '$fragment' AND branch = '$branch' " +
        s"AND removed_version IS NULL AND group_name = 'feat'")
    }
    val rowCount = if (rows >= 0) rows else 0L
    val row = Seq(
      t,
      fileId,
      fragment,
      group,
      s"data/$fragment/$group-v$v.parquet",
      rowCount,
      100L + rng.nextInt(1000),
      branch,
      v,
      null,
      null)
    val stats = columns.map { c =>
      val lo = rng.nextInt(100)
      val bounds = if (rng.nextInt(4) == 0) (None, None) else (Some(s"$lo.0"), Some(s"${lo + rng.nextInt(50)}.5"))
      val nullCount = if (rng.nextInt(4) == 0) None else Some(rng.nextInt(5).toLong)
      c -> Option.when(rng.nextInt(8) > 0)(FileColumnStats(nullCount, bounds._1, bounds._2))
    }.toMap
    hand.insertFiles(Iterator(HandFile(row, columns, Option.when(rng.nextInt(8) > 0)(stats))))
  }
}
