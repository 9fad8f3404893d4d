package io.omnitable.spark.catalog

import java.util.BitSet

import scala.collection.mutable

/**
 * One merge conflict (python/omnitable/dataops/merge_plan.py `Conflict`): `kind` cell, batch,
 * column, feature, rows or key (a batch of a keyed table whose keys both branches inserted,
 * [[MergeKeys]]); `where` the fragment path, batch or column name; `column` the column of a cell or
 * rows; `source` / `target` what each side has; `rows` the offsets of a `rows` conflict.
 */
final case class MergeConflictEntry(
    kind: String,
    where: String,
    column: Option[String],
    source: String,
    target: String,
    columnId: Option[Int] = None,
    rows: Seq[Int] = Nil) {

  /** As merge.py `_conflict_message` lists it. */
  def describe: String = s"$kind $where" + column.map(c => s" column $c").getOrElse("") +
    s" (source: $source, target: $target)"
}

/** What the merge does to one fragment the three sides share (merge_plan.py `FragmentMerge`). */
private[catalog] final class FragmentMerge(val path: String) {
  val adopt: mutable.LinkedHashMap[String, (MergeFile, mutable.ArrayBuffer[Int])] = mutable.LinkedHashMap.empty
  var mask: Option[BitSet] = None
}

/** The merge's decisions before conflicts are resolved (merge_plan.py `Diff`). */
private[catalog] final class MergePlan {
  val fragments: mutable.ArrayBuffer[FragmentMerge] = mutable.ArrayBuffer.empty
  val copyBatches: mutable.ArrayBuffer[String] = mutable.ArrayBuffer.empty
  val removeBatches: mutable.ArrayBuffer[String] = mutable.ArrayBuffer.empty
  val features: mutable.ArrayBuffer[MergeFeature] = mutable.ArrayBuffer.empty
  val newColumns: mutable.ArrayBuffer[Int] = mutable.ArrayBuffer.empty
  val changedColumns: mutable.ArrayBuffer[Int] = mutable.ArrayBuffer.empty
  val conflicts: mutable.ArrayBuffer[MergeConflictEntry] = mutable.ArrayBuffer.empty

  /**
   * Rows deleted on one side whose cells the other side changed: (path, side that deleted,
   * column id, offsets), checked against the values before they are conflicts ([[MergeRows]]).
   */
  val rowChecks: mutable.ArrayBuffer[(String, String, Int, Seq[Int])] = mutable.ArrayBuffer.empty

  /** Source fragment path → offsets of rows whose keys the target inserted too ([[MergeKeys]]; merge_plan.py `key_drops`). */
  val keyDrops: mutable.Map[String, Seq[Int]] = mutable.Map.empty

  /** merge.py `_counts`. */
  def counts: Map[String, Int] = Map(
    "cells" -> fragments.map(_.adopt.values.map(_._2.size).sum).sum,
    "batches" -> (copyBatches.size + removeBatches.size),
    "deletes" -> fragments.count(_.mask.isDefined),
    "columns" -> (newColumns.size + changedColumns.size),
    "features" -> features.size
  )
}

