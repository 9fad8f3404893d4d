package io.omnitable.spark.catalog

import scala.collection.mutable

/** A column of a file's set: its position in the set and its feature version (None: raw). */
private[catalog] final case class SetMember(position: Int, featureVersion: Option[String])

/** A visible column row, retired ones included: the (added_version, name, state) a revert compares. */
private[catalog] final case class UndoColumn(columnId: Int, addedVersion: Long, name: String, state: String) {
  def row: (Long, String, String) = (addedVersion, name, state)
}

/** A visible file as a rollback reads it (python/omnitable/catalog/records.py `FileRecord`). */
private[catalog] final case class UndoFile(
    fileId: String,
    fragmentId: String,
    addedVersion: Long,
    columns: Map[Int, SetMember],
    stats: Option[String])

/**
 * One snapshot of a table, whole, inside a commit transaction: what
 * python/omnitable/catalog/snapshot.py `load_snapshot` (full scope) and `all_columns` read for a
 * rollback, in the same order.
 *
 * @param columns every visible column row, retired ones included (position order)
 * @param batches visible (batch id, name) (oldest first)
 * @param fragments visible (fragment id, batch id) of visible batches, in table order
 * @param files visible files by fragment id
 * @param deletions fragment id → its visible deletion vector's id
 */
private[catalog] final case class UndoSnapshot(
    segments: Seq[Segment],
    columns: Seq[UndoColumn],
    batches: Seq[(String, String)],
    fragments: Seq[(String, String)],
    files: Map[String, Seq[UndoFile]],
    deletions: Map[String, String]) {

  def fragmentIds: Seq[String] = fragments.map(_._1)

  def batchIds: Seq[String] = batches.map(_._1)

  /** Column id → its row (added_version, name, state). */
  def columnRows: Map[Int, (Long, String, String)] = columns.map(c => c.columnId -> c.row).toMap

  def allFiles: Seq[UndoFile] = files.values.flatten.toSeq

  /** For each of `columnIds`, the file of `fragmentId` providing it: newest file wins, the first among equals. */
  def resolve(fragmentId: String, columnIds: Set[Int]): Map[Int, UndoFile] = {
    val out = mutable.LinkedHashMap.empty[Int, UndoFile]
    files.getOrElse(fragmentId, Nil).foreach { f =>
      f.columns.keysIterator.filter(columnIds.contains).foreach { cid =>
        if (out.get(cid).forall(best => f.addedVersion > best.addedVersion)) out(cid) = f
      }
    }
    out.toMap
  }

  /** File id → the column ids it provides (newest file wins), rollback.py `_providers`. */
  def providers: Map[String, Set[Int]] = {
    val ids = allFiles.flatMap(_.columns.keys).toSet
    val out = mutable.LinkedHashMap.empty[String, Set[Int]]
    fragments.foreach { case (fid, _) =>
      resolve(fid, ids).foreach { case (cid, f) => out(f.fileId) = out.getOrElse(f.fileId, Set.empty[Int]) + cid }
    }
    out.toMap
  }
}

private[catalog] object UndoSnapshot {

  /** The snapshot of `segments` of table `tableId`, read on `conn`. */
  def load(conn: Jdbc.Conn, tableId: String, segments: Seq[Segment]): UndoSnapshot = {
    val (cv, cp) = Jdbc.visible("c", "columns", segments)
    val columns = Jdbc.query(
      conn,
      s"SELECT c.column_id, c.added_version, c.name, c.state FROM columns c WHERE c.table_id = ? AND $cv " +
        "ORDER BY c.position",
      (tableId +: cp): _*)(rs => UndoColumn(rs.getInt(1), rs.getLong(2), rs.getString(3), rs.getString(4)))
    val (bv, bp) = Jdbc.visible("b", "batches", segments)
    val batches = Jdbc.query(
      conn,
      s"SELECT b.batch_id, b.name FROM batches b WHERE b.table_id = ? AND $bv ORDER BY b.position, b.name",
      (tableId +: bp): _*)(rs => (rs.getString(1), rs.getString(2)))
    val batchSet = batches.map(_._1).toSet
    val (fv, fp) = Jdbc.visible("f", "fragments", segments)
    val fragments = Jdbc.query(
      conn,
      s"SELECT f.fragment_id, f.batch_id FROM fragments f WHERE f.table_id = ? AND $fv " +
        "ORDER BY f.position, f.batch_id, f.seq",
      (tableId +: fp): _*
    )(rs => (rs.getString(1), rs.getString(2))).filter(f => batchSet.contains(f._2))
    val fragSet = fragments.map(_._1).toSet
    val (dv, dp) = Jdbc.visible("d", "deletion_vectors", segments)
    val deletions = Jdbc.query(
      conn,
      s"SELECT d.vector_id, d.fragment_id FROM deletion_vectors d WHERE d.table_id = ? AND $dv",
      (tableId +: dp): _*)(rs => rs.getString(2) -> rs.getString(1)).filter(d => fragSet.contains(d._1)).toMap
    UndoSnapshot(segments, columns, batches, fragments, loadFiles(conn, tableId, segments), deletions)
  }

  private def loadFiles(conn: Jdbc.Conn, tableId: String, segments: Seq[Segment]): Map[String, Seq[UndoFile]] = {
    val sets = mutable.HashMap.empty[String, Map[Int, SetMember]]
    Jdbc.foreach(
      conn,
      "SELECT set_id, column_id, position, feature_version FROM column_sets WHERE table_id = ?",
      tableId) { rs =>
      val set = rs.getString(1)
      sets(set) = sets.getOrElse(set, Map.empty) + (rs.getInt(2) -> SetMember(rs.getInt(3), Option(rs.getString(4))))
    }
    val (vis, params) = Jdbc.visible("fi", "files", segments)
    val files = Jdbc.query(
      conn,
      s"SELECT fi.file_id, fi.fragment_id, fi.added_version, fi.set_id, fi.stats FROM files fi " +
        s"WHERE fi.table_id = ? AND $vis",
      (tableId +: params): _*
    ) { rs =>
      UndoFile(
        rs.getString(1),
        rs.getString(2),
        rs.getLong(3),
        sets.getOrElse(rs.getString(4), Map.empty),
        Option(rs.getString(5)))
    }
    files.groupBy(_.fragmentId)
  }
}
