package io.omnitable.spark.catalog

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper

/**
 * A table's expiry record (catalog/horizon.py `ExpiryRecord`: `omnitable_meta` key
 * `expiry:<table_id>`): per branch, the oldest readable version of its own commits (`horizons`),
 * the pinned versions below a horizon (`kept`) and the latest expire commit (`version`).
 */
final case class ExpiryRecord(horizons: Map[String, Long], kept: Set[Long], version: Long) {

  /** horizon.py `expired`: `v`, committed on `branch`, is below its horizon and pinned by no ref. */
  def expired(branch: String, v: Long): Boolean = horizons.get(branch).exists(h => v < h && !kept(v))
}

object ExpiryRecord {

  /** The record of table `tableId`, if an expire commit wrote one. */
  def read(conn: Jdbc.Conn, tableId: String): Option[ExpiryRecord] =
    Jdbc.query(conn, "SELECT value FROM omnitable_meta WHERE key = ?", s"expiry:$tableId")(_.getString(1))
      .headOption.map { raw =>
        val doc = new ObjectMapper().readTree(raw)
        ExpiryRecord(
          doc.path("horizons").properties().asScala.map(e => e.getKey -> e.getValue.asLong).toMap,
          doc.path("kept").elements().asScala.map(_.asLong).toSet,
          doc.path("version").asLong
        )
      }
}