/** merge_plan.py `diff`: the three-way diff of a source into a target against their merge base. */
private[catalog] final class MergeDiff(base: MergeView, source: MergeView, target: MergeView, table: String) {

  private val out = new MergePlan

  def plan(): MergePlan = {
    diffFeatures()
    diffColumns()
    val changed = diffBatches()
    for (path <- source.frags.keys if base.frags.contains(path))
      if (!changed.contains(source.frags(path).batchName)) {
        if (!target.frags.contains(path)) {
          if (fragmentChanged(base, source, path)) {
            out.conflicts += MergeConflictEntry("batch", base.frags(path).batchName, None, "changed", "replaced")
          }
        } else diffFragment(path).foreach(out.fragments += _)
      }
    out
  }

  private def fragmentChanged(a: MergeView, b: MergeView, path: String): Boolean =
    a.filePaths(path) != b.filePaths(path) || a.vector(path).map(_.vector) != b.vector(path).map(_.vector)

  private def diffFeatures(): Unit = source.features.toSeq.sortBy(_._1).foreach { case (name, row) =>
    val was = base.features.get(name).map(_.version)
    val now = target.features.get(name).map(_.version)
    if (!was.contains(row.version) && !now.contains(row.version)) {
      if (now != was) out.conflicts += MergeConflictEntry("feature", name, None, row.version, now.getOrElse("None"))
      else out.features += row
    }
  }

  private def diffColumns(): Unit = {
    val taken = target.columns.values.map(_.name).toSet
    source.columns.toSeq.sortBy(_._1).foreach { case (cid, col) =>
      val b = base.columns.get(cid)
      val t = target.columns.get(cid)
      val meta = (col.name, col.state)
      if (!b.exists(x => (x.name, x.state) == meta)) {
        if (b.isEmpty) {
          if (t.isEmpty && taken.contains(col.name)) {
            out.conflicts += MergeConflictEntry("column", col.name, Some(col.name), "added", "exists", Some(cid))
          } else if (t.isEmpty) out.newColumns += cid
        } else if (t.forall(x => (x.name, x.state) == (b.get.name, b.get.state))) {
          if (t.isDefined) out.changedColumns += cid
        } else if ((t.get.name, t.get.state) != meta) {
          val was = b.get
          out.conflicts += MergeConflictEntry(
            "column",
            was.name,
            Some(was.name),
            s"${col.name} (${col.state})",
            s"${t.get.name} (${t.get.state})",
            Some(cid))
        }
      }
    }
  }

  /** Batches whose fragment lists the source changed; returns their names. */
  private def diffBatches(): Set[String] = {
    val changed = mutable.Set.empty[String]
    for (name <- (source.batchPaths.keySet ++ base.batchPaths.keySet).toSeq.sorted) {
      val s = source.batchPaths.get(name)
      val b = base.batchPaths.get(name)
      val t = target.batchPaths.get(name)
      if (s != b) {
        changed += name
        if (t == b && b.isDefined && b.get.exists(p => fragmentChanged(base, target, p))) {
          out.conflicts += MergeConflictEntry("batch", name, None, state(s), "changed")
        } else if (t == b || t == s) {
          if (t != s) {
            if (s.isEmpty) out.removeBatches += name else out.copyBatches += name
          }
        } else out.conflicts += MergeConflictEntry("batch", name, None, state(s), state(t))
      }
    }
    changed.toSet
  }

  private def state(paths: Option[Seq[String]]): String =
    paths.map(p => s"${p.size} fragment(s)").getOrElse("absent")

  private def diffFragment(path: String): Option[FragmentMerge] = if (!fragmentChanged(base, source, path)) None
  else {
    val merged = new FragmentMerge(path)
    val (cb, cs, ct) = (base.cells(path), source.cells(path), target.cells(path))
    def filePath(f: Option[MergeFile]): Option[String] = f.map(_.path)
    val targetChanged = ct.keys.filter(cid => filePath(ct.get(cid)) != filePath(cb.get(cid))).toSeq
    val sourceChanged = mutable.ArrayBuffer.empty[Int]
    cb.keys.filterNot(cs.contains).toSeq.sorted.foreach { cid =>
      val name = source.columns.get(cid).map(_.name).getOrElse(cid.toString)
      out.conflicts += MergeConflictEntry("cell", path, Some(name), "none", pyStr(filePath(ct.get(cid))), Some(cid))
    }
    cs.foreach { case (cid, f) =>
      val was = filePath(cb.get(cid))
      val now = filePath(ct.get(cid))
      if (!was.contains(f.path) && !now.contains(f.path)) {
        sourceChanged += cid
        if (now != was) {
          val name = target.columns.get(cid).map(_.name).getOrElse(cid.toString)
          out.conflicts += MergeConflictEntry("cell", path, Some(name), f.path, pyStr(now), Some(cid))
        } else merged.adopt.getOrElseUpdate(f.path, (f, mutable.ArrayBuffer.empty[Int]))._2 += cid
      }
    }
    diffDeletes(path, merged, sourceChanged.toSeq, targetChanged)
    if (merged.adopt.nonEmpty || merged.mask.isDefined) Some(merged) else None
  }

  private def pyStr(v: Option[String]): String = v.getOrElse("None")

  /** merge_plan.py `_diff_deletes`: the bits the source changed win; deleted-vs-changed rows are checked later. */
  private def diffDeletes(path: String, merged: FragmentMerge, sourceChanged: Seq[Int], targetChanged: Seq[Int])
      : Unit = {
    val vb = base.vector(path).map(_.vector)
    if (source.vector(path).map(_.vector) != vb || target.vector(path).map(_.vector) != vb) {
      val (mb, ms, mt) = (base.mask(path, table), source.mask(path, table), target.mask(path, table))
      val flipped = copy(ms)
      flipped.xor(mb)
      if (!flipped.isEmpty) {
        val result = copy(mt)
        result.andNot(flipped)
        val fromSource = copy(ms)
        fromSource.and(flipped)
        result.or(fromSource)
        if (result != mt) merged.mask = Some(result)
      }
      val sourceOnly = copy(ms)
      sourceOnly.andNot(mb)
      sourceOnly.andNot(mt)
      val targetOnly = copy(mt)
      targetOnly.andNot(mb)
      targetOnly.andNot(ms)
      for ((side, deleted, cells) <-
          Seq(("source", sourceOnly, targetChanged), ("target", targetOnly, sourceChanged))) {
        val rows = deleted.stream().toArray.toSeq
        if (rows.nonEmpty) cells.foreach(cid => out.rowChecks += ((path, side, cid, rows)))
      }
    }
  }

  private def copy(b: BitSet): BitSet = b.clone().asInstanceOf[BitSet]
}
