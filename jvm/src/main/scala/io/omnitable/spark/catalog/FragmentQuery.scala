package io.omnitable.spark.catalog

import java.sql.ResultSet

import scala.collection.mutable

import io.omnitable.spark.errors.OmniTableErrors

/**
 * The SQL of [[CatalogReader.listFragments]]: five statements whose rows follow what the scan
 * reads, not the size of the table.
 *
 *  1. (with a batch or fragment option) how many fragments are visible, and how many of them
 *     are in the requested batches: summed by the database from the visible batches' rows;
 *  2. the visible fragments of the requested fragment ids, else of the requested batches, else all
 *     (within the slice, if any);
 *  3. the column sets holding the scope's columns (one row per column of each such set);
 *  4. the visible files of the fragments kept using those sets (one row per file);
 *     `files.stats` is selected for the sets holding a statistics column only and parsed once
 *     per file;
 *  5. the visible deletion vectors of the fragments kept (one row per fragment with deleted
 *     rows; the vectors stay encoded).
 *
 * Lists longer than `maxPushed` values are not sent as parameters: the rows are read without
 * that condition and filtered here, so the listing never depends on where a filter ran.
 */
private[catalog] final class FragmentQuery(conn: Jdbc.Conn, snap: TableSnapshot, scope: FragmentScope, maxPushed: Int) {

  private val tableId = snap.table.tableId
  private val segments = snap.snapshot.segments

  /**
   * Row `alias` (a fragment, or a row naming one with its batch) is in a batch named in `names`
   * (by batch id, so the by-batch indexes serve it; a name has one batch row per time it was
   * appended or replaced).
   */
  private def inBatches(alias: String, names: Seq[String]): (String, Seq[AnyRef]) = {
    val (in, params) = Jdbc.in("nb.name", names)
    (s"$alias.batch_id IN (SELECT nb.batch_id FROM batches nb WHERE nb.table_id = ? AND $in)", tableId +: params)
  }

  /** The batch / fragment option as a condition on `alias` (with `fragment_id` and `batch_id`), if pushed. */
  private def pushedOption(alias: String): Option[(String, Seq[AnyRef])] = {
    val fits = Seq(scope.batches, scope.fragments).forall(_.forall(_.size <= maxPushed))
    (scope.fragments, scope.batches) match {
      case (Some(ids), _) if fits => Some(Jdbc.in(s"$alias.fragment_id", ids))
      case (None, Some(names)) if fits => Some(inBatches(alias, names))
      case _ => None
    }
  }

  /**
   * The slice as a condition on `alias` (always pushed: a slice names at most
   * [[BatchSlice.MaxBatches]] batches); its sequence range only where `alias` has `seq`.
   */
  private def sliceOn(alias: String, hasSeq: Boolean): Option[(String, Seq[AnyRef])] = scope.slice.map { s =>
    val (in, params) = Jdbc.in(s"$alias.batch_id", s.batchIds)
    s.seqRange match {
      case Some((from, until)) if hasSeq =>
        (s"$in AND $alias.seq >= ? AND $alias.seq < ?", params ++ Seq(Long.box(from), Long.box(until)))
      case _ => (in, params)
    }
  }

  /** The pushed option and the slice as one condition on `alias`, if any. */
  private def optionOn(alias: String, hasSeq: Boolean): Option[(String, Seq[AnyRef])] =
    Seq(pushedOption(alias), sliceOn(alias, hasSeq)).flatten match {
      case Seq() => None
      case conditions => Some(where(conditions.map(Some(_)): _*))
    }

  /** The option and slice as a condition on fragment `f`, if any. */
  private val optionCondition: Option[(String, Seq[AnyRef])] = optionOn("f", hasSeq = true)

  def run(): FragmentListing = {
    val listed = fragments()
    val wantedBatches = scope.batches.map(_.toSet)
    val wantedIds = scope.fragments.map(_.toSet)
    val inBatches = listed.filter(f => wantedBatches.forall(_.contains(f.batchName)))
    val kept = inBatches.filter(f => wantedIds.forall(_.contains(f.fragmentId)))
    val missing = wantedIds.fold(Seq.empty[String])(ids => (ids -- listed.map(_.fragmentId)).toSeq.sorted)
    // a slice's listing counts its own fragments: the snapshot's total is the driver's to know
    val (total, inBatchCount) =
      if (pushedOption("f").isDefined && scope.slice.isEmpty) counts() else (listed.size, inBatches.size)
    val files =
      if (kept.isEmpty || scope.columns.exists(_.isEmpty)) Map.empty[String, Seq[FileEntry]] else filesOf(kept)
    val vectors = if (kept.isEmpty) Map.empty[String, DeletionVectorEntry] else deletionVectors(kept)
    FragmentListing(
      kept.map(f => f.copy(files = files.getOrElse(f.fragmentId, Nil), deletes = vectors.get(f.fragmentId))),
      total,
      total - inBatchCount,
      inBatchCount - kept.size,
      missing
    )
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
    val (cond, params) = where(Some(("b.table_id = ?", Seq(tableId))), Some(Jdbc.visible("b", "batches", segments)))
    Jdbc.query(
      conn,
      s"SELECT COALESCE(SUM(b.fragment_count), 0), COALESCE(SUM($inBatch), 0) FROM batches b WHERE $cond",
      (inBatchParams ++ params): _*)(rs => (rs.getLong(1).toInt, rs.getLong(2).toInt)).head
  }

  /** Statement 2: the visible fragments the options name (all when not pushed), in table order, without files. */
  private def fragments(): Seq[FragmentEntry] = {
    val (cond, params) =
      where(Some(("f.table_id = ?", Seq(tableId))), Some(Jdbc.visible("f", "fragments", segments)), optionCondition)
    Jdbc.query(
      conn,
      "SELECT f.fragment_id, f.batch_id, f.row_count, f.path, b.name FROM fragments f JOIN batches b " +
        s"ON b.table_id = f.table_id AND b.batch_id = f.batch_id WHERE $cond " +
        "ORDER BY f.position, f.batch_id, f.seq",
      params: _*
    ) { rs =>
      FragmentEntry(rs.getString(1), rs.getString(2), rs.getString(5), rs.getLong(3), rs.getString(4), Nil)
    }
  }

  /**
   * Statement 3: the column sets holding a scope column, with the positions of those columns in
   * each set (a few rows: one per column of each distinct set).
   */
  private def columnSets(): Map[String, Array[(Int, Int)]] = {
    val ofColumns =
      scope.columns.map(_.toSeq.sorted.map(Int.box)).filter(_.size <= maxPushed).map(Jdbc.in("cs.column_id", _))
    val (cond, params) = where(Some(("cs.table_id = ?", Seq(tableId))), ofColumns)
    val sets = mutable.HashMap.empty[String, mutable.ArrayBuffer[(Int, Int)]]
    Jdbc.foreach(conn, s"SELECT cs.set_id, cs.column_id, cs.position FROM column_sets cs WHERE $cond", params: _*) {
      rs =>
        val column = rs.getInt(2)
        if (scope.columns.forall(_.contains(column)))
          sets.getOrElseUpdate(rs.getString(1), mutable.ArrayBuffer.empty) += ((column, rs.getInt(3)))
    }
    sets.map { case (id, columns) => id -> columns.toArray }.toMap
  }

  /**
   * Statement 4: the visible files of `kept` whose sets are in `sets` (one row per file), by
   * fragment, each sorted by file id. `files.stats` is selected only for the sets holding a
   * statistics column. With the fragments pushed, the version and set conditions are kept out
   * of index choice (`+added_version`, `fi.set_id || ''`), so the database looks the files up by
   * fragment, not by version range or set; without, a full scan reads `files_by_set` alone.
   */
  private def filesOf(kept: Seq[FragmentEntry]): Map[String, Seq[FileEntry]] = {
    val sets = columnSets()
    if (sets.isEmpty) return Map.empty
    val keptIds = kept.map(_.fragmentId)
    val ofFragments =
      if (keptIds.size <= maxPushed) Some(Jdbc.in("fi.fragment_id", keptIds))
      else
        optionCondition.map { case (sql, params) =>
          (
            s"fi.fragment_id IN (SELECT f.fragment_id FROM fragments f WHERE f.table_id = ? AND $sql)",
            tableId +: params)
        }
    val setIds = sets.keys.toSeq.sorted
    // looked up by fragment when they are pushed: `|| ''` keeps files_by_set out of index choice
    val setColumn = if (ofFragments.isDefined) "(fi.set_id || '')" else "fi.set_id"
    val ofSets = Option.when(setIds.size <= maxPushed)(Jdbc.in(setColumn, setIds))
    val statsSets = setIds.filter(sets(_).exists { case (c, _) => scope.statsColumns.forall(_.contains(c)) })
    val (stats, statsParams) =
      if (statsSets.isEmpty) ("NULL", Nil)
      else if (statsSets.size == setIds.size || statsSets.size > maxPushed) ("fi.stats", Nil)
      else Jdbc.in("fi.set_id", statsSets) match { case (in, params) => (s"CASE WHEN $in THEN fi.stats END", params) }
    val visible = Jdbc.visible("fi", "files", segments, versionIndexed = ofFragments.isEmpty)
    val (cond, params) = where(Some(("fi.table_id = ?", Seq(tableId))), Some(visible), ofFragments, ofSets)
    val keptSet = keptIds.toSet
    // the columns of a file without statistics to read, shared by the files of its set
    val unknown = sets.map { case (id, columns) => id -> columns.map(_._1 -> FileColumnStats.Unknown).toMap }
    val files = mutable.HashMap.empty[String, mutable.ArrayBuffer[FileEntry]]
    Jdbc.foreach(
      conn,
      "SELECT fi.file_id, fi.fragment_id, fi.group_name, fi.path, fi.row_count, fi.size_bytes, fi.added_version, " +
        s"fi.set_id, $stats FROM files fi WHERE $cond",
      (statsParams ++ params): _*
    ) { rs =>
      val fragment = rs.getString(2)
      val setId = rs.getString(8)
      if (keptSet.contains(fragment) && sets.contains(setId)) {
        files.getOrElseUpdate(fragment, mutable.ArrayBuffer.empty) +=
          fileEntry(rs, fragment, sets(setId), unknown(setId))
      }
    }
    files.map { case (id, fs) => id -> fs.sortBy(_.fileId).toSeq }.toMap
  }

  /**
   * Statement 5: the visible deletion vectors of `kept`, by fragment id: named when few, else by
   * the pushed batch / fragment option, else every visible vector of the table (rows of other
   * fragments are dropped here). A fragment has at most one visible vector (schema.sql).
   */
  private def deletionVectors(kept: Seq[FragmentEntry]): Map[String, DeletionVectorEntry] = {
    val keptIds = kept.map(_.fragmentId)
    val ofFragments =
      if (keptIds.size <= maxPushed) Some(Jdbc.in("dv.fragment_id", keptIds)) else optionOn("dv", hasSeq = false)
    val visible = Jdbc.visible("dv", "deletion_vectors", segments, versionIndexed = false)
    val (cond, params) = where(Some(("dv.table_id = ?", Seq(tableId))), Some(visible), ofFragments)
    val keptSet = keptIds.toSet
    val out = mutable.HashMap.empty[String, DeletionVectorEntry]
    Jdbc.foreach(
      conn,
      s"SELECT dv.fragment_id, dv.vector_id, dv.deleted_count, dv.vector FROM deletion_vectors dv WHERE $cond",
      params: _*) { rs =>
      val fragment = rs.getString(1)
      if (keptSet.contains(fragment)) {
        val entry = DeletionVectorEntry(rs.getString(2), rs.getLong(3), rs.getString(4))
        out.put(fragment, entry).foreach { other =>
          throw OmniTableErrors.corruptCatalog(
            snap.warehouse,
            s"fragment $fragment of table '${snap.table.name}' has two visible deletion vectors " +
              s"(${Seq(other.vectorId, entry.vectorId).sorted.mkString(" and ")})"
          )
        }
      }
    }
    out.toMap
  }

  /**
   * The file of statement 4's current row (of `fragment`), carrying `columns` (id, position in
   * its set); `unknown`: those columns without statistics.
   */
  private def fileEntry(
      rs: ResultSet,
      fragment: String,
      columns: Array[(Int, Int)],
      unknown: Map[Int, FileColumnStats]): FileEntry = {
    val fileId = rs.getString(1)
    val stats = Option(rs.getString(9)).map(FileStats.parse(_, snap.warehouse, fileId)) match {
      case None => unknown
      case Some(parsed) => columns.map { case (column, position) =>
          column ->
            (if (scope.statsColumns.forall(_.contains(column))) parsed.at(position, column)
             else FileColumnStats.Unknown)
        }.toMap
    }
    FileEntry(
      fileId,
      fragment,
      rs.getString(3),
      rs.getString(4),
      rs.getLong(5),
      rs.getLong(6),
      rs.getLong(7),
      stats)
  }
}

private[catalog] object FragmentQuery {

  /** The longest value list sent as SQL parameters (SQLite and PostgreSQL both take far more). */
  val MaxPushedValues = 1000
}
