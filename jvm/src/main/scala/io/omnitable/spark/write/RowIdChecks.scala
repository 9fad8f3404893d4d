package io.omnitable.spark.write

import io.omnitable.spark.catalog.{
  AppendCommit,
  CatalogWriter,
  IdsNotChecked,
  RowIdFile,
  TableSnapshot,
  WrittenFragment
}
import io.omnitable.spark.errors.WriteErrors
import org.apache.spark.sql.{Column, DataFrame, SparkSession}
import org.apache.spark.sql.functions.col

/**
 * The exact `_ai_unique_id_` checks of one append from Spark (python/omnitable/ingest/ids.py and
 * ingest/spark.py `_written_ids`): supplied ids are read back from the id files the tasks wrote
 * (so the checks and the commit see exactly what was written) and must be unique within the
 * append and absent from the table at the base version; at commit, the ids of concurrent commits
 * whose statistics may overlap the append's (generated ranges or supplied ids) are read and
 * compared exactly, and the commit retried ([[commit]]). Reads run as Spark jobs on the driver's
 * session, so memory stays bounded for hash-like ids.
 */
private[write] final class RowIdChecks(snap: TableSnapshot, task: WriteTask, spark: SparkSession) {

  private val table = snap.table.name
  private val physical = snap.rowIdColumn.physicalName
  private val RowId = OmniTableWriteBuilder.RowId

  /** The supplied ids as written, after checking them for duplicates. */
  def written(fragments: Seq[WrittenFragment]): Option[Supplied] = {
    val files = fragments.flatMap(_.files).filter(f => f.rowCount > 0 && f.stats.exists(_._1 == RowId))
    if (files.isEmpty) None
    else {
      val bounds = files.flatMap(_.stats.collect { case (RowId, st) => st }).flatMap(st =>
        for (lo <- st.min; hi <- st.max) yield (lo.toLong, hi.toLong))
      val ids = read(files.map(_.path))
      val dupes = ids.groupBy(RowId).count().where(col("count") > 1).limit(RowIdChecks.Sample).collect()
        .map(_.getLong(0)).toSeq.sorted
      if (dupes.nonEmpty) {
        throw WriteErrors.invalidRowIds(
          s"Cannot append: duplicate $RowId values in the DataFrame, e.g. ${RowIdChecks.show(dupes)}")
      }
      Some(Supplied(ids, (bounds.map(_._1).min, bounds.map(_._2).max)))
    }
  }

  /** Raise when supplied ids already exist at the base version (ingest/ids.py `check_existing`). */
  def checkExisting(catalog: CatalogWriter, c: AppendCommit, ids: Supplied): Unit = {
    val files = catalog.rowIdFilesAt(c.tableId, snap.snapshot.segments, if (c.replace) Some(c.name) else None)
    val (count, sample) = clashes(files, c, Some(ids))
    if (count > 0) {
      throw WriteErrors.invalidRowIds(
        s"Cannot append to table '$table': $count supplied $RowId value(s) already exist, e.g. " +
          s"${RowIdChecks.show(sample)}; supply ids that are not in the table (or none)")
    }
  }

  /**
   * Commit `c`, checking exactly the ids of the commits the catalog's statistics cannot rule out
   * (ingest/ids.py `commit_append`); a clash is a conflict naming some of the ids.
   */
  def commit(catalog: CatalogWriter, first: AppendCommit, ids: Option[Supplied]): Long =
    commitWith(catalog, first, ids)(c => catalog.commitAppend(c))

  /** As [[commit]], committing with `run` (a row-level commit joining the append). */
  def commitWith(catalog: CatalogWriter, first: AppendCommit, ids: Option[Supplied])(run: AppendCommit => Long)
      : Long = {
    var c = first
    var round = 0
    while (round < RowIdChecks.MaxRounds)
      try return run(c)
      catch {
        case e: IdsNotChecked =>
          val (count, sample) = clashes(catalog.rowIdFilesSince(c.tableId, c.branch, c.checkedVersion), c, ids)
          if (count > 0) {
            throw WriteErrors.conflict(
              s"Cannot commit append to table '$table': $count of its $RowId value(s) were added by a " +
                s"concurrent commit (after version ${c.checkedVersion}), e.g. ${RowIdChecks.show(sample)}; " +
                "nothing was committed. Supply ids that are not in the table (or let OmniTable generate " +
                "them) and retry.")
          }
          c = c.copy(idsChecked = Some(e.head))
          round += 1
      }
    throw WriteErrors.conflict(
      s"Cannot commit append to table '$table': other commits kept adding rows while its $RowId " +
        "values were checked; retry the append")
  }

  /** (how many, a few) of the append's ids in `files` (only those whose statistics may overlap are read). */
  private def clashes(files: Seq[RowIdFile], c: AppendCommit, ids: Option[Supplied]): (Long, Seq[Long]) = {
    val candidates = files.filter(_.bounds.forall { case (lo, hi) => c.mayOverlap(lo, hi) })
    if (candidates.isEmpty) return (0L, Nil)
    val existing = read(candidates.map(_.path))
    val hits = ids match {
      case Some(s) => existing.join(s.ids, RowId)
      case None =>
        existing.where(c.idRanges.map { case (a, b) => col(RowId).between(a, b) }.reduceOption[Column](_ || _)
          .getOrElse(org.apache.spark.sql.functions.lit(false)))
    }
    val sample = hits.limit(RowIdChecks.Sample).collect().map(_.getLong(0)).toSeq.sorted
    (if (sample.isEmpty) 0L else hits.count(), sample)
  }

  private def read(paths: Seq[String]): DataFrame =
    spark.read.parquet(paths.map(p => FragmentWriter.uri(task, p)): _*).select(col(physical).as(RowId))
}

/** Supplied ids as written (a DataFrame of one `_ai_unique_id_` column) and their bounds. */
private[write] final case class Supplied(ids: DataFrame, bounds: (Long, Long))

private[write] object RowIdChecks {
  val Sample = 5 // ids named in an error (ingest/ids.py SAMPLE)
  val MaxRounds = 20 // exact re-checks before giving up (ingest/ids.py _MAX_ROUNDS)

  /** A list of ids as Python prints it (`[1, 2]`). */
  def show(ids: Seq[Long]): String = ids.mkString("[", ", ", "]")
}
