package io.omnitable.spark.catalog

import java.util.BitSet

import scala.collection.mutable

/** A visible column row, retired ones included, as a merge compares and adds it (records.py `ColumnRecord`). */
private[catalog] final case class MergeColumn(
    columnId: Int,
    addedVersion: Long,
    name: String,
    state: String,
    physicalName: String,
    dataType: String,
    nullable: AnyRef,
    groupName: String,
    feature: Option[String])

/** A visible fragment of a visible batch (records.py `FragmentRecord`). */
private[catalog] final case class MergeFragment(
    fragmentId: String,
    batchId: String,
    batchName: String,
    path: String,
    rowCount: Long)

/** A visible file: the rollback's [[UndoFile]] plus what a merge copies into a new row. */
private[catalog] final case class MergeFile(
    file: UndoFile,
    path: String,
    groupName: String,
    rowCount: Long,
    size: Long) {
  def fileId: String = file.fileId
}

/** A visible deletion vector (its stored text and count). */
private[catalog] final case class MergeVector(vectorId: String, vector: String, deletedCount: Long)

/** A visible feature registration: the row a merge registers again on the target. */
private[catalog] final case class MergeFeature(
    name: String,
    version: String,
    kind: String,
    definition: String,
    fingerprint: String)

/**
 * One side of a three-way merge (python/omnitable/dataops/merge_plan.py `View`): one snapshot
 * indexed by fragment path, batch name, column id and feature name.
 */
private[catalog] final case class MergeView(
    version: Long,
    columns: Map[Int, MergeColumn],
    batches: Seq[(String, String)],
    frags: mutable.LinkedHashMap[String, MergeFragment],
    batchPaths: Map[String, Seq[String]],
    files: Map[String, Seq[MergeFile]],
    deletions: Map[String, MergeVector],
    features: Map[String, MergeFeature]) {

  /** Column id → the file providing it in the fragment at `path` (newest wins, the first among equals). */
  def cells(path: String): mutable.LinkedHashMap[Int, MergeFile] = {
    val out = mutable.LinkedHashMap.empty[Int, MergeFile]
    files.getOrElse(frags(path).fragmentId, Nil).foreach { f =>
      f.file.columns.keys.toSeq.sorted.foreach { cid =>
        if (out.get(cid).forall(best => f.file.addedVersion > best.file.addedVersion)) out(cid) = f
      }
    }
    out
  }

  def filePaths(path: String): Set[String] = files.getOrElse(frags(path).fragmentId, Nil).map(_.path).toSet

  def vector(path: String): Option[MergeVector] = deletions.get(frags(path).fragmentId)

  /** The fragment's deleted rows (none set when it has no vector). */
  def mask(path: String, table: String): BitSet = {
    val frag = frags(path)
    vector(path).map(v =>
      DeletionVectors.decode(
        DeletionVectorEntry(v.vectorId, v.deletedCount, v.vector),
        frag.rowCount,
        table,
        frag.fragmentId)).getOrElse(new BitSet())
  }

  def batchId(name: String): Option[String] = batches.collectFirst { case (id, n) if n == name => id }
}

