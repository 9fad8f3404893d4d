package org.apache.spark.sql.omnitable

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.connector.catalog.Table
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.connector.write.{RowLevelOperation, RowLevelOperationTable}
import org.apache.spark.sql.execution.datasources.v2.{DataSourceV2Relation, DataSourceV2Strategy}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * The `private[sql]` Spark SQL APIs OmniTable needs, in one place (this package sits inside
 * `org.apache.spark.sql` for that reason only). Pinned to the Spark line the jar is built for.
 */
object SqlInternals {
  io.omnitable.spark.conf.SparkVersionCheck.verified

  /** The V2 predicate Spark pushes into a scan for the filter conjunct `e`, if it pushes one. */
  def translateFilterV2(e: Expression): Option[Predicate] = DataSourceV2Strategy.translateFilterV2(e)

  /** The operation of a row-level statement's target table (`RowLevelOperationTable`), if `t` is one. */
  def rowLevelOperation(t: Table): Option[RowLevelOperation] = t match {
    case RowLevelOperationTable(_, op) => Some(op)
    case _ => None
  }

  /** The analyzed logical plan of `df` (a classic session's DataFrame). */
  def analyzedPlan(df: DataFrame): org.apache.spark.sql.catalyst.plans.logical.LogicalPlan =
    df.asInstanceOf[org.apache.spark.sql.classic.Dataset[_]].queryExecution.analyzed

  /** A DataFrame reading `table` with read `options` (what `spark.read.format(...).load` builds). */
  def dataFrame(spark: SparkSession, table: Table, options: Map[String, String]): DataFrame = {
    val relation = DataSourceV2Relation.create(table, None, None, new CaseInsensitiveStringMap(options.asJava))
    org.apache.spark.sql.classic.Dataset.ofRows(spark.asInstanceOf[org.apache.spark.sql.classic.SparkSession], relation)
  }
}
