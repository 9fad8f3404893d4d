package io.omnitable.spark.catalog

import scala.collection.mutable

import io.omnitable.spark.conf.OmniTableConf

/**
 * A commit in a snapshot's history (`commits`); times as stored (ISO-8601 UTC text). `expired`:
 * an expire commit gave this version up ([[ExpiryRecord]]): still listed, no longer readable.
 */
final case class CommitRow(
    version: Long,
    parentVersion: Option[Long],
    branch: String,
    op: String,
    runId: Option[String],
    summary: String,
    committedAt: String,
    expired: Boolean = false)

/** A visible batch with its live rows (stored rows less its visible deletion vectors' deletes). */
final case class BatchRow(batchId: String, name: String, rows: Long, fragments: Long, createdAt: String)

/** A row of `runs` (the status as stored: `running` may be an abandoned run). */
final case class RunRow(
    runId: String,
    kind: String,
    status: String,
    plan: Option[String],
    metrics: Option[String],
    message: Option[String],
    startedAt: String,
    finishedAt: Option[String],
    host: Option[String],
    pid: Option[Long],
    heartbeatAt: Option[String])

/** A row of `features` (`definition` still JSON text). */
final case class FeatureRow(
    name: String,
    version: String,
    kind: String,
    definition: String,
    fingerprint: String,
    registeredAt: String,
    registeredVersion: Long,
    branch: String)

/**
 * A visible fragment of a visible batch, with the batch's name and its visible deletion vector's
 * count (0: none).
 */
final case class FragmentRow(
    fragmentId: String,
    batchId: String,
    batchName: String,
    seq: Long,
    rowCount: Long,
    deletedRows: Long,
    path: String,
    addedVersion: Long,
    position: Long)

/** A visible file (of a visible fragment) with its batch's name and its column set. */
final case class FileRow(
    fileId: String,
    fragmentId: String,
    batchName: String,
    groupName: String,
    path: String,
    rowCount: Long,
    sizeBytes: Long,
    addedVersion: Long,
    runId: Option[String],
    setId: String)

/** A `lineage` row of a visible file, with the file's fragment, path and version. */
final case class LineageRow(
    fileId: String,
    columnId: Int,
    feature: String,
    featureVersion: String,
    inputs: String,
    runId: String,
    engine: String,
    errorCount: Long,
    fragmentId: String,
    path: String,
    addedVersion: Long)

/** A column of `column_sets`: its id, position in the set and producing feature version. */
final case class SetColumn(columnId: Int, position: Int, featureVersion: Option[String])

/** A visible row of `columns`, whatever its state (retired columns included). */
final case class ColumnNameRow(columnId: Int, name: String, state: String, feature: Option[String])

/**
 * The catalog queries behind the metadata tables (`omnitable.web.history`, ...; docs/spark.md,
 * "Metadata tables"), each the SQL of the Python API's fact (the python/omnitable/catalog modules) on
 * the segments of a resolved snapshot. Made by [[CatalogReader.withMetadata]] on one read
 * connection. Fragments and files are paged (keyset pages of [[PageSize]] rows) and handed to
 * a callback, so a large table is never held here.
 */
final class MetadataQueries private[catalog] (conn: Jdbc.Conn) {
  import MetadataQueries._

  /** Commits in the ancestry of `snap` (its segments), newest first, marked expired as `Table.history()` does. */
  def history(snap: TableSnapshot): Seq[CommitRow] = {
    val (within, params) = withinSegments("version", snap.snapshot.segments)
    val expiry = ExpiryRecord.read(conn, snap.table.tableId)
    Jdbc.query(
      conn,
      "SELECT version, parent_version, branch, op, run_id, summary, committed_at FROM commits " +
        s"WHERE table_id = ? AND $within ORDER BY version DESC",
      (snap.table.tableId +: params): _*
    ) { rs =>
      CommitRow(
        rs.getLong(1),
        Jdbc.optLong(rs, 2),
        rs.getString(3),
        rs.getString(4),
        Option(rs.getString(5)),
        rs.getString(6),
        rs.getString(7))
    }.map(c => if (expiry.exists(_.expired(c.branch, c.version))) c.copy(expired = true) else c)
  }

  /** The visible batches, oldest first, with live row counts (`Table.batches()`). */
  def batches(snap: TableSnapshot): Seq[BatchRow] = {
    val segments = snap.snapshot.segments
    val (visible, params) = Jdbc.visible("b", "batches", segments)
    val rows = Jdbc.query(
      conn,
      "SELECT b.batch_id, b.name, b.row_count, b.fragment_count, b.created_at FROM batches b " +
        s"WHERE b.table_id = ? AND $visible ORDER BY b.position, b.name",
      (snap.table.tableId +: params): _*
    ) { rs =>
      BatchRow(rs.getString(1), rs.getString(2), rs.getLong(3), rs.getLong(4), rs.getString(5))
    }
    val (dvVisible, dvParams) = Jdbc.visible("d", "deletion_vectors", segments)
    val deleted = Jdbc.query(
      conn,
      "SELECT d.batch_id, SUM(d.deleted_count) FROM deletion_vectors d " +
        s"WHERE d.table_id = ? AND $dvVisible GROUP BY d.batch_id",
      (snap.table.tableId +: dvParams): _*
    )(rs => rs.getString(1) -> rs.getLong(2)).toMap
    rows.map(b => b.copy(rows = b.rows - deleted.getOrElse(b.batchId, 0L)))
  }

