package io.omnitable.spark.optimizer

import org.apache.spark.sql.catalyst.expressions.{
  And,
  AttributeReference,
  EqualNullSafe,
  EqualTo,
  Expression,
  GreaterThan,
  Literal
}
import org.apache.spark.sql.catalyst.plans.logical.{Assignment, DeleteAction, InsertAction, MergeAction, UpdateAction}
import org.apache.spark.sql.types.{DoubleType, LongType, StringType}
import org.scalatest.funsuite.AnyFunSuite

/** [[KeyedMerge.recognize]] on resolved statement parts: what the keyed path takes and what it leaves. */
class KeyedMergeSuite extends AnyFunSuite {

  private val (tRegion, tId, tV) =
    (
      AttributeReference("region", StringType)(),
      AttributeReference("id", LongType)(),
      AttributeReference("v", DoubleType)())
  private val (sRegion, sId, sV) =
    (
      AttributeReference("region", StringType)(),
      AttributeReference("id", LongType)(),
      AttributeReference("v", DoubleType)())
  private val target = Seq(tRegion, tId, tV)
  private val source = Seq(sRegion, sId, sV)
  private val key = Seq("region", "id")
  private val update = UpdateAction(None, Seq(Assignment(tRegion, tRegion), Assignment(tId, tId), Assignment(tV, sV)))
  private val insert = InsertAction(None, Seq(Assignment(tRegion, sRegion), Assignment(tId, sId), Assignment(tV, sV)))

  private def recognize(
      on: Expression,
      matched: Seq[MergeAction] = Seq(update),
      notMatched: Seq[MergeAction] = Seq(insert),
      bySource: Seq[MergeAction] = Nil) =
    KeyedMerge.recognize(target, source, on, matched, notMatched, bySource, key)

  test("the key equality in any order of conjuncts and sides, key pairs in the table's key order") {
    for (on <- Seq(
        And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)),
        And(EqualTo(sId, tId), EqualTo(sRegion, tRegion)),
        And(EqualTo(tId, sId), EqualTo(sRegion, tRegion)))) {
      val r = recognize(on).fold(why => fail(s"$on: $why"), identity)
      assert(r.keys == Seq(tRegion -> sRegion, tId -> sId) && r.updates == Seq(update) && r.inserts == Seq(insert))
    }
    // a source column of another name, only updates, only inserts, clause conditions
    assert(recognize(And(EqualTo(tRegion, sV), EqualTo(tId, sId))).isRight)
    assert(recognize(And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)), notMatched = Nil).isRight)
    val cond = Some(GreaterThan(sV, Literal(0.0)))
    assert(recognize(
      And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)),
      matched = Nil,
      notMatched = Seq(insert.copy(condition = cond))).isRight)
    assert(recognize(
      And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)),
      matched = Seq(update.copy(condition = cond))).isRight)
    assert(KeyedMerge.recognize(target, source, EqualTo(tId, sId), Seq(update), Nil, Nil, Seq("ID")).isRight)
  }

  test("an ON condition that is not exactly the key equality is not a keyed merge") {
    val notKey = "an ON condition that is not exactly the key equality (region, id)"
    for (on <- Seq(
        EqualTo(tId, sId), // part of the key
        And(And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)), GreaterThan(sV, Literal(0.0))), // more
        And(EqualTo(tRegion, sRegion), EqualTo(tV, sId)), // another target column
        And(EqualTo(tRegion, sRegion), EqualNullSafe(tId, sId)), // not =
        And(EqualTo(tRegion, sRegion), EqualTo(tId, tId)), // both sides the target
        And(EqualTo(tRegion, sRegion), EqualTo(tId, Literal(1L))),
        And(And(EqualTo(tRegion, sRegion), EqualTo(tId, sId)), EqualTo(tId, sV))
      )) // a key column twice
      assert(recognize(on) == Left(notKey), on)
  }

  test("clauses other than WHEN MATCHED UPDATE and WHEN NOT MATCHED INSERT are not a keyed merge") {
    val on = And(EqualTo(tRegion, sRegion), EqualTo(tId, sId))
    assert(recognize(on, matched = Seq(DeleteAction(None))) ==
      Left("a WHEN MATCHED clause that does not UPDATE (e.g. DELETE)"))
    assert(recognize(on, bySource = Seq(DeleteAction(None))) == Left("a WHEN NOT MATCHED BY SOURCE clause"))
    val changesKey =
      UpdateAction(None, Seq(Assignment(tRegion, tRegion), Assignment(tId, Literal(5L)), Assignment(tV, sV)))
    assert(recognize(on, matched = Seq(changesKey)) == Left("an UPDATE assigning a key column"))
    // assigning the key its own source value changes nothing: allowed
    val same = UpdateAction(None, Seq(Assignment(tRegion, sRegion), Assignment(tId, sId), Assignment(tV, sV)))
    assert(recognize(on, matched = Seq(same)).isRight)
  }

  test("the key columns of table.key: a JSON list or one name") {
    assert(KeyedMerge.keyColumns(Map("table.key" -> """["region","id"]""")) == Seq("region", "id"))
    assert(KeyedMerge.keyColumns(Map("table.key" -> "\"id\"")) == Seq("id"))
    assert(KeyedMerge.keyColumns(Map.empty) == Nil)
  }
}
