package io.omnitable.spark.metadata

import scala.collection.mutable

import io.omnitable.spark.catalog.{FragmentRow, MetadataQueries, TableSnapshot}
import org.apache.spark.sql.Row

/**
 * The rows of `omnitable.web.status`: one per (batch, derived column) cell of `Table.status()`,
 * batches in table order, columns by feature name then output order. A feature is `done` in a
 * fragment when its outputs' providing files hold its current version and their inputs were not
 * recomputed since (python/omnitable/features/state.py); a batch is `done` when every live
 * fragment is, `missing` when none has the outputs, `stale` when all have them but none is
 * current, else `partial`. `errors` sums the failed records of the cell's providing files.
 */
private[metadata] final class StatusGrid(q: MetadataQueries, snap: TableSnapshot) {

  private val byName = snap.columns.map(c => c.name -> c.columnId).toMap
  private val features = CatalogFacts.currentFeatures(q.featureRows(snap), byName.keySet)
  private val (fragments, providers) = CatalogFacts.providers(
    q,
    snap,
    features.flatMap(f => f.outputs.map(_._1) ++ f.inputs).flatMap(byName.get).toSet)
  private val lineage = q.lineage(snap)
  private val readSets: Map[String, Map[String, Option[String]]] =
    lineage.groupBy(_.fileId).map { case (file, rows) => file -> CatalogFacts.readSet(rows.head.inputs) }
  private val errorCounts: Map[(String, Int), Long] =
    lineage.filter(_.errorCount > 0).map(l => (l.fileId, l.columnId) -> l.errorCount).toMap

  def rows(): Seq[Row] = {
    val batches = q.batches(snap).map(_.name)
    val live = fragments.filter(f => f.rowCount - f.deletedRows > 0 || f.rowCount == 0)
    val cells = for {
      f <- features
      states = live.groupBy(_.batchName).map { case (b, frs) => b -> frs.map(fragmentState(f, _)) }
      (out, _) <- f.outputs
    } yield (out, f.id, batches.map(b => b -> StatusGrid.batchState(states.getOrElse(b, Nil))).toMap)
    val errors = errorCells(cells.map(_._1))
    for {
      b <- batches
      (column, feature, states) <- cells
    } yield Row(b, column, feature, states(b), errors.getOrElse((b, column), 0L))
  }

  /** The state of feature `f` in fragment `frag`: done, stale or missing. */
  private def fragmentState(f: CurrentFeature, frag: FragmentRow): String = {
    val outIds = f.outputs.flatMap(o => byName.get(o._1))
    val outs = outIds.map(id => providers.get((frag.fragmentId, id)))
    if (outIds.size != f.outputs.size || outs.exists(_.isEmpty)) return "missing"
    val present = outs.flatten
    if (present.map(_.featureVersion).toSet != Set(Some(f.row.version))) return "stale"
    val computedAt = present.map(_.file.addedVersion).min
    val changed = f.inputs.filter(byName.contains).exists { name =>
      val p = providers.get((frag.fragmentId, byName(name)))
      p.exists(_.file.addedVersion > computedAt) || present.exists { out =>
        readSets.get(out.file.fileId).flatMap(_.get(name)).exists(_ != p.map(_.file.fileId))
      }
    }
    if (changed) "stale" else "done"
  }

  /** Failed records per (batch, column) of the providing files of every visible fragment. */
  private def errorCells(columns: Seq[String]): Map[(String, String), Long] = {
    val out = mutable.HashMap.empty[(String, String), Long]
    if (errorCounts.nonEmpty) for {
      frag <- fragments
      column <- columns
      p <- providers.get((frag.fragmentId, byName(column)))
      n <- errorCounts.get((p.file.fileId, byName(column)))
    } out((frag.batchName, column)) = out.getOrElse((frag.batchName, column), 0L) + n
    out.toMap
  }
}

private[metadata] object StatusGrid {

  /** A batch's state from its live fragments' states (`batch_state`). */
  def batchState(states: Seq[String]): String = {
    val done = states.count(_ == "done")
    val missing = states.count(_ == "missing")
    if (states.isEmpty || done == states.size) "done"
    else if (missing == states.size) "missing"
    else if (missing == 0 && done == 0) "stale"
    else "partial"
  }
}
