package io.omnitable.spark.read.plan

import scala.collection.mutable
import scala.util.Random

import io.omnitable.spark.TestWarehouses
import io.omnitable.spark.catalog._
import io.omnitable.spark.errors.OmniTableAnalysisException
import io.omnitable.spark.read.exec.{Filter, FragmentInputPartition, SliceInputPartition}
import org.scalatest.funsuite.AnyFunSuite

/**
 * A scan planned on the executors (the driver reads the batches, each task lists its slice)
 * reads the fragments, files, column sources, deletion vectors and row ranges a driver plan
 * reads, in the same order; the driver reads one catalog row per batch, whatever the number of
 * fragments; a task refuses a snapshot whose rows are gone.
 */
class ExecutorPlanningSuite extends AnyFunSuite {

  /** What each fragment is read as, consecutive row ranges of one fragment merged into one. */
  private def reads(fragments: Seq[FragmentInputPartition]): Seq[Any] = {
    val merged = mutable.ArrayBuffer.empty[(FragmentInputPartition, Long, Long)]
    fragments.foreach { p =>
      merged.lastOption match {
        case Some((q, start, end)) if q.fragmentId == p.fragmentId && end == p.rowStart =>
          merged(merged.size - 1) = (q, start, p.rowEnd)
        case _ => merged += ((p, p.rowStart, p.rowEnd))
      }
    }
    merged.map { case (p, start, end) =>
      (p.fragmentId, p.batchName, p.fragmentRows, start, end, p.files.toSeq, p.sources.toSeq, p.deletes)
    }.toSeq
  }

  /** A read of `columns` (all of the table's by default) of every batch, packed as Spark's defaults pack. */
  private def fullScan(snap: TableSnapshot, columns: Seq[ReadColumn] = Nil): ScanRequest = ScanRequest(
    if (columns.isEmpty) ReadColumn.tableColumns(snap) else columns,
    None,
    None,
    Filter.Const(true),
    Filter.Const(true),
    statsPruning = true,
    None,
    Some(1L << 20),
    Some(Packing(1L << 27, 1L << 22, 2, 1L << 20))
  )

  /** `request` planned on the executors of `reader`'s catalog: the plan and what each slice reads. */
  private def onExecutors(reader: CatalogReader, snap: TableSnapshot, request: ScanRequest)
      : (ScanPlan, Seq[(SliceInputPartition, Seq[FragmentInputPartition])]) = {
    val plan = ExecutorPlanning.plan(TableHandle(reader, snap, None, None, Map.empty), request, 0L).get
    val e = plan.executor.get
    (plan, e.slices.map(s => s -> e.resolver.resolve(s).fragments.toSeq))
  }

  test("a scan planned on the executors reads what a driver plan reads, on random tables, versions and branches") {
    var (cutBatches, rowPieces, nonEmpty) = (0, 0, 0)
    RandomRequests.snapshots(25) { (seed, rng, reader, snap) =>
      val spec = snap.snapshot.label
      (1 to 8).foreach { _ =>
        val random = RandomRequests.request(rng, snap, reader.batchNames(snap), Nil)
        val request = random.copy(
          batches = None,
          fragments = None,
          limit = None,
          packing = Some(random.packing.getOrElse(Packing(1L << 27, 1L << 22, 2, 1L << 20))))
        val driver = ScanPlanner.plan(snap, reader.listFragments(snap, ScanPlanner.scope(request)), request)
        val (plan, slices) = onExecutors(reader, snap, request)
        val context = s"seed $seed, $spec, $request, slices ${plan.executor.get.slices}"
        assert(reads(slices.flatMap(_._2)) == reads(driver.fragments), context)
        // a piece is the driver's row range of its fragment
        def key(p: FragmentInputPartition) =
          (p.fragmentId, p.rowStart, p.rowEnd, p.files.toSeq, p.sources.toSeq, p.alignTo, p.deletes)
        slices.collect { case (SliceInputPartition(_, Some(_)), read) => read }.flatten.foreach { p =>
          assert(driver.fragments.map(key).contains(key(p)), context)
          rowPieces += 1
        }
        // slices never share a fragment, except the row pieces of one
        val whole = slices.filter(_._1.rowPiece.isEmpty).flatMap(_._2.map(_.fragmentId))
        assert(whole.distinct.size == whole.size, context)
        cutBatches += plan.executor.get.slices.count(_.slice.seqRange.isDefined)
        assert(plan.counts.total == driver.counts.total, context)
        assert(plan.fileBytes >= driver.fileBytes && plan.rows >= driver.rows, context)
        if (driver.fragments.exists(_.files.nonEmpty)) nonEmpty += 1
      }
    }
    assert(nonEmpty > 200, "most random plans read files")
    assert(cutBatches > 50 && rowPieces > 20, s"batches cut ($cutBatches) and fragments read in pieces ($rowPieces)")
  }

