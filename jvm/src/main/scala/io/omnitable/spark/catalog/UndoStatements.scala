package io.omnitable.spark.catalog

import java.util.UUID

import scala.collection.mutable
import scala.util.Using

/**
 * The statements of one rollback inside its commit transaction, the JVM twin of
 * python/omnitable/catalog/rollback.py `_Rollback` (and removals.py `end_rows`): rows are ended
 * at `version` on `branch` (inherited ones through `removals`), rows that come back are copies
 * added by `version` under new ids. Nothing in storage is written or deleted.
 *
 * @param segments the branch head's segments
 */
private[catalog] final class UndoStatements(
    conn: Jdbc.Conn,
    t: String,
    branch: String,
    version: Long,
    segments: Seq[Segment]) {
  import UndoStatements._

  /** End the rows of `kind` visible at the head whose `by` holds one of `values` (removals.py `end_rows`). */
  def remove(kind: String, by: String, values: Seq[AnyRef]): Unit = if (values.nonEmpty) {
    val sql = CommitSql("end_rows").replace("{kind}", kind).replace("{by}", by)
    values.foreach(v => update(sql, Long.box(version), t, v, branch))
    if (segments.size > 1) values.grouped(Chunk).foreach { chunk =>
      val (vis, visParams) = Jdbc.visible("x", kind, segments)
      val (in, inParams) = Jdbc.in(s"x.$by", chunk)
      val rowId = RemovableId(kind)
      update(
        "INSERT INTO removals (table_id, kind, row_id, row_version, branch, version) " +
          s"SELECT x.table_id, ?, ${rowId("x")}, x.added_version, ?, ? FROM $kind x WHERE x.table_id = ? " +
          s"AND x.branch <> ? AND $vis AND $in AND NOT EXISTS (SELECT 1 FROM removals y WHERE " +
          s"y.table_id = x.table_id AND y.kind = ? AND y.row_id = ${rowId("x")} AND " +
          "y.row_version = x.added_version AND y.branch = ?)",
        (Seq[AnyRef](kind, branch, Long.box(version), t, branch) ++ visParams ++ inParams ++ Seq(kind, branch)): _*
      )
    }
  }

  def removeByFragment(fragmentIds: Seq[String]): Unit =
    Seq("files", "deletion_vectors").foreach(remove(_, "fragment_id", fragmentIds))

  /** Every row of `table` whose `idCol` is in `ids`, as column → value (in column order). */
  def rows(table: String, idCol: String, ids: Seq[String]): Seq[mutable.LinkedHashMap[String, AnyRef]] =
    ids.grouped(Chunk).flatMap { chunk =>
      val (in, params) = Jdbc.in(idCol, chunk)
      Jdbc.query(conn, s"SELECT * FROM $table WHERE table_id = ? AND $in", (t +: params): _*) { rs =>
        val md = rs.getMetaData
        val row = mutable.LinkedHashMap.empty[String, AnyRef]
        (1 to md.getColumnCount).foreach(i => row(md.getColumnLabel(i).toLowerCase) = rs.getObject(i))
        row
      }
    }.toSeq

  def insert(table: String, rows: Seq[mutable.LinkedHashMap[String, AnyRef]]): Unit = if (rows.nonEmpty) {
    val names = rows.head.keys.toSeq
    val sql = s"INSERT INTO $table (${names.mkString(", ")}) VALUES (${names.map(_ => "?").mkString(", ")})"
    Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      rows.foreach { r =>
        names.zipWithIndex.foreach {
          case (n, i) =>
            r(n) match {
              case null => st.setNull(i + 1, java.sql.Types.NULL)
              case v => st.setObject(i + 1, v)
            }
        }
        st.addBatch()
      }
      st.executeBatch()
    }
  }

  private def fresh(row: mutable.LinkedHashMap[String, AnyRef]): Unit = {
    row("branch") = branch
    row("added_version") = Long.box(version)
    row("removed_version") = null
  }

  /** Copies of rows `ids` under new ids, added by this commit; returns old → new id. */
  def copyRows(table: String, idCol: String, ids: Seq[String], remap: Map[String, Map[String, String]] = Map.empty)
      : Map[String, String] = {
    val mapping = ids.map(i => i -> newId()).toMap
    val copies = rows(table, idCol, ids).map { row =>
      fresh(row)
      row(idCol) = mapping(row(idCol).toString)
      remap.foreach { case (col, ids) => Option(row(col)).foreach(v => row(col) = ids.getOrElse(v.toString, v)) }
      row
    }
    insert(table, copies)
    mapping
  }

  /** Copies of `files` (id → the column ids each keeps) added by this commit, with their lineage. */
  def copyFiles(files: Map[String, UndoFile], copies: Map[String, Set[Int]], fragIds: Map[String, String]): Int = {
    val mapping = copies.keys.map(f => f -> newId()).toMap
    val sets = mutable.ArrayBuffer.empty[FeatureColumnSet]
    val out = rows("files", "file_id", copies.keys.toSeq.sorted).map { row =>
      val f = files(row("file_id").toString)
      val set = FeatureColumnSet(copies(f.fileId).toSeq.sorted.map(c => c -> f.columns(c).featureVersion))
      sets += set
      fresh(row)
      row("file_id") = mapping(f.fileId)
      row("set_id") = set.setId
      row("fragment_id") = fragIds.getOrElse(f.fragmentId, f.fragmentId)
      row("stats") = restrictedStats(f, set).orNull
      row
    }
    insertMissingSets(sets.toSeq)
    insert("files", out)
    val lineage = rows("lineage", "file_id", mapping.keys.toSeq.sorted).filter { row =>
      copies(row("file_id").toString).contains(row("column_id").toString.toInt)
    }
    lineage.foreach(row => row("file_id") = mapping(row("file_id").toString))
    insert("lineage", lineage)
    out.size
  }

  private[catalog] def insertMissingSets(sets: Seq[FeatureColumnSet]): Unit = {
    val wanted = sets.map(s => s.setId -> s).toMap
    val ids = wanted.keys.toSeq.sorted
    val existing = ids.grouped(Chunk).flatMap { chunk =>
      val (in, ps) = Jdbc.in("set_id", chunk)
      Jdbc.query(conn, CommitSql("existing_sets").replace("{in}", in), (t +: ps): _*)(_.getString(1))
    }.toSet
    for (sid <- ids if !existing.contains(sid); ((cid, fv), pos) <- wanted(sid).members.zipWithIndex)
      update(CommitSql("insert_column_set"), t, sid, Int.box(cid), Int.box(pos), fv.orNull)
  }

  /** Copy of the row of column `cid` added at `addedVersion`, added by this commit (rollback.py `_copy_column`). */
  def copyColumn(cid: Int, addedVersion: Long): Unit = update(
    "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, position, state, " +
      "group_name, feature, branch, added_version, removed_version) SELECT table_id, column_id, name, " +
      "physical_name, data_type, nullable, position, state, group_name, feature, ?, ?, NULL FROM columns " +
      "WHERE table_id = ? AND column_id = ? AND added_version = ?",
    branch,
    Long.box(version),
    t,
    Int.box(cid),
    Long.box(addedVersion)
  )

  /** Feature name → (registered_version, version) of its current row in `segs` (rollback.py `_current`). */
  def currentFeatures(segs: Seq[Segment]): Map[String, (Long, String)] = {
    val within = segs.map(_ => "(branch = ? AND registered_version <= ?)").mkString("(", " OR ", ")")
    val params = segs.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto)))
    val out = mutable.LinkedHashMap.empty[String, (Long, String)]
    Jdbc.foreach(
      conn,
      s"SELECT name, registered_version, version FROM features WHERE table_id = ? AND $within " +
        "ORDER BY registered_version, name, version",
      (t +: params): _*
    )(rs => out(rs.getString(1)) = (rs.getLong(2), rs.getString(3)))
    out.toMap
  }

  /** A new row for `featureVersion` of feature `name`, registered by this commit (rollback.py `_make_current`). */
  def makeCurrent(name: String, featureVersion: String): Unit = update(
    "INSERT INTO features (table_id, name, version, kind, definition, fingerprint, registered_at, " +
      "registered_version, branch) SELECT table_id, name, version, kind, definition, fingerprint, " +
      "registered_at, ?, ? FROM features WHERE table_id = ? AND name = ? AND version = ? AND " +
      "registered_version = (SELECT MIN(registered_version) FROM features WHERE table_id = ? AND name = ? " +
      "AND version = ?)",
    Long.box(version),
    branch,
    t,
    name,
    featureVersion,
    t,
    name,
    featureVersion
  )

  private def update(sql: String, params: AnyRef*): Int =
    Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      params.zipWithIndex.foreach {
        case (null, i) => st.setNull(i + 1, java.sql.Types.NULL)
        case (p, i) => st.setObject(i + 1, p)
      }
      val n = st.executeUpdate()
      conn.counter.add(n.toLong)
      n
    }
}

