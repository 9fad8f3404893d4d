package io.omnitable.spark.catalog

import java.util.BitSet

import io.omnitable.spark.errors.{OmniTableErrors, ProcedureErrors}
import org.apache.hadoop.conf.Configuration

/**
 * python/omnitable/dataops/merge_rows.py `check_keys` for a keyed table's three-way merge: the
 * live keys of the batches the source brings in must not be keys of rows the target inserted
 * since the merge base (probed in the fragments' key indexes, [[KeyIndex]]). The source rows
 * holding such keys are recorded in `plan.keyDrops`: `ours` copies the batch without them, `theirs`
 * is refused ([[MergeKeys.refuseTheirs]]), `fail` commits nothing.
 */
private[catalog] object MergeKeys {

  /** The `key` conflicts of `plan.copyBatches` (one per batch: how many of its keys the target inserted too). */
  def check(
      tableUri: String,
      table: String,
      plan: MergePlan,
      base: MergeView,
      src: MergeView,
      dst: MergeView,
      conf: Configuration): Seq[MergeConflictEntry] = {
    val added = dst.frags.keys.filterNot(base.frags.contains).toSeq
    if (plan.copyBatches.isEmpty || added.isEmpty) return Nil
    val slots = added.map { p =>
      (p, KeyIndex.load(KeyIndex.uri(tableUri, p), dst.frags(p).rowCount, conf), dst.mask(p, table))
    }
    def insertedByTarget(key: KeyHash): Boolean = {
      val live = slots.filter { case (_, index, deleted) =>
        val off = index.find(key)
        off >= 0 && !deleted.get(off.toInt)
      }
      if (live.size > 1) throw OmniTableErrors.duplicateKeyInIndex(live(1)._1)
      live.nonEmpty
    }
    plan.copyBatches.toSeq.flatMap { name =>
      val taken = src.batchPaths.getOrElse(name, Nil).map { path =>
        val index = KeyIndex.load(KeyIndex.uri(tableUri, path), src.frags(path).rowCount, conf)
        val deleted = src.mask(path, table)
        val hit = (0 until index.size).filter { i =>
          val off = index.offset(i).toInt
          !deleted.get(off) && insertedByTarget(KeyHash(index.h1(i), index.h2(i)))
        }.map(i => index.offset(i).toInt)
        if (hit.nonEmpty) plan.keyDrops(path) = hit
        hit.size
      }.sum
      if (taken > 0) Some(MergeConflictEntry("key", name, None, s"$taken key(s) inserted", "inserted too")) else None
    }
  }

  /** merge.py `_resolve_rows`: `theirs` cannot take a batch whose keys the target inserted too. */
  def refuseTheirs(plan: MergePlan): Unit = plan.conflicts.find(_.kind == "key").foreach { c =>
    throw ProcedureErrors.invalidOperation(
      s"Cannot merge batch '${c.where}' with strategy='theirs': both branches inserted the same keys; delete them " +
        "on one branch and merge again")
  }

  /** The source fragment's deleted rows plus the rows `ours` drops for their keys. */
  def mask(src: MergeView, path: String, table: String, drops: Seq[Int]): BitSet = {
    val out = src.mask(path, table).clone().asInstanceOf[BitSet]
    drops.foreach(out.set)
    out
  }
}
