package io.omnitable.spark.catalog

import io.omnitable.spark.catalog.HandMadeCatalog.HandFile
import io.omnitable.spark.catalog.SyntheticTables.{fragmentId, At, Shape}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * Removals of inherited rows (schema.sql, `removals`) as the JVM reader applies them, on a
 * hand-made table:
 *
 * {{{
 * main:  0 1 2 3          (batches b000000 = F0 F1 and b000001 = F2 F3; v3 deletes a row of F0)
 * audit:        4 . 6     (forks main@3; v4 re-writes F1's c1 file, replaces b000001, replaces
 *                          F0's deletion vector, renames c2 to c2r; v6 drops fragment F0)
 * deep:           5       (forks audit@4; commits nothing of its own)
 * tag t4 pins audit@4
 * }}}
 *
 * Every change on `audit` removes rows `main` owns, so it is recorded in `removals` only.
 */
class BranchRemovalsSuite extends AnyFunSuite with BeforeAndAfterAll {
  import BranchRemovalsSuite.View

  private val hand = new HandMadeCatalog
  private val t = hand.tableId
  private val (f0, f1, f2, f3) = (fragmentId(0), fragmentId(1), fragmentId(2), fragmentId(3))

  override protected def beforeAll(): Unit = {
    SyntheticTables.uniform(hand, Shape(fragments = 4, groups = 2, columns = 2, fragmentsPerBatch = 2), 10)
    Seq(3L -> "main", 4L -> "audit", 5L -> "deep", 6L -> "audit").foreach { case (v, b) => hand.commit(v, b, At) }
    hand.exec("UPDATE refs SET version = 3 WHERE name = 'main'")
    hand.ref("audit", "branch", 6, Some("main"), Some(3))
    hand.ref("deep", "branch", 5, Some("audit"), Some(4))
    hand.ref("t4", "tag", 4, Some("audit"), None)
    hand.insert("deletion_vectors", Iterator(Seq(t, "dv-main", f0, "B0", 1L, "v", "main", 3L, null)))
    auditV4()
    removal("fragments", f0, 1, "audit", 6)
  }

  override protected def afterAll(): Unit = hand.close()

  private def removal(kind: String, rowId: String, rowVersion: Long, branch: String, version: Long): Unit =
    hand.insert("removals", Iterator(Seq(t, kind, rowId, rowVersion, branch, version)))

  private def file(id: String, fragment: String, group: String, columns: Seq[Int]): HandFile =
    HandFile(Seq(t, id, fragment, group, s"data/$id.parquet", 10L, 100L, "audit", 4L, null, null), columns, None)

  /** audit's version 4: every row it changes is main's, so each change is a removal plus a new row. */
  private def auditV4(): Unit = {
    removal("files", s"$f1-g1", 1, "audit", 4) // an update re-writes F1's column c1
    removal("batches", "B1", 2, "audit", 4) // batch b000001 replaced: its batch, fragments and files
    Seq(f2, f3).foreach { f =>
      removal("fragments", f, 2, "audit", 4)
      Seq("g0", "g1").foreach(g => removal("files", s"$f-$g", 2, "audit", 4))
    }
    removal("deletion_vectors", "dv-main", 3, "audit", 4) // a delete replaces F0's vector
    removal("columns", "2", 0, "audit", 4) // c2 renamed to c2r
    hand.insert("batches", Iterator(Seq(t, "B4", "b000001", "audit", 4L, null, At, 10L, 1L, 4L)))
    hand.insert("fragments", Iterator(Seq(t, "F4", "B4", 0L, 10L, "data/F4", "audit", 4L, null, 4L)))
    hand.insertFiles(Iterator(
      file(s"$f1-g1-v4", f1, "g1", Seq(1)),
      file("F4-g0", "F4", "g0", Seq(0, 2)),
      file("F4-g1", "F4", "g1", Seq(1))))
    hand.insert("deletion_vectors", Iterator(Seq(t, "dv-audit", f0, "B0", 2L, "v", "audit", 4L, null)))
    hand.insert("columns", Iterator(Seq(t, 2, "c2r", "c2", "double", 1, 2, "active", "g0", null, "audit", 4L, null)))
  }

  private lazy val reader = new CatalogReader(hand.dir.getPath)

  private def view(spec: SnapshotSpec): View = {
    val snap = reader.loadTable("hand", spec)
    val fragments = reader.loadFragments(snap)
    View(
      snap.columns.map(_.name),
      reader.batchNames(snap),
      snap.batchCount,
      fragments.map(_.fragmentId),
      fragments.flatMap(f => f.fileFor(1).map(f.fragmentId -> _.fileId)).toMap,
      fragments.flatMap(f => f.deletes.map(d => f.fragmentId -> (d.vectorId, d.deletedCount))).toMap
    )
  }

  private val mainView = View(
    Seq("_ai_unique_id_", "c1", "c2"),
    Seq("b000000", "b000001"),
    2,
    Seq(f0, f1, f2, f3),
    Map(f0 -> s"$f0-g1", f1 -> s"$f1-g1", f2 -> s"$f2-g1", f3 -> s"$f3-g1"),
    Map(f0 -> ("dv-main", 1L))
  )

  private val auditV4View = View(
    Seq("_ai_unique_id_", "c1", "c2r"),
    Seq("b000000", "b000001"),
    2,
    Seq(f0, f1, "F4"),
    Map(f0 -> s"$f0-g1", f1 -> s"$f1-g1-v4", "F4" -> "F4-g1"),
    Map(f0 -> ("dv-audit", 2L))
  )

  test("main still sees every row its branch removed") {
    assert(view(SnapshotSpec.Head) == mainView)
    assert(view(SnapshotSpec(version = Some(3))) == mainView)
    assert(view(SnapshotSpec(branch = Some("main"))) == mainView)
  }

  test("a branch hides the file, fragments, batch, deletion vector and column it removed") {
    assert(view(SnapshotSpec(branch = Some("audit"), version = Some(4))) == auditV4View)
    assert(view(SnapshotSpec(version = Some(4))) == auditV4View)
    assert(view(SnapshotSpec(tag = Some("t4"))) == auditV4View)
    assert(view(SnapshotSpec(ref = Some("t4"))) == auditV4View)
  }

  test("a removal hides a row only from its own version on") {
    val head = view(SnapshotSpec(branch = Some("audit")))
    assert(head == auditV4View.copy(
      fragments = Seq(f1, "F4"),
      c1Files = auditV4View.c1Files - f0,
      vectors = Map.empty))
    // a version before the fork, read through the branch: main's rows as they were
    assert(view(SnapshotSpec(branch = Some("audit"), version = Some(2))) == mainView.copy(vectors = Map.empty))
  }

  test("a branch of the branch inherits its removals up to the fork, not later ones") {
    assert(view(SnapshotSpec(branch = Some("deep"))) == auditV4View)
    assert(view(SnapshotSpec(ref = Some("deep"))) == auditV4View)
  }

  test("refNames lists a table's branches or tags") {
    assert(reader.refNames("hand", "branch") == Seq("audit", "deep", "main"))
    assert(reader.refNames("hand", "tag") == Seq("t4"))
    assert(reader.refNames("nope", "branch").isEmpty)
  }
}

object BranchRemovalsSuite {

  /** What a snapshot shows: columns, batches, fragments, c1's file per fragment, deletion vectors. */
  final case class View(
      columns: Seq[String],
      batches: Seq[String],
      batchCount: Int,
      fragments: Seq[String],
      c1Files: Map[String, String],
      vectors: Map[String, (String, Long)])
}