  test("a PostgreSQL catalog: a scan planned on the executors reads what a driver plan reads") {
    val pg = Option(TestWarehouses.manifest.get("postgres"))
    if (pg.isEmpty) {
      if (sys.env.get("OMNITABLE_REQUIRE_POSTGRES").contains("1")) fail("OMNITABLE_TEST_POSTGRES_URL is not set")
      cancel("PostgreSQL tests need OMNITABLE_TEST_POSTGRES_URL (see scripts/start-postgres.sh)")
    }
    val reader = new CatalogReader(pg.get.get("warehouse").asText())
    val rng = new Random(11)
    Seq(SnapshotSpec.Head, SnapshotSpec(branch = Some("dev"))).foreach { spec =>
      val snap = reader.loadTable("refs", spec)
      (1 to 10).foreach { _ =>
        val random = RandomRequests.request(rng, snap, reader.batchNames(snap), Nil)
        val request =
          random.copy(batches = None, fragments = None, limit = None, packing = Some(Packing(1L << 10, 1L << 8, 2, 7)))
        val driver = ScanPlanner.plan(snap, reader.listFragments(snap, ScanPlanner.scope(request)), request)
        val (plan, slices) = onExecutors(reader, snap, request)
        assert(reads(slices.flatMap(_._2)) == reads(driver.fragments), s"$spec $request ${plan.executor.get.slices}")
      }
    }
  }

  test("the driver reads one row per batch and the scan's file totals, never a fragment or file row") {
    def statements(shape: SyntheticTables.Shape): (Long, Long, Int) = {
      val hand = new HandMadeCatalog
      try {
        SyntheticTables.uniform(hand, shape)
        val reader = new CatalogReader(hand.dir.getPath)
        val snap = reader.loadTable("hand", SnapshotSpec.Head)
        val columns = Seq("c1", "c2", "c3", "c4").map(n => ReadColumn.tableColumns(snap).find(_.field.name == n).get)
        val request = fullScan(snap, columns)
        reader.queries.reset()
        val plan = ExecutorPlanning.plan(TableHandle(reader, snap, None, None, Map.empty), request, 0L).get
        assert(plan.executor.get.files == shape.fragments * 3L, "c1..c4 are in the 3 groups")
        (reader.queries.statements, reader.queries.rows, plan.executor.get.slices.size)
      } finally hand.close()
    }
    val (small, large) =
      (statements(SyntheticTables.Shape(400, 3, 6)), statements(SyntheticTables.Shape(4000, 3, 6)))
    // schema version check, batches (one row each), the sets holding c1..c4 (a row per column
    // of each), the files' count and sums (one row); no fragment and no file is listed
    assert(small._1 == 4 && large._1 == 4)
    assert(small._2 == 1 + 20 + 4 + 1 && large._2 == 1 + 200 + 4 + 1)
    assert(small._3 >= 2 && large._3 > small._3)
  }

  test("scans of two snapshots with the same batches are not equal; scans of one snapshot are") {
    val hand = new HandMadeCatalog
    try {
      val shape = SyntheticTables.Shape(40, 3, 6)
      SyntheticTables.uniform(hand, shape)
      val reader = new CatalogReader(hand.dir.getPath)
      val before = reader.loadTable("hand", SnapshotSpec.Head)
      // a delete at a new version: the same batches, one row fewer
      hand.insert(
        "deletion_vectors",
        Iterator(Seq(hand.tableId, "D0", SyntheticTables.fragmentId(0), "B0", 1L, "v", "main", 3L, null)))
      hand.insert(
        "commits",
        Iterator(Seq(hand.tableId, 3L, null, "main", "delete", null, "{}", SyntheticTables.At, null)))
      hand.exec("UPDATE refs SET version = 3 WHERE name = 'main'")
      val after = reader.loadTable("hand", SnapshotSpec.Head)
      val request = fullScan(before)
      def identity(snap: TableSnapshot) = OmniTableBatch.identity(
        "hand",
        ExecutorPlanning.plan(TableHandle(reader, snap, None, None, Map.empty), request, 0L).get,
        ReadColumn.schema(request.readColumns),
        OmniTableScan.Pushdown(Nil, Nil, None, None),
        io.omnitable.spark.conf.OmniTableConf(Map.empty),
        None
      )
      val (a, b) = (identity(before), identity(after))
      assert(a == identity(before), "one snapshot planned twice: equal (Spark may reuse its exchange)")
      assert(a != b, "the slices alone are equal; the snapshots are not")
    } finally hand.close()
  }

