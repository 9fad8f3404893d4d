package io.omnitable.spark.read.exec

import org.apache.spark.sql.vectorized.ColumnVector

/**
 * Walks the rows a reader returns from one column file. The zip asks every cursor how many
 * rows it has ready, takes that many from each and advances them all by that amount.
 */
private[exec] trait RowCursor extends AutoCloseable {

  /** Rows ready from the current position (at least 1 while rows remain; may decode the next batch). */
  def available(): Int

  /** Field `i` of the file for the next `n` rows (a view, valid until [[advance]] passes them). */
  def column(i: Int, n: Int): ColumnVector

  def advance(n: Int): Unit
}