  /** The table's branches then its tags, each by name (`Table.branches()`, `Table.tags()`). */
  def refs(table: TableEntry): Seq[RefRecord] =
    Jdbc.query(conn, s"SELECT ${RefRecord.Columns} FROM refs WHERE table_id = ? ORDER BY kind, name", table.tableId)(
      RefRecord.fromRow)

  /** The table's runs, newest first (`Table.runs()`). */
  def runs(table: TableEntry): Seq[RunRow] = Jdbc.query(
    conn,
    "SELECT run_id, kind, status, plan, metrics, message, started_at, finished_at, host, pid, " +
      "heartbeat_at FROM runs WHERE table_id = ? ORDER BY started_at DESC, run_id",
    table.tableId
  ) { rs =>
    RunRow(
      rs.getString(1),
      rs.getString(2),
      rs.getString(3),
      Option(rs.getString(4)),
      Option(rs.getString(5)),
      Option(rs.getString(6)),
      rs.getString(7),
      Option(rs.getString(8)),
      Option(rs.getString(9)),
      Jdbc.optLong(rs, 10),
      Option(rs.getString(11))
    )
  }

  /** Feature registrations visible in `snap`, oldest first in commit order. */
  def featureRows(snap: TableSnapshot): Seq[FeatureRow] = {
    val (within, params) = withinSegments("registered_version", snap.snapshot.segments)
    Jdbc.query(
      conn,
      "SELECT name, version, kind, definition, fingerprint, registered_at, registered_version, branch " +
        s"FROM features WHERE table_id = ? AND $within ORDER BY registered_version, name, version",
      (snap.table.tableId +: params): _*
    ) { rs =>
      FeatureRow(
        rs.getString(1),
        rs.getString(2),
        rs.getString(3),
        rs.getString(4),
        rs.getString(5),
        rs.getString(6),
        rs.getLong(7),
        rs.getString(8))
    }
  }

  /** Every visible column row (any state) of `snap`, by column id. */
  def columnNames(snap: TableSnapshot): Seq[ColumnNameRow] = {
    val (visible, params) = Jdbc.visible("c", "columns", snap.snapshot.segments)
    Jdbc.query(
      conn,
      s"SELECT c.column_id, c.name, c.state, c.feature FROM columns c WHERE c.table_id = ? AND $visible " +
        "ORDER BY c.column_id",
      (snap.table.tableId +: params): _*
    )(rs =>
      ColumnNameRow(rs.getInt(1), rs.getString(2), rs.getString(3), Option(rs.getString(4))))
  }

  /** The table's column sets: set id -> its columns in position order (a few rows per set). */
  def columnSets(table: TableEntry): Map[String, Seq[SetColumn]] = {
    val sets = mutable.HashMap.empty[String, mutable.ArrayBuffer[SetColumn]]
    Jdbc.foreach(
      conn,
      "SELECT set_id, column_id, position, feature_version FROM column_sets WHERE table_id = ?",
      table.tableId) { rs =>
      sets.getOrElseUpdate(rs.getString(1), mutable.ArrayBuffer.empty) +=
        SetColumn(rs.getInt(2), rs.getInt(3), Option(rs.getString(4)))
    }
    sets.map { case (id, cs) => id -> cs.sortBy(_.position).toSeq }.toMap
  }

  /**
   * The visible fragments of `snap` in table order (read position, batch id, seq), in keyset
   * pages, each row handed to `emit` (`Table.snapshot().fragments`).
   */
  def foreachFragment(snap: TableSnapshot, pageSize: Int = PageSize)(emit: FragmentRow => Unit): Unit = {
    val segments = snap.snapshot.segments
    val (fVisible, fParams) = Jdbc.visible("f", "fragments", segments)
    val (dVisible, dParams) = Jdbc.visible("d", "deletion_vectors", segments, versionIndexed = false)
    val (bVisible, bParams) = Jdbc.visible("b", "batches", segments, versionIndexed = false)
    var last: Option[FragmentRow] = None
    var more = true
    while (more) {
      val (after, afterParams) = last.fold(("1 = 1", Seq.empty[AnyRef])) { r =>
        (
          "(f.position > ? OR (f.position = ? AND (f.batch_id > ? OR (f.batch_id = ? AND f.seq > ?))))",
          Seq[AnyRef](Long.box(r.position), Long.box(r.position), r.batchId, r.batchId, Long.box(r.seq)))
      }
      val page = Jdbc.query(
        conn,
        "SELECT f.fragment_id, f.batch_id, b.name, f.seq, f.row_count, d.deleted_count, f.path, f.added_version, f.position " +
          "FROM fragments f JOIN batches b ON b.table_id = f.table_id AND b.batch_id = f.batch_id " +
          "LEFT JOIN deletion_vectors d ON d.table_id = f.table_id AND d.fragment_id = f.fragment_id " +
          s"AND $dVisible WHERE f.table_id = ? AND $fVisible AND $bVisible AND $after " +
          s"ORDER BY f.position, f.batch_id, f.seq LIMIT $pageSize",
        ((dParams :+ snap.table.tableId) ++ fParams ++ bParams ++ afterParams): _*
      ) { rs =>
        FragmentRow(
          rs.getString(1),
          rs.getString(2),
          rs.getString(3),
          rs.getLong(4),
          rs.getLong(5),
          Jdbc.optLong(rs, 6).getOrElse(0L),
          rs.getString(7),
          rs.getLong(8),
          rs.getLong(9)
        )
      }
      page.foreach(emit)
      last = page.lastOption
      more = page.size == pageSize
    }
  }

