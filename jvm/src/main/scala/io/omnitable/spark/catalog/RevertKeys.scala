package io.omnitable.spark.catalog

import java.util.BitSet

import scala.jdk.CollectionConverters._

import io.omnitable.spark.errors.{OmniTableErrors, WriteErrors}
import org.apache.hadoop.conf.Configuration

/**
 * python/omnitable/dataops/revert.py `_check_revived_keys`: the rows a revert of a keyed table
 * brings back (rows the reverted commit deleted, or whose fragments it removed) must not hold keys
 * that other live rows of the head hold again (an upsert may have inserted them since); the keys
 * are probed in the fragments' key index files ([[KeyIndex]]), the example key in the message is
 * read from its data file.
 */
private[catalog] object RevertKeys {

  /** The key columns of a keyed table's `table.key` property (a JSON list of names, or one name). */
  def columns(raw: String): Seq[String] =
    try {
      val node = CatalogWriter.Json.readTree(raw)
      if (node.isArray) node.elements().asScala.map(_.asText()).toSeq else Seq(node.asText())
    } catch { case scala.util.control.NonFatal(_) => Seq(raw) }

  /**
   * Checks the keys the revert of commit `reverted` on `branch` of table `table` brings back
   * against the live rows of version `head`.
   *
   * @throws io.omnitable.spark.errors.OmniTableCommitException (`OMNITABLE_COMMIT_CONFLICT`) with
   *   Python's message when live rows hold some of them
   */
  def check(
      reader: CatalogReader,
      table: String,
      tableId: String,
      tableUri: String,
      branch: String,
      key: Seq[String],
      reverted: Long,
      head: Long,
      conf: Configuration): Unit = {
    val views = reader.withConnection(s"the history of table '$table'") { conn =>
      val entry = reader.findTable(conn, table).filter(_.tableId == tableId).getOrElse(
        throw WriteErrors.dropped("revert", tableId))
      val resolver = new SnapshotResolver(conn, entry, reader.display)
      def segments(v: Long) = resolver.resolve(SnapshotSpec(branch = Some(branch), version = Some(v))).segments
      val onBranch = segments(head)
      Jdbc.query(
        conn,
        "SELECT branch, parent_version FROM commits WHERE table_id = ? AND version = ?",
        tableId,
        Long.box(reverted))(rs => (rs.getString(1), Option(rs.getObject(2)).map(_ => rs.getLong(2)))).headOption
        .collect { case (b, Some(parent)) if onBranch.exists(s => s.branch == b && reverted <= s.upto) => parent }
        .map { parent => // no parent: the creation, or no such version; the commit says which
          def view(v: Long) = MergeView.load(conn, tableId, segments(v), v)
          (view(parent), view(reverted), view(head))
        }
    }
    views.foreach { case (before, after, now) =>
      val revived = revivedKeys(tableUri, table, before, after, conf)
      val taken = if (revived.isEmpty) Nil else holders(tableUri, table, now, revived, conf)
      taken.headOption.foreach { case (holderPath, offset) =>
        throw WriteErrors.conflict(
          s"Cannot revert version $reverted of table '$table': it would bring back ${taken.size} row(s) whose keys " +
            s"live rows hold again (e.g. key ${keyRepr(tableUri, now, holderPath, offset, key)}, upserted after " +
            s"version $reverted); nothing was committed. Delete those rows first, or roll back instead")
      }
    }
  }

  /** (key, fragment path, offset) of the rows live in `before` that `after` deleted or removed. */
  private def revivedKeys(tableUri: String, table: String, before: MergeView, after: MergeView, conf: Configuration)
      : Seq[(KeyHash, String, Long)] = {
    val kept = after.frags.values.map(f => f.fragmentId -> f.path).toMap
    before.frags.values.toSeq.flatMap { f =>
      val live = new BitSet()
      live.set(0, f.rowCount.toInt)
      live.andNot(before.mask(f.path, table))
      kept.get(f.fragmentId).foreach(p => live.and(after.mask(p, table)))
      if (live.isEmpty) Nil
      else {
        val index = KeyIndex.load(KeyIndex.uri(tableUri, f.path), f.rowCount, conf)
        (0 until index.size).filter(i => live.get(index.offset(i).toInt)).map(i =>
          (KeyHash(index.h1(i), index.h2(i)), f.path, index.offset(i)))
      }
    }
  }

  /** For each revived key another live row of `now` holds: that row's (fragment path, offset), in `revived`'s order. */
  private def holders(
      tableUri: String,
      table: String,
      now: MergeView,
      revived: Seq[(KeyHash, String, Long)],
      conf: Configuration): Seq[(String, Long)] = {
    val slots = now.frags.values.toSeq.map { f =>
      (f.path, KeyIndex.load(KeyIndex.uri(tableUri, f.path), f.rowCount, conf), now.mask(f.path, table))
    }
    revived.flatMap { case (key, path, offset) =>
      val live = slots.flatMap { case (p, index, deleted) =>
        val off = index.find(key)
        if (off >= 0 && !deleted.get(off.toInt)) Some((p, off)) else None
      }
      if (live.size > 1) throw OmniTableErrors.duplicateKeyInIndex(live(1)._1)
      live.headOption.filter(_ != ((path, offset)))
    }
  }

  /** keyed.py `key_repr`: Python's repr of the key of row `offset` of the fragment at `path` in `view`. */
  private def keyRepr(tableUri: String, view: MergeView, path: String, offset: Long, key: Seq[String]): String = {
    val values = key.map { name =>
      view.columns.values.find(c => c.name == name && c.state == "active")
        .map(c => MergeRows.values(tableUri, view, path, c.columnId, Seq(offset.toInt)).head).orNull
    }
    val shown = values.map(pyRepr)
    if (shown.size == 1) shown.head else shown.mkString("(", ", ", ")")
  }

  private def pyRepr(v: Any): String = v match {
    case null => "None"
    case s: String => PyRepr.str(s)
    case d: java.sql.Date => dateRepr(d.toLocalDate)
    case d: java.time.LocalDate => dateRepr(d)
    case other => other.toString
  }

  private def dateRepr(d: java.time.LocalDate): String =
    s"datetime.date(${d.getYear}, ${d.getMonthValue}, ${d.getDayOfMonth})"

}
