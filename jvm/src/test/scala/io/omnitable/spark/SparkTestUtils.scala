package io.omnitable.spark

import org.apache.spark.sql.{DataFrame, Row}
import org.scalatest.Assertions

/** Comparing DataFrames row for row (order-insensitive unless asked), with readable failures. */
object SparkTestUtils extends Assertions {

  /** Rows as comparable strings (nested values, binary and NaN compare by content). */
  def canonical(df: DataFrame): Seq[String] = df.collect().toSeq.map(render)

  private def render(v: Any): String = v match {
    case null => "null"
    case r: Row => r.toSeq.map(render).mkString("{", ",", "}")
    case b: Array[Byte] => b.map("%02x".format(_)).mkString("0x", "", "")
    case m: scala.collection.Map[_, _] =>
      m.toSeq.map { case (k, x) => render(k) + "->" + render(x) }.sorted.mkString("[", ",", "]")
    case s: scala.collection.Seq[_] => s.map(render).mkString("[", ",", "]")
    case d: java.math.BigDecimal => d.toPlainString
    case other => other.toString
  }

  def assertSameRows(actual: DataFrame, expected: DataFrame): Unit = {
    assert(actual.schema.fieldNames.toSeq == expected.schema.fieldNames.toSeq, "column names differ")
    val a = canonical(actual).sorted
    val e = canonical(expected).sorted
    assert(a.size == e.size, s"row counts differ: ${a.size} vs ${e.size}")
    val diff = a.zip(e).find { case (x, y) => x != y }
    assert(
      diff.isEmpty,
      s"first differing row:\n  actual   ${diff.map(_._1).orNull}\n  expected ${diff.map(_._2).orNull}")
  }
}
