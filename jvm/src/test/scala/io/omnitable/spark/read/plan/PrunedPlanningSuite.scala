package io.omnitable.spark.read.plan

import scala.util.{Random, Try}

import io.omnitable.spark.TestWarehouses
import io.omnitable.spark.catalog._
import org.scalatest.funsuite.AnyFunSuite

/**
 * Planning with the scan's batches, fragments and columns pushed into the catalog's SQL equals
 * planning over every visible fragment, file and statistic (the catalog filtering in memory),
 * and a one-batch plan runs as many statements, reading as many rows, on a small table as on a
 * table ten times larger.
 */
class PrunedPlanningSuite extends AnyFunSuite {

  /** The same listing, read with nothing pushed into SQL: every visible fragment, file and statistic. */
  private def unpruned(reader: CatalogReader, snap: TableSnapshot, request: ScanRequest): FragmentListing =
    reader.listFragments(snap, FragmentScope(request.batches, request.fragments), maxPushedValues = 0)

  private def partitions(plan: ScanPlan): Seq[Any] = plan.partitions.map(_.fragments.toSeq.map(p =>
    (
      p.fragmentId,
      p.batchName,
      p.fragmentRows,
      p.rowStart,
      p.rowEnd,
      p.files.toSeq,
      p.sources.toSeq,
      p.alignTo,
      p.deletes)))

  /** Pushed and unpruned listings agree on fragments, counts, the providing file of each column and its statistics. */
  private def assertSameListing(pushed: FragmentListing, full: FragmentListing, scope: FragmentScope): Unit = {
    assert(
      (pushed.total, pushed.byBatchOption, pushed.byFragmentOption, pushed.missingFragments) ==
        (full.total, full.byBatchOption, full.byFragmentOption, full.missingFragments))
    assert(pushed.fragments.map(f => (f.fragmentId, f.batchName, f.rowCount, f.path, f.deletes)) ==
      full.fragments.map(f => (f.fragmentId, f.batchName, f.rowCount, f.path, f.deletes)))
    pushed.fragments.zip(full.fragments).foreach { case (p, f) =>
      scope.columns.get.foreach { c =>
        assert(p.fileFor(c).map(_.fileId) == f.fileFor(c).map(_.fileId), s"column $c of ${p.fragmentId}")
      }
      scope.statsColumns.get.foreach(c => assert(p.fileFor(c).map(_.columns(c)) == f.fileFor(c).map(_.columns(c))))
    }
  }

  test("pruned planning equals unpruned planning on random tables, versions and branches") {
    var nonEmptyPlans = 0
    RandomRequests.snapshots(25) { (seed, rng, reader, snap) =>
      val spec = snap.snapshot.label
      val (names, ids) = (reader.batchNames(snap), reader.loadFragments(snap).map(_.fragmentId))
      (1 to 8).foreach { _ =>
        val request = RandomRequests.request(rng, snap, names, ids)
        val scope = ScanPlanner.scope(request)
        val pushed = reader.listFragments(snap, scope)
        val full = unpruned(reader, snap, request)
        assertSameListing(pushed, full, scope)
        val (a, b) = (Try(ScanPlanner.plan(snap, pushed, request)), Try(ScanPlanner.plan(snap, full, request)))
        assert(a.isSuccess == b.isSuccess &&
          a.failed.map(_.getMessage).toOption == b.failed.map(_.getMessage).toOption)
        a.foreach { p =>
          val q = b.get
          assert((p.counts, p.groups, p.files, p.fileBytes, p.rows) ==
            (q.counts, q.groups, q.files, q.fileBytes, q.rows))
          assert(partitions(p) == partitions(q), s"seed $seed, $spec, $request")
          if (p.fragments.exists(_.files.nonEmpty)) nonEmptyPlans += 1
        }
      }
    }
    assert(nonEmptyPlans > 200, "most random plans read files")
  }

  test("a one-batch plan runs as many statements and reads as many rows on a table 10x larger") {
    def oneBatch(shape: SyntheticTables.Shape): (Long, Long, Long, Long, PruningCounts) = {
      val hand = new HandMadeCatalog
      try {
        SyntheticTables.uniform(hand, shape)
        // every fragment has a deletion vector: only those of the planned fragments are read
        hand.insert(
          "deletion_vectors",
          (0 until shape.fragments).iterator.map { f =>
            val b = f / shape.fragmentsPerBatch
            Seq(hand.tableId, s"D$f", SyntheticTables.fragmentId(f), s"B$b", 10L, "v", "main", b + 1L, null)
          }
        )
        val reader = new CatalogReader(hand.dir.getPath)
        val batch = Some(Seq(SyntheticTables.batchName(1)))
        val snap = reader.loadTable("hand", SnapshotSpec.Head)
        reader.queries.reset()
        val scan = PlanningBench.scan(reader, snap, batch, Seq("c1", "c2", "c3", "c4"))
        val (planStatements, planRows) = (reader.queries.statements, reader.queries.rows)
        reader.queries.reset()
        PlanningBench.plan(reader, batch, Seq("c1", "c2", "c3", "c4"))
        (reader.queries.statements, reader.queries.rows, planStatements, planRows, scan.plan.counts)
      } finally hand.close()
    }
    val (small, large) = (oneBatch(SyntheticTables.Shape(40, 3, 6)), oneBatch(SyntheticTables.Shape(400, 3, 6)))
    // loading the table counts the batches and checks the requested one: no batch name is listed
    assert((small._1, small._2) == (large._1, large._2), "statements and rows of loading the table and planning")
    assert((small._3, small._4) == (large._3, large._4), "statements and rows of planning the scan")
    // schema version check + fragment totals (from the batches' rows) + fragments + the column
    // sets holding c1..c4 (one row per requested column of each) + files (one row per file: c1..c4
    // are in 3 of the 3 groups) + the deletion vectors of the batch's fragments
    assert(small._3 == 6 && small._4 == 1 + 1 + 20 + 4 + 20 * 3 + 20)
    assert(small._5 == PruningCounts(40, 20, 0, 0, 0, 0, 0) && large._5 == PruningCounts(400, 380, 0, 0, 0, 0, 0))
  }

  test("a PostgreSQL catalog lists pruned fragments like an unpruned read") {
    val pg = Option(TestWarehouses.manifest.get("postgres"))
    if (pg.isEmpty) {
      if (sys.env.get("OMNITABLE_REQUIRE_POSTGRES").contains("1")) fail("OMNITABLE_TEST_POSTGRES_URL is not set")
      cancel("PostgreSQL tests need OMNITABLE_TEST_POSTGRES_URL (see scripts/start-postgres.sh)")
    }
    val reader = new CatalogReader(pg.get.get("warehouse").asText())
    val snap = reader.loadTable("refs", SnapshotSpec(branch = Some("dev")))
    val rng = new Random(7)
    val ids = reader.loadFragments(snap).map(_.fragmentId)
    (1 to 20).foreach { _ =>
      val request = RandomRequests.request(rng, snap, reader.batchNames(snap), ids).copy(fragments = None)
      val scope = ScanPlanner.scope(request)
      assertSameListing(reader.listFragments(snap, scope), unpruned(reader, snap, request), scope)
    }
  }
}
