package io.omnitable.spark.catalog

import java.sql.ResultSet

import scala.collection.mutable

/**
 * The SQL of [[CatalogReader.listFragments]]: three statements whose rows follow what the scan
 * reads, not the size of the table.
 *
 *  1. (with a batch or fragment option) how many fragments are visible, and how many of them
 *     are in the requested batches: summed by the database from the visible batches' rows;
 *  2. the visible fragments of the requested fragment ids, else of the requested batches, else all;
 *  3. the visible files of the fragments kept, joined with the `column_sets` rows of their sets
 *     for the scope's columns (one row per file and column it carries); `files.stats` is
 *     selected on the rows of the statistics columns only and parsed once per file.
 *
 * Lists longer than `maxPushed` values are not sent as parameters: the rows are read without
 * that condition and filtered here, so the listing never depends on where a filter ran.
 */
private[catalog] final class FragmentQuery(conn: Jdbc.Conn, snap: TableSnapshot, scope: FragmentScope, maxPushed: Int) {

  private val tableId = snap.table.tableId
  private val segments = snap.snapshot.segments

  /**
   * Fragment `f` is in a batch named in `names` (by batch id, so the `fragments_by_batch` index
   * serves it; a name has one batch row per time it was appended or replaced).
   */
  private def inBatches(names: Seq[String]): (String, Seq[AnyRef]) = {
    val (in, params) = Jdbc.in("nb.name", names)
    (s"f.batch_id IN (SELECT nb.batch_id FROM batches nb WHERE nb.table_id = ? AND $in)", tableId +: params)
  }

  /** The batch / fragment option as a condition on fragment `f`, if pushed. */
  private val optionCondition: Option[(String, Seq[AnyRef])] = {
    val fits = Seq(scope.batches, scope.fragments).forall(_.forall(_.size <= maxPushed))
    (scope.fragments, scope.batches) match {
      case (Some(ids), _) if fits => Some(Jdbc.in("f.fragment_id", ids))
      case (None, Some(names)) if fits => Some(inBatches(names))
      case _ => None
    }
  }

  def run(): FragmentListing = {
    val listed = fragments()
    val wantedBatches = scope.batches.map(_.toSet)
    val wantedIds = scope.fragments.map(_.toSet)
    val inBatches = listed.filter(f => wantedBatches.forall(_.contains(f.batchName)))
    val kept = inBatches.filter(f => wantedIds.forall(_.contains(f.fragmentId)))
    val missing = wantedIds.fold(Seq.empty[String])(ids => (ids -- listed.map(_.fragmentId)).toSeq.sorted)
    val (total, inBatchCount) = if (optionCondition.isDefined) counts() else (listed.size, inBatches.size)
    val files =
      if (kept.isEmpty || scope.columns.exists(_.isEmpty)) Map.empty[String, Seq[FileEntry]] else filesOf(kept)
    FragmentListing(
      kept.map(f => f.copy(files = files.getOrElse(f.fragmentId, Nil))),
      total,
      total - inBatchCount,
      inBatchCount - kept.size,
      missing)
  }

  private def where(conditions: Option[(String, Seq[AnyRef])]*): (String, Seq[AnyRef]) = {
    val present = conditions.flatten
    (present.map(_._1).mkString(" AND "), present.flatMap(_._2))
  }

  /**
   * Statement 1: visible fragments, and those of the requested batches, summed from the visible
   * batches' stored `fragment_count` (a batch's fragments are added and removed with it), so
   * it reads no fragment row.
   */
  private def counts(): (Int, Int) = {
    val (inBatch, inBatchParams) = scope.batches.fold(("b.fragment_count", Seq.empty[AnyRef])) { names =>
      val (in, params) = Jdbc.in("b.name", names)
      (s"CASE WHEN $in THEN b.fragment_count ELSE 0 END", params)
    }
    val (cond, params) = where(Some(("b.table_id = ?", Seq(tableId))), Some(Jdbc.visible("b", segments)))
    Jdbc.query(
      conn,
      s"SELECT COALESCE(SUM(b.fragment_count), 0), COALESCE(SUM($inBatch), 0) FROM batches b WHERE $cond",
      (inBatchParams ++ params): _*)(rs => (rs.getLong(1).toInt, rs.getLong(2).toInt)).head
  }

  /** Statement 2: the visible fragments the options name (all when not pushed), in table order, without files. */
  private def fragments(): Seq[FragmentEntry] = {
    val (cond, params) =
      where(Some(("f.table_id = ?", Seq(tableId))), Some(Jdbc.visible("f", segments)), optionCondition)
    Jdbc.query(
      conn,
      "SELECT f.fragment_id, f.batch_id, f.row_count, f.path, b.name FROM fragments f JOIN batches b " +
        s"ON b.table_id = f.table_id AND b.batch_id = f.batch_id WHERE $cond " +
        "ORDER BY f.added_version, f.batch_id, f.seq",
      params: _*
    ) { rs =>
      FragmentEntry(rs.getString(1), rs.getString(2), rs.getString(5), rs.getLong(3), rs.getString(4), Nil)
    }
  }

  /** Statement 3: the visible files of `kept` carrying a scope column, by fragment, each sorted by file id. */
  private def filesOf(kept: Seq[FragmentEntry]): Map[String, Seq[FileEntry]] = {
    val keptIds = kept.map(_.fragmentId)
    val ofFragments =
      if (keptIds.size <= maxPushed) Some(Jdbc.in("fi.fragment_id", keptIds))
      else
        optionCondition.map { case (sql, params) =>
          (
            s"fi.fragment_id IN (SELECT f.fragment_id FROM fragments f WHERE f.table_id = ? AND $sql)",
            tableId +: params)
        }
    val columnIds = scope.columns.map(_.toSeq.sorted.map(Int.box))
    val ofColumns = columnIds.filter(_.size <= maxPushed).map(Jdbc.in("cs.column_id", _))
    val (stats, statsParams) = statsSelect
    val (cond, params) =
      where(Some(("fi.table_id = ?", Seq(tableId))), Some(Jdbc.visible("fi", segments)), ofFragments, ofColumns)
    val keptSet = keptIds.toSet
    val files = mutable.LinkedHashMap.empty[String, FileRow]
    Jdbc.foreach(
      conn,
      "SELECT fi.file_id, fi.fragment_id, fi.group_name, fi.path, fi.row_count, fi.size_bytes, fi.added_version, " +
        s"cs.column_id, cs.position, $stats FROM files fi JOIN column_sets cs " +
        s"ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id WHERE $cond",
      (statsParams ++ params): _*
    ) { rs =>
      val column = rs.getInt(8)
      if (keptSet.contains(rs.getString(2)) && scope.columns.forall(_.contains(column))) {
        val file = files.getOrElseUpdate(rs.getString(1), new FileRow(rs))
        file.columns(column) =
          if (scope.statsColumns.forall(_.contains(column))) file.stats(rs, column, rs.getInt(9))
          else FileColumnStats.Unknown
      }
    }
    files.values.map(_.entry).toSeq.groupBy(_.fragmentId).map { case (id, fs) => id -> fs.sortBy(_.fileId) }
  }

  /**
   * The `files.stats` column of statement 3: NULL on the rows of columns outside `statsColumns`,
   * so a file's statistics are sent only with the columns they are read for.
   */
  private def statsSelect: (String, Seq[AnyRef]) =
    scope.statsColumns.map(_.toSeq.sorted.map(Int.box)) match {
      case Some(ids) if ids.isEmpty => ("NULL", Nil)
      case Some(ids) if ids.size <= maxPushed =>
        val (in, params) = Jdbc.in("cs.column_id", ids)
        (s"CASE WHEN $in THEN fi.stats END", params)
      case _ => ("fi.stats", Nil)
    }

  /** A file being read from statement 3's rows (one row per carried column). */
  private final class FileRow(rs: ResultSet) {
    private val fileId = rs.getString(1)
    private val fragmentId = rs.getString(2)
    private val group = rs.getString(3)
    private val path = rs.getString(4)
    private val rowCount = rs.getLong(5)
    private val sizeBytes = rs.getLong(6)
    private val addedVersion = rs.getLong(7)
    val columns: mutable.Map[Int, FileColumnStats] = mutable.HashMap.empty

    /** `files.stats`, parsed on the file's first statistics row (None: the file kept none). */
    private var parsed: Option[Option[FileStats]] = None

    /** The statistics of `column` at `position` of the file's set, from the current row's `files.stats`. */
    def stats(rs: ResultSet, column: Int, position: Int): FileColumnStats = {
      val entries = parsed.getOrElse {
        val read = Option(rs.getString(10)).map(FileStats.parse(_, snap.warehouse, fileId))
        parsed = Some(read)
        read
      }
      entries.fold(FileColumnStats.Unknown)(_.at(position, column))
    }

    def entry: FileEntry = FileEntry(fileId, fragmentId, group, path, rowCount, sizeBytes, addedVersion, columns.toMap)
  }
}

private[catalog] object FragmentQuery {

  /** The longest value list sent as SQL parameters (SQLite and PostgreSQL both take far more). */
  val MaxPushedValues = 1000
}
