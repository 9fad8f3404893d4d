package io.omnitable.spark.catalog

import java.util.BitSet

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.JsonNode
import io.omnitable.spark.errors.{ProcedureErrors, WriteErrors}

/** A file row a merge adds: `from`'s data file for columns `cids` of fragment `fragmentId`. */
private[catalog] final case class MergedFile(fileId: String, fragmentId: String, from: MergeFile, cids: Seq[Int])

/**
 * The rows of one three-way merge commit (python/omnitable/dataops/merge.py `_Request`), built
 * from the diff: the source's files (no data file is written), copied batches under new ids,
 * deletion vectors, columns, features and lineage.
 */
private[catalog] final class MergeRequest(
    src: MergeView,
    dst: MergeView,
    plan: MergePlan,
    theirs: Boolean,
    table: String) {

  val features = mutable.ArrayBuffer.empty[MergeFeature]
  val newColumns = mutable.ArrayBuffer.empty[MergeColumn]
  val columnChanges = mutable.ArrayBuffer.empty[(Int, Long, String, String)] // id, read version, name, state
  val newBatches = mutable.ArrayBuffer.empty[(String, String, String)] // id, name, the source's batch id
  val newFragments = mutable.ArrayBuffer.empty[(String, String, Int, Long, String)] // id, batch, seq, rows, path
  val newFiles = mutable.ArrayBuffer.empty[MergedFile]
  val removedBatches = mutable.ArrayBuffer.empty[String]
  val removedFragments = mutable.ArrayBuffer.empty[String]
  val deletions = mutable.ArrayBuffer.empty[(String, String, Long, String, Option[String])]
  val removedDeletions = mutable.ArrayBuffer.empty[String]

  /** Column id → name at the target (retired ones too) and of the new columns. */
  val names: mutable.Map[Int, String] = mutable.Map(dst.columns.map { case (c, col) => c -> col.name }.toSeq: _*)

  /** (fragment path, source file id, column name) → the new file id (merge.py `file_ids`). */
  val fileIds = mutable.Map.empty[(String, String, String), String]

  /** (source file, new file id, column ids, fragment path) of adopted derived columns. */
  val lineageFiles = mutable.ArrayBuffer.empty[(MergeFile, String, Seq[Int], String)]

  def build(): MergeRequest = {
    features ++= plan.features
    if (theirs) features ++= plan.conflicts.filter(_.kind == "feature").map(c => src.features(c.where))
    columns()
    val conflictBatches = if (theirs) plan.conflicts.filter(_.kind == "batch").map(_.where).distinct.sorted else Nil
    for (name <- plan.copyBatches ++ conflictBatches) {
      removeBatch(name)
      if (src.batchPaths.contains(name)) copyBatch(name)
    }
    plan.removeBatches.foreach(removeBatch)
    plan.fragments.foreach { fm =>
      val frag = dst.frags(fm.path)
      fm.adopt.values.foreach { case (f, cids) => adopt(frag, f, cids.toSeq) }
      fm.mask.foreach(deletion(frag, _))
    }
    if (theirs) theirsCells()
    this
  }

  private def columns(): Unit = {
    val changed = mutable.ArrayBuffer.empty[Int] ++ plan.changedColumns
    if (theirs) plan.conflicts.filter(_.kind == "column").foreach { c =>
      if (c.source == "added") {
        throw ProcedureErrors.invalidOperation(
          s"Cannot merge with strategy='theirs': both branches added a column '${c.where}'; rename one and merge again")
      }
      c.columnId.foreach(changed += _)
    }
    plan.newColumns.foreach { cid =>
      newColumns += src.columns(cid)
      names(cid) = src.columns(cid).name
    }
    changed.foreach { cid =>
      val (now, was) = (src.columns(cid), dst.columns(cid))
      columnChanges += ((cid, was.addedVersion, now.name, now.state))
    }
  }

  private def removeBatch(name: String): Unit = dst.batchId(name).foreach { id =>
    removedBatches += id
    removedFragments ++= dst.batchPaths.getOrElse(name, Nil).map(dst.frags(_).fragmentId)
  }

  private def copyBatch(name: String): Unit = {
    val batchId = UndoStatements.newId()
    newBatches += ((batchId, name, src.batchId(name).get))
    src.batchPaths(name).zipWithIndex.foreach { case (path, seq) =>
      val frag = src.frags(path)
      val id = UndoStatements.newId()
      newFragments += ((id, batchId, seq, frag.rowCount, path))
      src.files.getOrElse(frag.fragmentId, Nil).foreach(f => file(id, path, f, f.file.columns.keys.toSeq.sorted))
      plan.keyDrops.get(path) match {
        case Some(drops) => // `ours`: the rows whose keys the target inserted too are deleted
          val mask = MergeKeys.mask(src, path, table, drops)
          deletions += ((id, batchId, mask.cardinality().toLong, DeletionVectors.encode(mask, frag.rowCount), None))
        case None =>
          src.deletions.get(frag.fragmentId).foreach(v => deletions += ((id, batchId, v.deletedCount, v.vector, None)))
      }
    }
  }

  private def adopt(frag: MergeFragment, f: MergeFile, cids: Seq[Int]): Unit = file(frag.fragmentId, frag.path, f, cids)

  private def file(fragmentId: String, fragPath: String, f: MergeFile, cids: Seq[Int]): Unit = {
    val kept = cids.filter(names.contains)
    if (kept.nonEmpty) {
      val id = UndoStatements.newId()
      kept.foreach(cid => fileIds((fragPath, f.fileId, names(cid))) = id)
      newFiles += MergedFile(id, fragmentId, f, kept)
      if (kept.exists(cid => f.file.columns(cid).featureVersion.isDefined)) lineageFiles += ((f, id, kept, fragPath))
    }
  }

  private def deletion(frag: MergeFragment, mask: BitSet): Unit = {
    val current = dst.deletions.get(frag.fragmentId)
    if (mask.isEmpty) current.foreach(v => removedDeletions += v.vectorId)
    else {
      deletions +=
        ((
          frag.fragmentId,
          frag.batchId,
          mask.cardinality().toLong,
          DeletionVectors.encode(mask, frag.rowCount),
          current.map(_.vectorId)))
    }
  }

  /** Conflicting cells of shared fragments take the source's file. */
  private def theirsCells(): Unit = plan.conflicts.foreach { c =>
    if (c.kind == "cell" && dst.frags.contains(c.where) && c.columnId.isDefined) {
      src.cells(c.where).get(c.columnId.get).foreach(f => adopt(dst.frags(c.where), f, Seq(c.columnId.get)))
    }
  }
}