  test("below the fragment threshold, or for a read a listing must plan, the driver plans") {
    val hand = new HandMadeCatalog
    try {
      SyntheticTables.uniform(hand, SyntheticTables.Shape(40, 3, 6))
      val reader = new CatalogReader(hand.dir.getPath)
      val snap = reader.loadTable("hand", SnapshotSpec.Head)
      val handle = TableHandle(reader, snap, None, None, Map.empty)
      val base = fullScan(snap)
      assert(ExecutorPlanning.plan(handle, base, 40L).isDefined)
      reader.queries.reset()
      assert(ExecutorPlanning.plan(handle, base, 41L).isEmpty)
      assert(reader.queries.statements == 2, "schema check and the batches: no file is counted")
      Seq(
        base.copy(batches = Some(Seq(SyntheticTables.batchName(0)))),
        base.copy(fragments = Some(Seq(SyntheticTables.fragmentId(0)))),
        base.copy(limit = Some(10)),
        base.copy(packing = None) // split_fragments=false: a partition per fragment
      ).foreach(r => assert(ExecutorPlanning.plan(handle, r, 0L).isEmpty, r))
      val literal = new CatalogReader("postgresql://u:secret@127.0.0.1:1/db")
      assert(literal.executorWarehouse.isEmpty, "a literal password never goes to executors")
    } finally hand.close()
  }

  test("a task refuses a snapshot whose commit or versions are gone, and names the catalog it cannot reach") {
    val hand = new HandMadeCatalog
    try {
      SyntheticTables.uniform(hand, SyntheticTables.Shape(40, 3, 6))
      val reader = new CatalogReader(hand.dir.getPath)
      val snap = reader.loadTable("hand", SnapshotSpec(version = Some(1L)))
      val request = fullScan(snap)
      val plan = ExecutorPlanning.plan(TableHandle(reader, snap, None, None, Map.empty), request, 0L).get
      val e = plan.executor.get
      assert(e.resolver.resolve(e.slices.head).fragments.nonEmpty)
      hand.exec(
        "INSERT INTO omnitable_meta VALUES ('expiry:t0', " +
          "'{\"horizons\": {\"main\": 2}, \"kept\": [], \"version\": 3}')")
      val expired = intercept[OmniTableAnalysisException](e.resolver.resolve(e.slices.head))
      assert(expired.omniErrorClass == "OMNITABLE_SNAPSHOT_GONE" && expired.getMessage.contains("expired"))
      hand.exec("DELETE FROM omnitable_meta WHERE key = 'expiry:t0'")
      hand.exec("DELETE FROM commits WHERE version = 1")
      val gone = intercept[OmniTableAnalysisException](e.resolver.resolve(e.slices.head))
      assert(gone.omniErrorClass == "OMNITABLE_SNAPSHOT_GONE" && gone.getMessage.contains("run the query again"))
      // a branch's fork point on its parent, expired once no live branch pins it
      hand.exec(
        "INSERT INTO commits VALUES ('t0', 3, NULL, 'dev', 'test', NULL, '{}', '2026-01-02T00:00:00.000000Z', NULL)")
      hand.ref("dev", "branch", 3L, Some("main"), Some(1L))
      val dev = reader.loadTable("hand", SnapshotSpec(branch = Some("dev")))
      val devPlan = ExecutorPlanning.plan(TableHandle(reader, dev, None, None, Map.empty), request, 0L).get.executor.get
      assert(devPlan.resolver.resolve(devPlan.slices.head).fragments.nonEmpty)
      hand.exec(
        "INSERT INTO omnitable_meta VALUES ('expiry:t0', '{\"horizons\": {\"main\": 2}, \"kept\": [], \"version\": 3}')")
      val fork = intercept[OmniTableAnalysisException](devPlan.resolver.resolve(devPlan.slices.head))
      assert(fork.omniErrorClass == "OMNITABLE_SNAPSHOT_GONE" && fork.getMessage.contains("version 1"))
      val elsewhere = new ExecutorSlicePlanner("sqlite:////nonexistent/omnitable/catalog.db", snap, request)
      val unreachable = intercept[OmniTableAnalysisException](elsewhere.resolve(e.slices.head))
      assert(unreachable.omniErrorClass == "OMNITABLE_EXECUTOR_PLANNING")
      assert(unreachable.getMessage.contains("executor_planning_min_fragments"))
    } finally hand.close()
  }
}
