package io.omnitable.spark.catalog

import java.util.BitSet

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.functions.col

/**
 * python/omnitable/dataops/merge_rows.py `check_rows` and merge.py `_resolve_rows`: a row
 * deleted on one side is a conflict where the other side changed its value in a cell (an update),
 * not where it only rewrote the cell with the same value; the values are read from the cells'
 * data files (Spark's parquet reader, rows by `_metadata.row_index`).
 */
private[catalog] object MergeRows {

  /** The `rows` conflicts of `plan.rowChecks`. */
  def check(tableUri: String, plan: MergePlan, base: MergeView, src: MergeView, dst: MergeView)
      : Seq[MergeConflictEntry] = plan.rowChecks.toSeq.flatMap { case (path, side, cid, rows) =>
    val changedView = if (side == "source") dst else src
    if (!changedView.columns.contains(cid)) None
    else {
      val now = values(tableUri, changedView, path, cid, rows)
      val was = if (base.columns.contains(cid)) values(tableUri, base, path, cid, rows) else rows.map(_ => null)
      val differ = rows.indices.filterNot(i => same(now(i), was(i))).map(rows(_))
      if (differ.isEmpty) None
      else {
        val name = dst.columns.get(cid).map(_.name).getOrElse(changedView.columns(cid).name)
        val (deleted, updated) = if (side == "source") ("deleted", "updated") else ("updated", "deleted")
        Some(MergeConflictEntry("rows", path, Some(name), deleted, updated, Some(cid), differ))
      }
    }
  }

  /** The values of column `cid` at offsets `rows` of the fragment at `path` in `view` (NULL: none there). */
  def values(tableUri: String, view: MergeView, path: String, cid: Int, rows: Seq[Int]): Seq[Any] = {
    val column = view.columns(cid)
    view.cells(path).get(cid) match {
      case Some(f) if column.state == "active" =>
        val spark = SparkSession.active
        val uri = DataPaths.join(tableUri, f.path)
        val name = Option(column.physicalName).getOrElse(column.name)
        val got = spark.read.parquet(uri).select(col(s"`$name`"), col("_metadata.row_index"))
          .where(col("_metadata.row_index").isin(rows.map(r => Long.box(r.toLong)): _*)).collect()
          .map(r => r.getLong(1).toInt -> r.get(0)).toMap
        rows.map(got.getOrElse(_, null))
      case _ => rows.map(_ => null)
    }
  }

  /** merge_rows.py `_same`: equal values (NaN equals NaN; numbers by value; bytes by content). */
  private def same(a: Any, b: Any): Boolean = (a, b) match {
    case (null, null) => true
    case (null, _) | (_, null) => false
    case (x: Double, y: Double) => x == y || (x.isNaN && y.isNaN)
    case (x: Float, y: Float) => x == y || (x.isNaN && y.isNaN)
    case (x: Array[Byte], y: Array[Byte]) => java.util.Arrays.equals(x, y)
    case (x: java.math.BigDecimal, y: java.math.BigDecimal) => x.compareTo(y) == 0
    case _ => a == b
  }

  /**
   * merge.py `_resolve_rows`: rows deleted on one side and updated on the other stay alive on the
   * side the strategy keeps (`ours`: the source's deletes of rows the target updated are dropped,
   * `theirs`: the target's deletes of rows the source updated).
   */
  def resolve(plan: MergePlan, dst: MergeView, theirs: Boolean, table: String): Unit =
    plan.conflicts.filter(c => c.kind == "rows" && (c.source == "deleted") != theirs).foreach { c =>
      val fm = plan.fragments.find(_.path == c.where).getOrElse {
        val added = new FragmentMerge(c.where)
        plan.fragments += added
        added
      }
      val mask = fm.mask.map(_.clone().asInstanceOf[BitSet]).getOrElse(dst.mask(c.where, table))
      c.rows.foreach(mask.clear)
      fm.mask = Some(mask)
    }
}
