package io.omnitable.spark.catalog

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.security.MessageDigest
import java.sql.Connection
import java.util.Properties

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper

/**
 * A catalog built by hand from the bundled schema.sql, for catalog-reader unit tests only (ref
 * and version resolution without any data files). Real table data is always written by Python.
 */
final class HandMadeCatalog {
  val dir: File = Files.createTempDirectory("omnitable-handmade").toFile
  val tableId = "t0"

  private val conn: Connection =
    new org.sqlite.JDBC().connect("jdbc:sqlite:" + new File(dir, "catalog.db"), new Properties())
  SchemaFile.statements.foreach(s => exec(s))
  exec(s"INSERT INTO omnitable_meta VALUES ('schema_version', '${SchemaFile.version}'), ('root', '.')")
  exec("INSERT INTO namespaces VALUES ('default', '{}', '2026-01-01T00:00:00.000000Z')")
  exec(s"INSERT INTO tables VALUES ('$tableId', 'default', 'hand', 'hand', 0, 1, '{}', '2026-01-01T00:00:00.000000Z')")
  exec(s"INSERT INTO columns VALUES ('$tableId', 0, '_ai_unique_id_', '_ai_unique_id_', 'bigint', 0, 0, 'active', " +
    "'base', NULL, 'main', 0, NULL)")

  def exec(sql: String): Unit = {
    val st = conn.createStatement()
    try st.executeUpdate(sql)
    finally st.close()
  }

  /** Runs query `sql` and calls `row` on each row. */
  def foreach(sql: String)(row: java.sql.ResultSet => Unit): Unit = {
    val st = conn.createStatement()
    try {
      val rs = st.executeQuery(sql)
      while (rs.next()) row(rs)
    } finally st.close()
  }

  /** Inserts `rows` into `table` in one transaction (one batched prepared statement). */
  def insert(table: String, rows: Iterator[Seq[Any]]): Unit = {
    val buffered = rows.buffered
    if (buffered.hasNext) {
      val width = buffered.head.size
      val st = conn.prepareStatement(s"INSERT INTO $table VALUES (${Seq.fill(width)("?").mkString(", ")})")
      conn.setAutoCommit(false)
      try {
        buffered.grouped(10000).foreach { chunk =>
          chunk.foreach { row =>
            row.zipWithIndex.foreach { case (v, i) => st.setObject(i + 1, v.asInstanceOf[AnyRef]) }
            st.addBatch()
          }
          st.executeBatch()
        }
        conn.commit()
      } finally {
        conn.setAutoCommit(true)
        st.close()
      }
    }
  }

  private val sets = mutable.HashSet.empty[String]

  /**
   * Inserts `files` (each its `files` row up to `run_id`, the raw columns it carries, and their
   * statistics) as schema.sql stores them: the file row with its `set_id` and `stats`, and each
   * column set not inserted yet.
   */
  def insertFiles(files: Iterator[HandMadeCatalog.HandFile]): Unit = {
    val newSets = mutable.ArrayBuffer.empty[Seq[Any]]
    insert(
      "files",
      files.map { f =>
        val columns = f.columns.sorted
        val setId = HandMadeCatalog.setId(columns)
        if (sets.add(setId)) newSets ++= columns.zipWithIndex.map { case (c, i) => Seq(tableId, setId, c, i, null) }
        f.row ++ Seq(setId, f.stats.map(s => HandMadeCatalog.statsJson(columns.map(s))).orNull)
      }
    )
    insert("column_sets", newSets.iterator)
  }

  def commit(version: Long, branch: String, at: String): Unit =
    exec(s"INSERT INTO commits VALUES ('$tableId', $version, NULL, '$branch', 'test', NULL, '{}', '$at', NULL)")

  def ref(name: String, kind: String, version: Long, parent: Option[String], fork: Option[Long]): Unit =
    exec("INSERT INTO refs (table_id, name, kind, version, parent_branch, fork_version, created_at) " +
      s"VALUES ('$tableId', '$name', '$kind', $version, ${parent.map(p => s"'$p'").getOrElse("NULL")}, " +
      s"${fork.map(_.toString).getOrElse("NULL")}, '2026-01-01T00:00:00Z')")

  def close(): Unit = conn.close()
}

object HandMadeCatalog {

  /**
   * A file for [[HandMadeCatalog.insertFiles]]: `stats` gives a carried column's entry
   * (None: a JSON null entry); `stats` None: the file kept no statistics (`files.stats` NULL).
   */
  final case class HandFile(row: Seq[Any], columns: Seq[Int], stats: Option[Int => Option[FileColumnStats]])

  private val Json = new ObjectMapper()

  /** schema.sql's set id of raw columns `columns` (ascending). */
  def setId(columns: Seq[Int]): String = {
    val key = columns.map(c => s"$c:").mkString(";")
    MessageDigest.getInstance("SHA-256").digest(key.getBytes(StandardCharsets.UTF_8)).take(8).map(b =>
      f"$b%02x").mkString
  }

  /** A `files.stats` value: the entries of a set's columns in position order. */
  def statsJson(entries: Seq[Option[FileColumnStats]]): String =
    Json.writeValueAsString(entries.map(_.map { s =>
      Seq[AnyRef](s.nullCount.map(Long.box).orNull, s.min.orNull, s.max.orNull).asJava
    }.orNull).asJava)
}
