package io.omnitable.spark.read.exec

import org.apache.spark.sql.catalyst.expressions.Expression

/**
 * Late materialization of one scan (rule
 * [[io.omnitable.spark.optimizer.LateMaterializeFilteredColumns]]), as executors receive it:
 * `condition` is bound to a batch holding the scan's read columns `predicateColumns` (indices
 * into its read schema, in that order). A reader first reads those columns, keeps the rows
 * where `condition` is true, then reads every column for those rows only. The driver decides it
 * ([[io.omnitable.spark.read.plan.LateMaterializationPlanner]]).
 */
final case class LateMaterialization(condition: Expression, predicateColumns: Array[Int])

object LateMaterialization {

  /**
   * Per fragment, after the predicate columns were read: rows are read selectively when the
   * pages holding the passing rows are at most this share of the bytes...
   */
  val MaxBytesFraction = 0.8

  /** ...or when at most this share of the rows passed (decoding only them pays by itself). */
  val DecodeOnlyMaxFraction = 0.03
}