private[catalog] object UndoStatements {

  /** Ids bound per statement (removals.py `_CHUNK`). */
  val Chunk = 500

  /** The id of a row of each versioned table as `removals.row_id` holds it (snapshot.py `REMOVABLE_ID`). */
  val RemovableId: Map[String, String => String] = Map(
    "batches" -> (a => s"$a.batch_id"),
    "fragments" -> (a => s"$a.fragment_id"),
    "files" -> (a => s"$a.file_id"),
    "deletion_vectors" -> (a => s"$a.vector_id"),
    "columns" -> (a => s"CAST($a.column_id AS TEXT)")
  )

  /** A fresh id as Python's `uuid.uuid4().hex`. */
  def newId(): String = UUID.randomUUID().toString.replace("-", "")

  private val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  /** `f`'s statistics for the columns of `set` only, in its position order (rollback.py `_restricted_stats`). */
  def restrictedStats(f: UndoFile, set: FeatureColumnSet): Option[String] = f.stats.map { raw =>
    val entries = Json.readTree(raw)
    val out = Json.createArrayNode()
    set.members.foreach { case (cid, _) => out.add(entries.get(f.columns(cid).position)) }
    Json.writeValueAsString(out)
  }
}

/** A column set with feature versions (python/omnitable/catalog/sets.py `ColumnSet`), members by column id. */
private[catalog] final case class FeatureColumnSet(members: Seq[(Int, Option[String])]) {

  lazy val setId: String = {
    val key = members.map { case (cid, fv) => s"$cid:${fv.getOrElse("")}" }.mkString(";")
    java.security.MessageDigest.getInstance("SHA-256")
      .digest(key.getBytes(java.nio.charset.StandardCharsets.UTF_8)).map(b => f"${b & 0xff}%02x").mkString.take(16)
  }
}