/**
 * The statements of a merge commit inside its transaction (commit.py `commit` for the request
 * merge.py builds: columns, features, batches, fragments, files, lineage, removals, deletion
 * vectors, column changes, in that order), with the checks that a merge planned on exactly the
 * target's head can still fail.
 */
private[catalog] final class MergeStatements(c: CommitContext, version: Long, now: String, hit: String => Unit) {

  private val t = c.entry.tableId
  private val s = new UndoStatements(c.conn, t, c.branch, version, c.segments)

  def apply(r: MergeRequest, dst: MergeView): Unit = {
    check(r, dst)
    insertColumns(r)
    r.features.foreach { f =>
      update(
        "INSERT INTO features (table_id, name, version, kind, definition, fingerprint, registered_at, " +
          "registered_version, branch) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        t,
        f.name,
        f.version,
        f.kind,
        f.definition,
        f.fingerprint,
        now,
        Long.box(version),
        c.branch
      )
    }
    val positions = r.newBatches.map { case (id, _, from) => id -> sourcePosition(from) }.toMap
    r.newBatches.foreach { case (id, name, _) =>
      val frags = r.newFragments.filter(_._2 == id)
      update(
        CommitSql("insert_batch"),
        t,
        id,
        name,
        c.branch,
        Long.box(version),
        now,
        Long.box(frags.map(_._4).sum),
        Long.box(frags.size.toLong),
        Long.box(positions(id))
      )
    }
    r.newFragments.foreach { case (id, bid, seq, n, path) =>
      update(
        CommitSql("insert_fragment"),
        t,
        id,
        bid,
        Int.box(seq),
        Long.box(n),
        path,
        c.branch,
        Long.box(version),
        Long.box(positions(bid)))
    }
    insertFiles(r)
    insertLineage(r)
    hit("commit.mid_insert")
    s.remove("batches", "batch_id", r.removedBatches.toSeq)
    s.remove("fragments", "fragment_id", r.removedFragments.toSeq)
    s.removeByFragment(r.removedFragments.toSeq)
    s.remove("deletion_vectors", "vector_id", r.deletions.flatMap(_._5).toSeq ++ r.removedDeletions)
    r.deletions.foreach { case (fid, bid, n, vec, _) =>
      update(
        CommitSql("insert_deletion_vector"),
        t,
        UndoStatements.newId(),
        fid,
        bid,
        Long.box(n),
        vec,
        c.branch,
        Long.box(version))
    }
    s.remove("columns", "column_id", r.columnChanges.map(x => Int.box(x._1)).toSeq)
    r.columnChanges.foreach { case (cid, read, name, state) =>
      update(
        "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, position, state, " +
          "group_name, feature, branch, added_version, removed_version) SELECT table_id, column_id, ?, " +
          "physical_name, data_type, nullable, position, ?, group_name, feature, ?, ?, NULL FROM columns " +
          "WHERE table_id = ? AND column_id = ? AND added_version = ?",
        name,
        state,
        c.branch,
        Long.box(version),
        t,
        Int.box(cid),
        Long.box(read)
      )
    }
  }

  /** commit.py `_validate`'s checks a merge on an unmoved head can still fail. */
  private def check(r: MergeRequest, dst: MergeView): Unit = {
    val active = dst.columns.values.filter(_.state == "active").map(_.name).toSet ++ r.newColumns.map(_.name)
    for (f <- r.newFiles; cid <- f.cids if !active.contains(r.names(cid)))
      throw WriteErrors.conflict(
        s"Cannot commit merge: column '${r.names(cid)}' no longer exists (retired, renamed or replaced concurrently?)")
    val held = dst.columns.values.filter(_.state != "dropped").groupBy(_.groupName)
    r.newColumns.foreach { col =>
      val clash = held.getOrElse(col.groupName, Nil).toSeq.sortBy(_.columnId).filter(_.feature != col.feature)
      if (clash.nonEmpty) {
        val owner = clash.head.feature.map(f => s"outputs of feature '$f'").getOrElse("raw column(s)")
        val mine = col.feature.map(f => s"output of feature '$f'").getOrElse("a raw column")
        throw ProcedureErrors.invalidOperation(
          s"Cannot commit merge: column group '${col.groupName}' holds $owner (${clash.take(5).map(_.name)
              .mkString(", ")}), so column '${col.name}' ($mine) cannot be stored in it (a backfill replaces the " +
            "files of its feature's group); choose another group name or rename the feature")
      }
    }
    val changed = r.columnChanges.map(_._1).toSet
    r.columnChanges.foreach { case (_, _, name, _) =>
      if (dst.columns.values.exists(col => col.name == name && !changed.contains(col.columnId))) {
        throw ProcedureErrors.invalidOperation(
          s"Cannot commit merge: a column named '$name' already exists (active or retired); choose another name")
      }
    }
  }

  private def insertColumns(r: MergeRequest): Unit = if (r.newColumns.nonEmpty) {
    val maxPos =
      Jdbc.query(c.conn, "SELECT COALESCE(MAX(position), -1) FROM columns WHERE table_id = ?", t)(_.getLong(1)).head
    r.newColumns.zipWithIndex.foreach { case (col, i) =>
      update(
        "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, position, state, " +
          "group_name, feature, branch, added_version, removed_version) VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, " +
          "?, ?, ?, NULL)",
        t,
        Int.box(col.columnId),
        col.name,
        Option(col.physicalName).getOrElse(col.name),
        col.dataType,
        col.nullable,
        Long.box(maxPos + 1 + i),
        col.groupName,
        col.feature.orNull,
        c.branch,
        Long.box(version)
      )
    }
  }

  private def insertFiles(r: MergeRequest): Unit = {
    val sets =
      r.newFiles.map(f => FeatureColumnSet(f.cids.sorted.map(cid => cid -> f.from.file.columns(cid).featureVersion)))
    s.insertMissingSets(sets.toSeq)
    r.newFiles.zip(sets).foreach { case (f, set) =>
      update(
        CommitSql("insert_file"),
        t,
        f.fileId,
        f.fragmentId,
        f.from.groupName,
        f.from.path,
        Long.box(f.from.rowCount),
        Long.box(f.from.size),
        c.branch,
        Long.box(version),
        null,
        set.setId,
        UndoStatements.restrictedStats(f.from.file, set).orNull
      )
    }
  }

  /** merge.py `_lineage`: adopted derived columns keep their lineage; inputs adopted too get their new ids. */
  private def insertLineage(r: MergeRequest): Unit = if (r.lineageFiles.nonEmpty) {
    val ids = r.lineageFiles.map(_._1.fileId).distinct.sorted
    val rows = s.rows("lineage", "file_id", ids.toSeq).groupBy(_("file_id").toString)
    for ((f, newId, cids, fragPath) <- r.lineageFiles; row <- rows.getOrElse(f.fileId, Nil)) {
      val cid = row("column_id").toString.toInt
      if (cids.contains(cid)) {
        val inputs = MergeStatements.Json.readTree(row("inputs").toString).elements().asScala.map { i =>
          val m = MergeStatements.value(i).asInstanceOf[Map[String, Any]]
          val old = m.get("file_id").map(_.asInstanceOf[String]).orNull
          val column = m.get("column").map(_.asInstanceOf[String]).orNull
          m + ("file_id" -> r.fileIds.getOrElse((fragPath, old, column), old))
        }.toSeq
        val runId = Option(row("run_id")).map(_.toString).getOrElse("")
        update(
          CommitSql("insert_lineage"),
          t,
          newId,
          Int.box(cid),
          row("feature"),
          row("feature_version"),
          PyJson.dumps(inputs),
          runId,
          row("engine"),
          row("error_count"))
      }
    }
  }

  /** The read position of the source's batch a merge copies: the copy keeps the batch's place (merge.py `_copy_batch`). */
  private def sourcePosition(batchId: String): Long =
    Jdbc.query(
      c.conn,
      "SELECT position FROM batches WHERE table_id = ? AND batch_id = ?",
      t,
      batchId)(_.getLong(1)).head

  private def update(sql: String, params: AnyRef*): Int = c.update(sql, params: _*)
}

private[catalog] object MergeStatements {
  val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  /** A JSON value as [[PyJson]] writes it back. */
  def value(n: JsonNode): Any = n match {
    case _ if n.isNull => null
    case _ if n.isTextual => n.asText()
    case _ if n.isBoolean => n.asBoolean()
    case _ if n.isIntegralNumber => n.asLong()
    case _ if n.isArray => n.elements().asScala.map(value).toSeq
    case _ if n.isObject => n.properties().asScala.map(e => e.getKey -> value(e.getValue)).toMap
    case _ => throw new IllegalArgumentException(s"Cannot copy lineage input value $n")
  }
}
