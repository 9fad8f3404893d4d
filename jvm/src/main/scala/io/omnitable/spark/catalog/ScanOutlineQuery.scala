package io.omnitable.spark.catalog

import scala.collection.mutable

import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableErrors}

/**
 * The SQL of a scan planned on the executors (docs/spark.md, "Planning on the executors"): what
 * the driver reads instead of the fragments and files ([[outline]], [[fragmentSeqs]]), and the
 * check an executor runs after listing its slice ([[checkStillReadable]]). Every statement
 * returns one row per batch, one row, or one row per fragment of the batches named.
 */
private[catalog] final class ScanOutlineQuery(conn: Jdbc.Conn, snap: TableSnapshot, display: String) {

  private val tableId = snap.table.tableId
  private val segments = snap.snapshot.segments

  /**
   * The visible batches in table order (one row each); None if they hold fewer than
   * `minFragments` fragments. Else with the files of the sets carrying a column of `columns`
   * (None: every set) counted and summed by the database, from the `files_by_set` index alone.
   */
  def outline(columns: Option[Set[Int]], minFragments: Long): Option[ScanOutline] = {
    val (visible, params) = Jdbc.visible("b", "batches", segments)
    val batches = Jdbc.query(
      conn,
      "SELECT b.batch_id, b.name, b.row_count, b.fragment_count FROM batches b " +
        s"WHERE b.table_id = ? AND $visible ORDER BY b.position, b.batch_id",
      (tableId +: params): _*
    )(rs => BatchOutline(rs.getString(1), rs.getString(2), rs.getLong(3), rs.getLong(4))).toIndexedSeq
    lazy val sets = if (batches.isEmpty || columns.exists(_.isEmpty)) Nil else setsCarrying(columns)
    if (batches.iterator.map(_.fragments).sum < minFragments) None
    else if (sets.isEmpty) Some(ScanOutline(batches, 0L, 0L))
    else Some {
      val (files, fileParams) = Jdbc.visible("fi", "files", segments)
      val (in, inParams) = Jdbc.in("fi.set_id", sets)
      Jdbc.query(
        conn,
        "SELECT COUNT(*), COALESCE(SUM(fi.size_bytes), 0) FROM files fi " +
          s"WHERE $in AND fi.table_id = ? AND $files",
        (inParams ++ (tableId +: fileParams)): _*
      )(rs => ScanOutline(batches, rs.getLong(1), rs.getLong(2))).head
    }
  }

  /** The sets carrying a column of `columns` (all of the table's with None), sorted. */
  private def setsCarrying(columns: Option[Set[Int]]): Seq[String] = {
    val pushed = columns.map(_.toSeq.sorted.map(Int.box)).filter(_.size <= FragmentQuery.MaxPushedValues)
    val (cond, params) = pushed.map(Jdbc.in("cs.column_id", _)).fold(("1 = 1", Seq.empty[AnyRef]))(identity)
    val sets = mutable.SortedSet.empty[String]
    Jdbc.foreach(
      conn,
      s"SELECT cs.set_id, cs.column_id FROM column_sets cs WHERE cs.table_id = ? AND $cond",
      (tableId +: params): _*) { rs =>
      if (columns.forall(_.contains(rs.getInt(2)))) sets += rs.getString(1)
    }
    sets.toSeq
  }

  /**
   * The `(seq, row_count)` of the visible fragments of `batchIds`, by batch, each in `seq`
   * order: where the driver cuts a batch too large for one partition.
   */
  def fragmentSeqs(batchIds: Seq[String]): Map[String, IndexedSeq[(Long, Long)]] = {
    val out = mutable.HashMap.empty[String, mutable.ArrayBuilder[(Long, Long)]]
    batchIds.distinct.grouped(FragmentQuery.MaxPushedValues).foreach { ids =>
      val (visible, params) = Jdbc.visible("f", "fragments", segments)
      val (in, inParams) = Jdbc.in("f.batch_id", ids)
      Jdbc.foreach(
        conn,
        s"SELECT f.batch_id, f.seq, f.row_count FROM fragments f WHERE f.table_id = ? AND $in AND $visible",
        (tableId +: (inParams ++ params)): _*
      ) { rs =>
        out.getOrElseUpdate(rs.getString(1), mutable.ArrayBuilder.make[(Long, Long)]) +=
          ((rs.getLong(2), rs.getLong(3)))
      }
    }
    out.map { case (id, b) => id -> b.result().sortBy(_._1).toIndexedSeq }.toMap
  }

  /**
   * Fails unless the snapshot's version still has its commit and neither it nor the end of any
   * of its segments (a fork point on a parent branch, which a deleted branch no longer pins) is
   * expired: an executor's listing of a snapshot whose rows a drop or an expire deleted since
   * the driver planned would be silently short.
   */
  def checkStillReadable(): Unit = {
    val version = snap.snapshot.version
    val owner =
      Jdbc.query(conn, "SELECT branch FROM commits WHERE table_id = ? AND version = ?", tableId, Long.box(version))(
        _.getString(1)).headOption.getOrElse(
        throw OmniTableErrors.snapshotGoneDuringScan(
          snap.table.name,
          snap.snapshot.label,
          "its commit is gone (the table was dropped?)"))
    try {
      val resolver = new SnapshotResolver(conn, snap.table, display)
      resolver.checkNotExpired(version, owner)
      snap.snapshot.segments.foreach(s => resolver.checkNotExpired(s.upto, s.branch))
    } catch {
      case e: OmniTableAnalysisException =>
        throw OmniTableErrors.snapshotGoneDuringScan(snap.table.name, snap.snapshot.label, e.getMessage)
    }
  }
}
