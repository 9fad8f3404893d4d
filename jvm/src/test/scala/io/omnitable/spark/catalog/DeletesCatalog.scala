package io.omnitable.spark.catalog

import java.io.File
import java.nio.file.Files
import java.sql.Connection
import java.util.{Base64, Properties}
import java.util.zip.Deflater

import scala.collection.mutable

/**
 * A scratch copy of the catalog of a warehouse Python wrote (its data files stay where they are:
 * the copy's root points at them), to which a test commits deletes the way the Python writer
 * records them (schema.sql, `deletion_vectors`): one commit per delete on `main`, a cumulative
 * vector per fragment replacing the fragment's previous one.
 */
final class DeletesCatalog(warehouse: String) {
  val dir: File = Files.createTempDirectory("omnitable-deletes").toFile
  Files.copy(new File(warehouse, "catalog.db").toPath, new File(dir, "catalog.db").toPath)

  private val conn: Connection =
    new org.sqlite.JDBC().connect("jdbc:sqlite:" + new File(dir, "catalog.db"), new Properties())
  exec(s"UPDATE omnitable_meta SET value = '${new File(warehouse).getAbsolutePath}' WHERE key = 'root'")

  def exec(sql: String, params: Any*): Unit = {
    val st = conn.prepareStatement(sql)
    try {
      params.zipWithIndex.foreach { case (v, i) => st.setObject(i + 1, v.asInstanceOf[AnyRef]) }
      st.executeUpdate()
    } finally st.close()
  }

  private def query[T](sql: String, params: Any*)(row: java.sql.ResultSet => T): Seq[T] = {
    val st = conn.prepareStatement(sql)
    try {
      params.zipWithIndex.foreach { case (v, i) => st.setObject(i + 1, v.asInstanceOf[AnyRef]) }
      val rs = st.executeQuery()
      val out = mutable.ArrayBuffer.empty[T]
      while (rs.next()) out += row(rs)
      out.toSeq
    } finally st.close()
  }

  def tableId(table: String): String = query("SELECT table_id FROM tables WHERE name = ?", table)(_.getString(1)).head

  /** The version of `table`'s main branch head. */
  def head(table: String): Long =
    query("SELECT version FROM refs WHERE table_id = ? AND name = 'main'", tableId(table))(_.getLong(1)).head

  /** (fragment id, batch id, row count) of the fragments visible at `table`'s head, in table order. */
  def fragments(table: String): Seq[(String, String, Long)] =
    query(
      "SELECT fragment_id, batch_id, row_count FROM fragments WHERE table_id = ? AND removed_version IS NULL " +
        "ORDER BY position, batch_id, seq",
      tableId(table)
    )(rs => (rs.getString(1), rs.getString(2), rs.getLong(3)))

  /** A new head version of `table` on main (a commit row, the ref moved). */
  def commit(table: String): Long = {
    val (id, v) = (tableId(table), head(table) + 1)
    exec(
      "INSERT INTO commits VALUES (?, ?, ?, 'main', 'delete', NULL, '{}', '2026-12-01T00:00:00.000000Z', NULL)",
      id,
      v,
      v - 1)
    exec("UPDATE refs SET version = ? WHERE table_id = ? AND name = 'main'", v, id)
    v
  }

  /** The rows the visible vector of `fragment` deletes (empty if none). */
  def deleted(table: String, fragment: String): Set[Long] = {
    val rows = fragments(table).find(_._1 == fragment).get._3
    query(
      "SELECT vector FROM deletion_vectors WHERE table_id = ? AND fragment_id = ? AND removed_version IS NULL",
      tableId(table),
      fragment)(rs => DeletesCatalog.decode(rs.getString(1), rows)).headOption.getOrElse(Set.empty)
  }

  /**
   * Commits a delete of `rows` (row offsets by fragment id) of `table`: each touched fragment's
   * visible vector is removed and the union added. Returns the new version.
   */
  def delete(table: String, rows: Map[String, Set[Long]]): Long = {
    val union = rows.map { case (f, r) => f -> (deleted(table, f) ++ r) }
    val v = commit(table)
    val frags = fragments(table).map(f => f._1 -> f).toMap
    union.foreach { case (fragment, all) =>
      exec(
        "UPDATE deletion_vectors SET removed_version = ? WHERE table_id = ? AND fragment_id = ? " +
          "AND removed_version IS NULL",
        v,
        tableId(table),
        fragment)
      val (_, batch, count) = frags(fragment)
      put(table, s"dv-$fragment-v$v", fragment, batch, all.size.toLong, DeletesCatalog.encode(all, count), v)
    }
    v
  }

  /** Inserts a `deletion_vectors` row as given (for malformed vectors). */
  def put(
      table: String,
      vectorId: String,
      fragment: String,
      batch: String,
      count: Long,
      vector: String,
      v: Long): Unit =
    exec(
      "INSERT INTO deletion_vectors VALUES (?, ?, ?, ?, ?, ?, 'main', ?, NULL)",
      tableId(table),
      vectorId,
      fragment,
      batch,
      count,
      vector,
      v)

  def close(): Unit = conn.close()
}

object DeletesCatalog {

  /** The catalog's text of a vector deleting `rows` of a fragment of `rowCount` rows. */
  def encode(rows: Set[Long], rowCount: Long): String = {
    val bitmap = new Array[Byte](((rowCount + 7) / 8).toInt)
    rows.foreach(r => bitmap((r / 8).toInt) = (bitmap((r / 8).toInt) | (1 << (r % 8).toInt)).toByte)
    Base64.getEncoder.encodeToString(deflate(bitmap))
  }

  def deflate(bytes: Array[Byte]): Array[Byte] = {
    val deflater = new Deflater(6)
    try {
      deflater.setInput(bytes)
      deflater.finish()
      val out = new java.io.ByteArrayOutputStream
      val buf = new Array[Byte](4096)
      while (!deflater.finished()) out.write(buf, 0, deflater.deflate(buf))
      out.toByteArray
    } finally deflater.end()
  }

  /** The rows `vector` deletes (the test's own reading of the encoding). */
  def decode(vector: String, rowCount: Long): Set[Long] = {
    val inflater = new java.util.zip.Inflater()
    try {
      inflater.setInput(Base64.getDecoder.decode(vector))
      val bitmap = new Array[Byte](((rowCount + 7) / 8).toInt)
      var n = 0
      while (n < bitmap.length && !inflater.finished()) n += inflater.inflate(bitmap, n, bitmap.length - n)
      (0L until rowCount).filter(r => (bitmap((r / 8).toInt) & (1 << (r % 8).toInt)) != 0).toSet
    } finally inflater.end()
  }
}
