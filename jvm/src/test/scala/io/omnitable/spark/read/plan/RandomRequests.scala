package io.omnitable.spark.read.plan

import scala.util.Random

import io.omnitable.spark.catalog._
import io.omnitable.spark.read.exec.{CompareOp, Filter, Value}

/** Random scan requests over a [[SyntheticTables.random]] table, for planning properties. */
object RandomRequests {

  /**
   * Some columns, maybe batch and fragment options (with a missing id), an exact filter on the
   * batch name, statistics filters on data columns, maybe a limit, a row cap and packing.
   */
  def request(
      rng: Random,
      snap: TableSnapshot,
      batchNames: Seq[String],
      fragmentIds: Seq[String]): ScanRequest = {
    def some[T](all: Seq[T]): Seq[T] = all.filter(_ => rng.nextBoolean())
    val columns = ReadColumn.tableColumns(snap) ++ ReadColumn.metadataColumns
    val filterColumns = ReadColumn.filterColumns(snap)
    val data = snap.userColumns.map(c => filterColumns(c.name))
    val batch = filterColumns(SystemColumns.AppendName)
    val exact =
      if (rng.nextBoolean()) Filter.Const(true) else Filter.In(batch, some(batchNames).map(Value.str), false)
    val byStats = some(data).map(c => Filter.Compare(CompareOp.Gt, c, Value.Floating(rng.nextInt(120).toDouble)))
    ScanRequest(
      some(columns),
      Option.when(rng.nextBoolean())(some(batchNames)),
      Option.when(rng.nextInt(3) == 0)(some(fragmentIds) ++ Option.when(rng.nextInt(4) == 0)("F-missing")),
      exact,
      Filter.and(exact +: byStats),
      rng.nextBoolean(),
      Option.when(rng.nextInt(4) == 0)(1 + rng.nextInt(80)),
      Option.when(rng.nextBoolean())(1L + rng.nextInt(40)),
      Option.when(rng.nextBoolean())(Packing(
        rng.nextInt(20000),
        rng.nextInt(500),
        1 + rng.nextInt(4),
        1 + rng.nextInt(200)))
    )
  }

  /**
   * For seeds 1..`seeds`: a [[SyntheticTables.random]] table with random deletes, read at its
   * head, at the head of branch `dev` and at three random versions; `body` gets the seed's
   * random source, the reader and each snapshot.
   */
  def snapshots(seeds: Int)(body: (Int, Random, CatalogReader, TableSnapshot) => Unit): Unit = (1 to seeds).foreach {
    seed =>
      val rng = new Random(seed)
      val hand = new HandMadeCatalog
      try {
        val branchOf = SyntheticTables.random(hand, rng)
        SyntheticTables.randomDeletes(hand, new Random(seed + 1000))
        val reader = new CatalogReader(hand.dir.getPath)
        val specs = Seq(SnapshotSpec.Head, SnapshotSpec(branch = Some("dev"))) ++
          (0 to 2).map(_ => SnapshotSpec(version = Some(rng.nextInt(branchOf.size).toLong)))
        specs.foreach(spec => body(seed, rng, reader, reader.loadTable("hand", spec)))
      } finally hand.close()
  }
}
