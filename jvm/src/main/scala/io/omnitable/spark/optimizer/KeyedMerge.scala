package io.omnitable.spark.optimizer

import java.util.Locale

import io.omnitable.spark.errors.WriteErrors
import io.omnitable.spark.source.OmniTableTable
import io.omnitable.spark.write.RowChanges
import org.apache.spark.sql.catalyst.analysis.EliminateSubqueryAliases
import org.apache.spark.sql.catalyst.expressions.{And, Attribute, AttributeSet, EqualTo, Expression}
import org.apache.spark.sql.catalyst.plans.logical.{Assignment, InsertAction, MergeAction, MergeIntoTable, UpdateAction}
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Recognises a `MERGE INTO` a keyed table (property `table.key`) that the keyed path can commit as
 * Python's `Table.upsert` does (docs/spark.md, "Keyed tables in the JVM"): the ON condition is
 * exactly the equality of every key column of the target with one source column (a conjunction of
 * `t.k = s.x`, in any order of the conjuncts and of the sides, each key column once, nothing
 * else); the clauses are only `WHEN MATCHED [AND c] THEN UPDATE SET …` (assigning no key column
 * another value) and `WHEN NOT MATCHED [AND c] THEN INSERT …`. Anything else is not a keyed merge
 * (`Left` says why) and keeps today's path or error. Runs on a resolved statement whose UPDATEs are
 * aligned with the target's columns ([[ResolveOmniTableMerge]]).
 */
object KeyedMerge {

  /**
   * A recognised keyed merge: `keys` pairs each key column of the target (in the table's key
   * order) with the source column the ON condition equals it to.
   */
  final case class Recognized(keys: Seq[(Attribute, Attribute)], updates: Seq[UpdateAction], inserts: Seq[InsertAction])

  /** The key columns of a keyed table (`table.key`: a JSON list of names, or one name); empty when not keyed. */
  def keyColumns(properties: Map[String, String]): Seq[String] = RowChanges.keyColumns(properties)

  /**
   * Refuses (`OMNITABLE_KEYED_TABLE`, saying what is allowed) a resolved MERGE into a keyed
   * OmniTable table that inserts rows and is not a keyed merge ([[recognize]]), or whose UPDATE
   * assigns a key column a value other than its own; other tables and statements pass. Called by
   * [[ResolveOmniTableMerge]] before it aligns the clauses.
   */
  def check(m: MergeIntoTable): Unit = target(m).foreach { t =>
    val props = t.handle.snapshot.table.properties
    val key = keyColumns(props)
    def refuse(why: String): Nothing = throw WriteErrors.keyedMerge(t.name(), props("table.key"), why)
    if (key.nonEmpty) recognize(m, key) match {
      case Left(why) if m.notMatchedActions.nonEmpty => refuse(why)
      case Left(_) if assignsKey(m, key) => refuse("an UPDATE assigning a key column")
      case _ =>
    }
  }

  /** The MERGE's target is a keyed OmniTable table. */
  def keyed(m: MergeIntoTable): Boolean =
    target(m).exists(t => keyColumns(t.handle.snapshot.table.properties).nonEmpty)

  private def target(m: MergeIntoTable): Option[OmniTableTable] = EliminateSubqueryAliases(m.targetTable) match {
    case r: DataSourceV2Relation =>
      r.table match {
        case t: OmniTableTable => Some(t)
        case _ => None
      }
    case _ => None
  }

  /** An UPDATE clause assigns a key column something other than its own value. */
  private def assignsKey(m: MergeIntoTable, key: Seq[String]): Boolean =
    (m.matchedActions ++ m.notMatchedBySourceActions).exists {
      case u: UpdateAction =>
        u.assignments.exists {
          case Assignment(a: Attribute, value) => key.exists(_.equalsIgnoreCase(a.name)) && !value.semanticEquals(a)
          case _ => false
        }
      case _ => false
    }

  def recognize(m: MergeIntoTable, key: Seq[String]): Either[String, Recognized] =
    recognize(
      m.targetTable.output,
      m.sourceTable.output,
      m.mergeCondition,
      m.matchedActions,
      m.notMatchedActions,
      m.notMatchedBySourceActions,
      key)

  /** As above, from the parts of the statement (target and source columns, condition, clauses). */
  def recognize(
      target: Seq[Attribute],
      source: Seq[Attribute],
      condition: Expression,
      matched: Seq[MergeAction],
      notMatched: Seq[MergeAction],
      notMatchedBySource: Seq[MergeAction],
      key: Seq[String]): Either[String, Recognized] =
    for {
      pairs <- keyEquality(AttributeSet(target), AttributeSet(source), condition, key)
      updates <- onlyUpdates(matched, pairs)
      inserts <- onlyInserts(notMatched)
      _ <- if (notMatchedBySource.isEmpty) Right(()) else Left("a WHEN NOT MATCHED BY SOURCE clause")
    } yield Recognized(pairs, updates, inserts)

  private def lower(s: String): String = s.toLowerCase(Locale.ROOT)

  /** (target key column, source column) in key order, when `condition` is exactly the key equality. */
  private def keyEquality(target: AttributeSet, source: AttributeSet, condition: Expression, key: Seq[String])
      : Either[String, Seq[(Attribute, Attribute)]] = {
    val notKey = Left(s"an ON condition that is not exactly the key equality (${key.mkString(", ")})")
    val pairs = conjuncts(condition).map {
      case EqualTo(a: Attribute, b: Attribute) if target.contains(a) && source.contains(b) => Some(a -> b)
      case EqualTo(a: Attribute, b: Attribute) if target.contains(b) && source.contains(a) => Some(b -> a)
      case _ => None
    }
    if (pairs.exists(_.isEmpty)) return notKey
    val byName = pairs.flatten.groupBy { case (t, _) => lower(t.name) }
    val keyNames = key.map(lower)
    if (byName.keySet != keyNames.toSet || byName.values.exists(_.size != 1) || pairs.size != key.size) notKey
    else Right(keyNames.map(k => byName(k).head))
  }

  private def conjuncts(e: Expression): Seq[Expression] = e match {
    case And(l, r) => conjuncts(l) ++ conjuncts(r)
    case other => Seq(other)
  }

  /** Every WHEN MATCHED clause an UPDATE whose assignments keep each key column (itself or its source equal). */
  private def onlyUpdates(matched: Seq[MergeAction], keys: Seq[(Attribute, Attribute)])
      : Either[String, Seq[UpdateAction]] = {
    val updates = matched.collect { case u: UpdateAction => u }
    if (updates.size != matched.size) return Left("a WHEN MATCHED clause that does not UPDATE (e.g. DELETE)")
    val changesKey = updates.exists(_.assignments.exists { case Assignment(col, value) =>
      keys.exists { case (t, s) =>
        col.references.contains(t) && !(value.semanticEquals(t) || value.semanticEquals(s))
      }
    })
    if (changesKey) Left("an UPDATE assigning a key column") else Right(updates)
  }

  private def onlyInserts(notMatched: Seq[MergeAction]): Either[String, Seq[InsertAction]] = {
    val inserts = notMatched.collect { case i: InsertAction => i }
    if (inserts.size == notMatched.size) Right(inserts) else Left("a WHEN NOT MATCHED clause that does not INSERT")
  }
}
