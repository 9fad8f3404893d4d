package io.omnitable.spark.write

import java.util.Locale

import io.omnitable.spark.catalog.{NewColumn, SystemColumns, TableSnapshot}
import io.omnitable.spark.errors.WriteErrors
import org.apache.spark.sql.catalyst.expressions.Cast
import org.apache.spark.sql.types.{ByteType, IntegerType, LongType, NullType, ShortType, StructType}

/**
 * The stored columns an append fills from the rows Spark writes, matched by name (Spark's
 * case-insensitive resolution), as python/omnitable/ingest/conform.py checks a DataFrame:
 * unknown columns, the system columns, duplicates, missing non-nullable columns and types that
 * Spark's INSERT would not store either (ANSI store assignment: numbers to numbers, never text to
 * numbers) are refused before any file is written; supplied `_ai_unique_id_` values must be
 * integers ([[suppliedIds]]; the tasks write them in place of generated ones). A value that does not fit fails its task
 * (nothing is committed). Columns the data leaves out get no file (they read NULL).
 */
private[write] object WriteSchema {

  /**
   * The ordinal of supplied `_ai_unique_id_` values in `input` (None: OmniTable generates them),
   * after checking they are BIGINT (python/omnitable/ingest/local.py: a non-null int64; a narrower
   * integer, as SQL literals are, widens).
   */
  def suppliedIds(snap: TableSnapshot, input: StructType): Option[Int] = {
    val i = input.fieldNames.indexWhere(_.equalsIgnoreCase(SystemColumns.RowId))
    if (i < 0) None
    else {
      val found = input(i).dataType
      if (!Seq(LongType, IntegerType, ShortType, ByteType).contains(found)) {
        throw WriteErrors.mistypedRowIds(snap.table.name, found.sql)
      }
      Some(i)
    }
  }

  /** Columns by group (`base` first, `_ai_unique_id_` first in it), groups in table order. */
  def targets(snap: TableSnapshot, input: StructType): Seq[(String, Seq[TargetColumn])] =
    targets(snap, input, None)._1

  /**
   * As [[targets]]; with `merge` (mergeSchema: `Some(group option)`), the input's unknown columns
   * are new nullable columns of the table (`define` checks them and picks their group), stored
   * under their names (their physical names); their ids are given by the append's commit, which
   * adds them ([[NewColumn]]s, second result).
   */
  def targets(snap: TableSnapshot, input: StructType, merge: Option[Seq[String] => Seq[NewColumn]])
      : (Seq[(String, Seq[TargetColumn])], Seq[NewColumn]) = {
    val table = snap.table.name
    val key = (s: String) => s.toLowerCase(Locale.ROOT)
    val dupes = input.fieldNames.groupBy(key).collect { case (_, ns) if ns.length > 1 => ns.head }.toSeq
    if (dupes.nonEmpty) throw WriteErrors.duplicateColumns(table, dupes.sorted)
    input.fieldNames.find(n => key(n) == key(SystemColumns.AppendName))
      .foreach(n => throw WriteErrors.systemColumn(table, n))
    val user = snap.userColumns
    val byName = user.map(c => key(c.name) -> c).toMap
    val unknown = input.fieldNames.filterNot(n => byName.contains(key(n)) || key(n) == key(SystemColumns.RowId))
    if (unknown.nonEmpty && merge.isEmpty) throw WriteErrors.unknownColumns(table, unknown.toSeq)
    val added = merge.filter(_ => unknown.nonEmpty).map(define => define(unknown.toSeq)).getOrElse(Nil)
    val inputIndex = input.fieldNames.zipWithIndex.map { case (n, i) => key(n) -> i }.toMap
    val missing = user.filter(c => !c.nullable && !inputIndex.contains(key(c.name))).map(_.name)
    if (missing.nonEmpty) throw WriteErrors.missingColumns(table, missing)
    val present = user.filter(c => inputIndex.contains(key(c.name))).map { c =>
      val i = inputIndex(key(c.name))
      val found = input(i).dataType
      if (found != c.dataType && found != NullType && !Cast.canANSIStoreAssign(found, c.dataType)) {
        throw WriteErrors.mistypedColumn(table, c.name, found.sql, c.dataType.sql)
      }
      TargetColumn(c.name, c.columnId, c.physicalName, c.groupName, c.dataType, i, c.nullable)
    }
    val id = snap.rowIdColumn
    val idCol = TargetColumn(id.name, id.columnId, id.physicalName, id.groupName, id.dataType, -1, nullable = false)
    val fresh = added.map { c =>
      val i = inputIndex(key(c.name))
      TargetColumn(c.name, -1, c.name, c.group, input(i).dataType, i, nullable = true)
    }
    val all = (idCol +: present) ++ fresh
    val order = all.map(_.group).distinct
    (order.map(g => g -> all.filter(_.group == g)), added)
  }

  /**
   * The columns a MERGE's inserted batch fills from the rows of its row-level write (`input`:
   * every table column, the system ones ignored): every raw user column (those no INSERT assigns
   * hold NULL), `_ai_unique_id_` generated; by group as [[targets]]. Spark gives the columns an
   * INSERT does not assign NULL, so a feature's output column is `optional`, in a file of its own
   * (after the raw groups): a fragment keeps it only when its rows hold a non-NULL value in it
   * ([[FragmentWriter]]), as Python's `Table.append` stores supplied values; all NULL, the new
   * rows are `missing` for the feature until a backfill computes them, as the rows of Python's
   * upsert (a file of NULLs would make them `stale`).
   */
  def insertTargets(snap: TableSnapshot, input: StructType): Seq[(String, Seq[TargetColumn])] = {
    val id = snap.rowIdColumn
    val idCol = TargetColumn(id.name, id.columnId, id.physicalName, id.groupName, id.dataType, -1, nullable = false)
    val present = snap.userColumns.flatMap { c =>
      Some(input.fieldNames.indexOf(c.name)).filter(_ >= 0).map { i =>
        TargetColumn(c.name, c.columnId, c.physicalName, c.groupName, c.dataType, i, c.nullable, c.feature.nonEmpty)
      }
    }
    val (outputs, raw) = present.partition(_.optional)
    val all = idCol +: raw
    all.map(_.group).distinct.map(g => g -> all.filter(_.group == g)) ++ outputs.map(c => c.group -> Seq(c))
  }

}
