package io.omnitable.spark.write

import java.util.BitSet

import scala.util.Try

import io.omnitable.spark.catalog.{
  CatalogWriter,
  DeletionVectors,
  FragmentEntry,
  FragmentScope,
  NewDeletion,
  RowLevelCommit,
  SystemColumns
}
import io.omnitable.spark.read.exec.{Filter, FilterColumn, StatsEvaluator}
import io.omnitable.spark.read.plan.{Conversion, PredicateConverter, ReadColumn, ScanPlanner, TableHandle}
import org.apache.spark.sql.connector.expressions.filter.Predicate

/**
 * `DELETE FROM` decided from the catalog alone (DSv2 `SupportsDeleteV2`, docs/spark.md
 * "Metadata-only DELETE"): when the predicates, read exactly, and the catalog's facts — batch names,
 * fragment ids, and the min/max/NULL statistics of the predicate columns' files — prove for every
 * live fragment of the snapshot that either all or none of its rows match, the statement deletes
 * the matching fragments' rows without a Spark job. The commit is the row-level path's (and
 * Python's `Table.delete`): op `delete`, one cumulative deletion vector per touched fragment, the
 * predicate columns as the read set (a concurrent commit changing their files conflicts). Any
 * predicate it cannot convert exactly, or any fragment the statistics cannot decide, leaves the
 * statement to Spark's row-level path (`canDelete` is false).
 */
final class MetadataDelete(handle: TableHandle, catalog: () => CatalogWriter) {
  import MetadataDelete.Decision

  private val snap = handle.snapshot
  private val filterColumns = ReadColumn.filterColumns(snap)
  private val converter = new PredicateConverter(name =>
    filterColumns.get(name).orElse(filterColumns.find(_._1.equalsIgnoreCase(name)).map(_._2)))

  /** Whether the catalog alone decides `predicates` on this snapshot (a writable branch head). */
  def canDelete(predicates: Array[Predicate]): Boolean =
    Try(OmniTableWriteBuilder.checkWritable(snap, handle.options)).isSuccess && decide(predicates).isDefined

  /**
   * Delete the rows `predicates` select (one commit; none when no live row matches). Fails when
   * the catalog cannot decide them ([[canDelete]] said so before: Spark calls this only then).
   */
  def delete(predicates: Array[Predicate]): Unit = {
    OmniTableWriteBuilder.checkWritable(snap, handle.options)
    val decision = decide(predicates).getOrElse(throw new IllegalStateException(
      s"DELETE FROM ${snap.table.name}: the catalog cannot decide ${predicates.mkString(" AND ")}"))
    if (decision.fragments.isEmpty) return // nothing matched: nothing to commit
    val deletions = decision.fragments.map { frag =>
      val all = new BitSet
      all.set(0, frag.rowCount.toInt)
      NewDeletion(
        frag.fragmentId,
        frag.batchId,
        frag.rowCount,
        DeletionVectors.encode(all, frag.rowCount),
        frag.deletes.map(_.vectorId))
    }
    val rows = decision.fragments.map(_.liveRows).sum
    val commit = RowLevelCommit(
      snap.table.tableId,
      snap.table.name,
      snap.snapshot.segments.head.branch,
      snap.snapshot.version,
      "delete",
      Map("rows" -> rows, "fragments" -> deletions.size),
      deletions,
      decision.readColumns
    )
    val writer = catalog()
    writer.failpoints.hit("delete.before_commit")
    writer.commitRowLevel(commit)
  }

  private def readSet(columns: Seq[FilterColumn]): Map[String, Int] =
    columns.filter(_.name != SystemColumns.RowId).map(c => c.name -> c.columnId).toMap

  private def decide(predicates: Array[Predicate]): Option[Decision] = {
    if (handle.batches.nonEmpty || handle.fragments.nonEmpty) return None
    val filters = predicates.toSeq.map(p =>
      converter.convert(p) match {
        case Conversion.Converted(f, true) => Some(f)
        case _ => None
      })
    if (filters.exists(_.isEmpty)) return None
    val filter = Filter.and(filters.flatten)
    val data = filter.columns.filter(_.kind == FilterColumn.Data).distinct
    val ids = data.map(_.columnId).toSet
    // the read set, as Python's and the row-level path's: the predicate columns but the row id
    val listing = handle.reader.listFragments(snap, FragmentScope(columns = Some(ids), statsColumns = Some(ids)))
    if (listing.missingFragments.nonEmpty) return None
    val live = listing.fragments.filter(_.liveRows > 0)
    val verdicts = live.map { frag =>
      val stats = ScanPlanner.fragmentStats(frag) _
      if (!StatsEvaluator.mightMatch(filter, stats)) Some(false)
      else if (StatsEvaluator.mustMatch(filter, stats)) Some(true)
      else None
    }
    if (verdicts.exists(_.isEmpty)) None
    else Some(Decision(live.zip(verdicts).collect { case (f, Some(true)) => f }, readSet(data)))
  }
}

private object MetadataDelete {

  /** The fragments whose live rows all match, and the read set. */
  final case class Decision(fragments: Seq[FragmentEntry], readColumns: Map[String, Int])
}