private[catalog] object MergeView {

  /** The snapshot of `segments` (at `version`) of table `tableId`, read on `conn`. */
  def load(conn: Jdbc.Conn, tableId: String, segments: Seq[Segment], version: Long): MergeView = {
    val undo = UndoSnapshot.load(conn, tableId, segments)
    val (cv, cp) = Jdbc.visible("c", "columns", segments)
    val columns = Jdbc.query(
      conn,
      "SELECT c.column_id, c.added_version, c.name, c.state, c.physical_name, c.data_type, c.nullable, " +
        s"c.group_name, c.feature FROM columns c WHERE c.table_id = ? AND $cv ORDER BY c.position",
      (tableId +: cp): _*
    )(rs =>
      MergeColumn(
        rs.getInt(1),
        rs.getLong(2),
        rs.getString(3),
        rs.getString(4),
        rs.getString(5),
        rs.getString(6),
        rs.getObject(7),
        rs.getString(8),
        Option(rs.getString(9))))
    val batchNames = undo.batches.toMap
    val (fv, fp) = Jdbc.visible("f", "fragments", segments)
    val rows = Jdbc.query(
      conn,
      s"SELECT f.fragment_id, f.batch_id, f.path, f.row_count FROM fragments f WHERE f.table_id = ? AND $fv",
      (tableId +: fp): _*)(rs => rs.getString(1) -> (rs.getString(2), rs.getString(3), rs.getLong(4))).toMap
    val frags = mutable.LinkedHashMap.empty[String, MergeFragment]
    undo.fragments.foreach { case (fid, bid) =>
      val (_, path, n) = rows(fid)
      frags(path) = MergeFragment(fid, bid, batchNames(bid), path, n)
    }
    val paths = frags.values.toSeq.groupBy(_.batchName).map { case (b, fs) => b -> fs.map(_.path) }
    val batchPaths = undo.batches.map { case (_, name) => name -> paths.getOrElse(name, Nil) }.toMap
    MergeView(
      version,
      columns.map(c => c.columnId -> c).toMap,
      undo.batches,
      frags,
      batchPaths,
      loadFiles(conn, tableId, segments, undo),
      loadVectors(conn, tableId, segments, undo),
      loadFeatures(conn, tableId, segments)
    )
  }

  private def loadFiles(conn: Jdbc.Conn, t: String, segments: Seq[Segment], undo: UndoSnapshot)
      : Map[String, Seq[MergeFile]] = {
    val (vis, params) = Jdbc.visible("fi", "files", segments)
    val extra = Jdbc.query(
      conn,
      s"SELECT fi.file_id, fi.path, fi.group_name, fi.row_count, fi.size_bytes FROM files fi WHERE fi.table_id = ? " +
        s"AND $vis",
      (t +: params): _*)(rs => rs.getString(1) -> (rs.getString(2), rs.getString(3), rs.getLong(4), rs.getLong(5)))
      .toMap
    undo.files.map { case (fid, fs) =>
      fid -> fs.map { f =>
        val (path, group, n, size) = extra(f.fileId)
        MergeFile(f, path, group, n, size)
      }
    }
  }

  private def loadVectors(conn: Jdbc.Conn, t: String, segments: Seq[Segment], undo: UndoSnapshot)
      : Map[String, MergeVector] = {
    val (vis, params) = Jdbc.visible("d", "deletion_vectors", segments)
    val byId = Jdbc.query(
      conn,
      s"SELECT d.vector_id, d.vector, d.deleted_count FROM deletion_vectors d WHERE d.table_id = ? AND $vis",
      (t +: params): _*)(rs => rs.getString(1) -> MergeVector(rs.getString(1), rs.getString(2), rs.getLong(3))).toMap
    undo.deletions.map { case (fid, vid) => fid -> byId(vid) }
  }

  /** Feature name → its current row (features.py `feature_rows`: oldest first, the last one wins). */
  private def loadFeatures(conn: Jdbc.Conn, t: String, segs: Seq[Segment]): Map[String, MergeFeature] = {
    val within = segs.map(_ => "(branch = ? AND registered_version <= ?)").mkString("(", " OR ", ")")
    val params = segs.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto)))
    val out = mutable.LinkedHashMap.empty[String, MergeFeature]
    Jdbc.foreach(
      conn,
      s"SELECT name, version, kind, definition, fingerprint FROM features WHERE table_id = ? AND $within " +
        "ORDER BY registered_version, name, version",
      (t +: params): _*
    )(rs =>
      out(rs.getString(1)) = MergeFeature(
        rs.getString(1),
        rs.getString(2),
        rs.getString(3),
        rs.getString(4),
        rs.getString(5)))
    out.toMap
  }
}
