package io.omnitable.spark.catalog

import scala.jdk.CollectionConverters._
import scala.util.Using

import io.omnitable.spark.errors.WriteErrors

/**
 * The steps every JVM committer shares (python/omnitable/catalog/commit.py is the reference): the
 * commit row of a new version and its branch's ref, the commit time, the base-version check and
 * the check that written files are still bound to the columns they were written for.
 */
private[catalog] object CommitRows {

  /** A commit summary as JSON with its keys sorted (the Jackson form of appends, updates, DELETEs). */
  def summaryJson(fields: Map[String, Any]): String =
    CatalogWriter.Json.writeValueAsString(new java.util.TreeMap[String, Any](fields.asJava))

  /**
   * Inserts the `commits` row of `version` on `branch` (commit.sql `insert_commit`: parent
   * `parent`, operation `op`, `runId`, JSON `summary`, time `now`, commit `token`) and moves the
   * branch's ref to it (`move_ref`), in the caller's transaction.
   */
  def insertCommit(
      conn: Jdbc.Conn,
      tableId: String,
      version: Long,
      parent: Long,
      branch: String,
      op: String,
      runId: Option[String],
      summary: String,
      now: String,
      token: String): Unit = {
    val v = Long.box(version)
    update(
      conn,
      CommitSql("insert_commit"),
      tableId,
      v,
      Long.box(parent),
      branch,
      op,
      runId.orNull,
      summary,
      now,
      token)
    update(conn, CommitSql("move_ref"), v, tableId, branch)
  }

  /** Now, never earlier than the table's latest commit (commit.py `_commit_time`). */
  def commitTime(conn: Jdbc.Conn, tableId: String): String = {
    val last = Jdbc.query(conn, CommitSql("last_commit_time"), tableId)(rs => Option(rs.getString(1))).head
    val now = CatalogWriter.utcNow()
    last.filter(_ > now).getOrElse(now)
  }

  /** A commit planned at `baseVersion` cannot land on a branch whose head is older (a conflict). */
  def checkBase(branch: String, baseVersion: Long, head: Long): Unit =
    if (baseVersion > head) {
      throw WriteErrors.conflict(
        s"Cannot commit on branch '$branch': base version $baseVersion is newer than its head $head")
    }

  /**
   * Every column a file of `op` (`append`, `update`) carries is still active (`active`: name →
   * column id at the head) with the id the file was written for (commit.py `_validate`); `retry`
   * ends the message of a column replaced concurrently.
   */
  def checkColumnBindings(op: String, files: Seq[WrittenFile], active: Map[String, Int], retry: String): Unit =
    for (f <- files; (name, _) <- f.stats) {
      val head = active.getOrElse(
        name,
        throw WriteErrors.conflict(
          s"Cannot commit $op: column '$name' no longer exists (retired, renamed or replaced concurrently?)"))
      f.columnIds.get(name).filter(_ != head).foreach { bound =>
        throw WriteErrors.conflict(
          s"Cannot commit $op: column '$name' was replaced by a concurrent commit (its type changed: " +
            s"column id $bound is now $head) after file ${f.path} was written for it; nothing was committed. " +
            retry)
      }
    }

  private def update(conn: Jdbc.Conn, sql: String, params: AnyRef*): Int =
    Using.resource(conn.jdbc.prepareStatement(sql)) { st =>
      params.zipWithIndex.foreach {
        case (null, i) => st.setNull(i + 1, java.sql.Types.NULL)
        case (p, i) => st.setObject(i + 1, p)
      }
      st.executeUpdate()
    }
}
