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
}