  /**
   * The visible files of the visible fragments of `snap`, by file id, in keyset pages, each row
   * handed to `emit` (`Table.snapshot().files_by_fragment`).
   */
  def foreachFile(snap: TableSnapshot, pageSize: Int = PageSize)(emit: FileRow => Unit): Unit = {
    val segments = snap.snapshot.segments
    val (fiVisible, fiParams) = Jdbc.visible("fi", "files", segments)
    val (fVisible, fParams) = Jdbc.visible("f", "fragments", segments, versionIndexed = false)
    val (bVisible, bParams) = Jdbc.visible("b", "batches", segments, versionIndexed = false)
    var last: Option[String] = None
    var more = true
    while (more) {
      val (after, afterParams) = last.fold(("1 = 1", Seq.empty[AnyRef]))(id => ("fi.file_id > ?", Seq(id)))
      val page = Jdbc.query(
        conn,
        "SELECT fi.file_id, fi.fragment_id, b.name, fi.group_name, fi.path, fi.row_count, fi.size_bytes, " +
          "fi.added_version, fi.run_id, fi.set_id FROM files fi " +
          "JOIN fragments f ON f.table_id = fi.table_id AND f.fragment_id = fi.fragment_id " +
          "JOIN batches b ON b.table_id = f.table_id AND b.batch_id = f.batch_id " +
          s"WHERE fi.table_id = ? AND $fiVisible AND $fVisible AND $bVisible AND $after " +
          s"ORDER BY fi.file_id LIMIT $pageSize",
        ((snap.table.tableId +: fiParams) ++ fParams ++ bParams ++ afterParams): _*
      ) { rs =>
        FileRow(
          rs.getString(1),
          rs.getString(2),
          rs.getString(3),
          rs.getString(4),
          rs.getString(5),
          rs.getLong(6),
          rs.getLong(7),
          rs.getLong(8),
          Option(rs.getString(9)),
          rs.getString(10)
        )
      }
      page.foreach(emit)
      last = page.lastOption.map(_.fileId)
      more = page.size == pageSize
    }
  }

  /** The lineage rows of the files visible in `snap` (superseded files included). */
  def lineage(snap: TableSnapshot): Seq[LineageRow] = {
    val (visible, params) = Jdbc.visible("fi", "files", snap.snapshot.segments)
    Jdbc.query(
      conn,
      "SELECT l.file_id, l.column_id, l.feature, l.feature_version, l.inputs, l.run_id, l.engine, " +
        "l.error_count, fi.fragment_id, fi.path, fi.added_version FROM lineage l JOIN files fi " +
        s"ON fi.table_id = l.table_id AND fi.file_id = l.file_id WHERE l.table_id = ? AND $visible",
      (snap.table.tableId +: params): _*
    ) { rs =>
      LineageRow(
        rs.getString(1),
        rs.getInt(2),
        rs.getString(3),
        rs.getString(4),
        rs.getString(5),
        rs.getString(6),
        rs.getString(7),
        rs.getLong(8),
        rs.getString(9),
        rs.getString(10),
        rs.getLong(11)
      )
    }
  }

  /** Where the table's record-level error table lives (`error_tables`), if it has one. */
  def errorTableLocation(table: TableEntry): Option[String] =
    Jdbc.query(conn, "SELECT location FROM error_tables WHERE table_id = ?", table.tableId)(_.getString(1)).headOption
}

object MetadataQueries {

  /**
   * Rows per page of the fragment and file listings (the metadata tables pass the session's
   * `spark.omnitable.metadata.page_size`).
   */
  val PageSize: Int = OmniTableConf.METADATA_PAGE_SIZE.default.get

  /** `(branch = ? AND col <= ?)` for each segment, OR-ed (the rows of a snapshot's history). */
  private def withinSegments(column: String, segments: Seq[Segment]): (String, Seq[AnyRef]) = (
    segments.map(_ => s"(branch = ? AND $column <= ?)").mkString("(", " OR ", ")"),
    segments.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto))))
}
