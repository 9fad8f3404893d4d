package io.omnitable.spark.read.plan

import io.omnitable.spark.catalog._
import io.omnitable.spark.errors.OmniTableAnalysisException
import io.omnitable.spark.read.exec.{CompareOp, Filter, Value}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Statistics come from each file's own `files.stats`, at its columns' positions in the shared
 * column set: files of one set prune differently, a file without statistics is never pruned.
 */
class FileStatsPlanningSuite extends AnyFunSuite {

  /** 4 fragments of one batch, one file each, all of one set {row id, c1, c2, c3}; `stats` per fragment. */
  private def withTable(stats: Seq[Option[String]])(body: CatalogReader => Unit): Unit = {
    val hand = new HandMadeCatalog
    try {
      SyntheticTables.uniform(hand, SyntheticTables.Shape(4, 1, 3, fragmentsPerBatch = 4))
      stats.zipWithIndex.foreach { case (s, f) =>
        val value = s.fold("NULL")(json => s"'$json'")
        hand.exec(s"UPDATE files SET stats = $value WHERE file_id = '${SyntheticTables.fragmentId(f)}-g0'")
      }
      body(new CatalogReader(hand.dir.getPath))
    } finally hand.close()
  }

  private def bounds(lo: Double, hi: Double): Option[FileColumnStats] =
    Some(FileColumnStats(Some(0L), Some(lo.toString), Some(hi.toString)))

  /** Statistics of the row id and c1..c3 (positions 0..3). */
  private def json(c1: Option[FileColumnStats], c2: Option[FileColumnStats], c3: Option[FileColumnStats]) =
    Some(HandMadeCatalog.statsJson(Seq(bounds(0, 999), c1, c2, c3)))

  private val table = Seq(
    json(bounds(0, 10), bounds(0, 10), bounds(100, 110)), // F0: c3 high
    json(bounds(100, 110), bounds(0, 10), bounds(0, 10)), // F1: c1 high, same set as F0
    None, // F2: no statistics (files.stats NULL)
    json(None, bounds(100, 110), None) // F3: no entry for c1 and c3
  )

  /** The fragments a scan of `column > value` keeps, and how many statistics pruned. */
  private def kept(reader: CatalogReader, column: String, value: Double): (Seq[String], Int) = {
    val snap = reader.loadTable("hand", SnapshotSpec.Head)
    val filter = Filter.Compare(CompareOp.Gt, ReadColumn.filterColumns(snap)(column), Value.Floating(value))
    val request =
      ScanRequest(ReadColumn.tableColumns(snap), None, None, Filter.Const(true), filter, true, None, None)
    val plan = ScanPlanner.plan(snap, reader.listFragments(snap, ScanPlanner.scope(request)), request)
    (plan.fragments.map(_.fragmentId), plan.counts.byStats)
  }

  test("files sharing a column set prune by their own statistics, read at each column's position") {
    withTable(table) { reader =>
      def fragments(ids: Int*): Seq[String] = ids.map(SyntheticTables.fragmentId)
      assert(kept(reader, "c3", 50) == ((fragments(0, 2, 3), 1)))
      assert(kept(reader, "c1", 50) == ((fragments(1, 2, 3), 1)))
      assert(kept(reader, "c2", 50) == ((fragments(2, 3), 2)))
      assert(kept(reader, "c2", 5) == ((fragments(0, 1, 2, 3), 0)))
    }
  }

  test("a listing gives the statistics of the statistics columns only; NULL stats and null entries are unknown") {
    withTable(table) { reader =>
      val snap = reader.loadTable("hand", SnapshotSpec.Head)
      val listing = reader.listFragments(snap, FragmentScope(columns = Some(Set(1, 3)), statsColumns = Some(Set(3))))
      val byFragment = listing.fragments.map(f => f.fileFor(3).get.columns)
      assert(byFragment.map(_(1)).forall(_ == FileColumnStats.Unknown))
      assert(byFragment.map(_(3)) == Seq(
        bounds(100, 110).get,
        bounds(0, 10).get,
        FileColumnStats.Unknown,
        FileColumnStats.Unknown))
      assert(byFragment.forall(_.keySet == Set(1, 3)))
    }
  }

  test("statistics that do not fit the file's column set are a corrupt-catalog error") {
    Seq("[[0,\"1\",\"2\"]]", "{\"a\": 1}", "not json", "[null, [1, 2, 3], null, null]").foreach { bad =>
      withTable(Seq(Some(bad))) { reader =>
        val e = intercept[OmniTableAnalysisException](kept(reader, "c1", 50))
        assert(e.getMessage.contains("the statistics of file 'F00000000-g0' (files.stats) are unreadable"), bad)
      }
    }
  }
}
