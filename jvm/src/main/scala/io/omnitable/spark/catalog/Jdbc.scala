package io.omnitable.spark.catalog

import java.sql.{Connection, ResultSet}
import java.util.concurrent.atomic.AtomicLong

import scala.collection.mutable
import scala.util.Using

/**
 * How many statements a [[CatalogReader]] ran and how many rows they returned, since it was
 * made (or since `reset`). Planning cost follows these; tests count them.
 */
final class QueryCounter {
  private val statementCount = new AtomicLong
  private val rowCount = new AtomicLong

  def statements: Long = statementCount.get
  def rows: Long = rowCount.get

  def reset(): Unit = {
    statementCount.set(0)
    rowCount.set(0)
  }

  private[catalog] def add(rows: Long): Unit = {
    statementCount.incrementAndGet()
    rowCount.addAndGet(rows)
  }
}

/** Small helpers for the catalog's read queries (prepared statements, typed NULLs). */
private[catalog] object Jdbc {

  /** An open catalog connection and the counter its queries add to. */
  final case class Conn(jdbc: Connection, counter: QueryCounter)

  /** Runs `sql` with positional `params` (String, java.lang.Long, ...) and maps every row. */
  def query[T](conn: Conn, sql: String, params: AnyRef*)(row: ResultSet => T): Seq[T] = {
    val out = mutable.ArrayBuffer.empty[T]
    foreach(conn, sql, params: _*)(rs => out += row(rs))
    out.toSeq
  }

  /** Runs `sql` with positional `params` and calls `row` on every row (nothing is kept). */
  def foreach(conn: Conn, sql: String, params: AnyRef*)(row: ResultSet => Unit): Unit =
    Using.resource(conn.jdbc.prepareStatement(sql)) { stmt =>
      params.zipWithIndex.foreach { case (p, i) => stmt.setObject(i + 1, p) }
      Using.resource(stmt.executeQuery()) { rs =>
        var rows = 0L
        while (rs.next()) {
          row(rs)
          rows += 1
        }
        conn.counter.add(rows)
      }
    }

  /** `expr IN (?, ...)` over `values` with its parameters (`1 = 0` for none: PostgreSQL has no `IN ()`). */
  def in(expr: String, values: Seq[AnyRef]): (String, Seq[AnyRef]) =
    if (values.isEmpty) ("1 = 0", Nil) else (values.map(_ => "?").mkString(s"$expr IN (", ", ", ")"), values)

  def optLong(rs: ResultSet, column: Int): Option[Long] = {
    val v = rs.getLong(column)
    if (rs.wasNull()) None else Some(v)
  }

  /** The id of a row of each versioned table as `removals.row_id` holds it (`%s`: the alias). */
  private[catalog] val RemovableId = Map(
    "batches" -> "%s.batch_id",
    "fragments" -> "%s.fragment_id",
    "files" -> "%s.file_id",
    "deletion_vectors" -> "%s.vector_id",
    "columns" -> "CAST(%s.column_id AS TEXT)"
  )

  /**
   * SQL selecting the rows of `alias` (a row of table `kind`) visible in `segments`, with its
   * parameters in order (docs/catalog.md: an OR of one condition per segment and, on a branch,
   * no removal of the row in `removals` inside a segment). `versionIndexed = false` writes
   * `+added_version` (the same value), which keeps SQLite from choosing a version-range index
   * over a more selective one.
   */
  def visible(alias: String, kind: String, segments: Seq[Segment], versionIndexed: Boolean = true)
      : (String, Seq[AnyRef]) = {
    val added = if (versionIndexed) s"$alias.added_version" else s"+$alias.added_version"
    val sql = segments.map { _ =>
      s"($alias.branch = ? AND $added <= ? AND " +
        s"($alias.removed_version IS NULL OR $alias.removed_version > ?))"
    }.mkString("(", " OR ", ")")
    val params = segments.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto), Long.box(s.upto)))
    if (segments.size <= 1) (sql, params) // main's own rows: none is ever in `removals`
    else {
      val within = segments.map(_ => "(x_rm.branch = ? AND x_rm.version <= ?)").mkString(" OR ")
      val rowId = RemovableId(kind).format(alias)
      val removed = s"NOT EXISTS (SELECT 1 FROM removals x_rm WHERE x_rm.table_id = $alias.table_id " +
        s"AND x_rm.kind = ? AND x_rm.row_id = $rowId AND x_rm.row_version = $alias.added_version " +
        s"AND ($within))"
      val removedParams = Seq[AnyRef](kind) ++ segments.flatMap(s => Seq[AnyRef](s.branch, Long.box(s.upto)))
      (s"($sql AND $removed)", params ++ removedParams)
    }
  }
}
