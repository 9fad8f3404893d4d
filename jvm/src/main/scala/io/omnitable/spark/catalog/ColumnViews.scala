package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets
import java.security.MessageDigest

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}

/**
 * A declared hot column-group view (python/omnitable/catalog/views.py, docs/governance.md "Hot
 * column-group views"): `columns` (with `_ai_unique_id_`) of a table materialized as the Delta
 * table at `path` (relative to the table directory). `deltaVersion` holds exactly the rows of the
 * batches in `batches` (batch id -> fingerprint); None: never refreshed. `files` (path relative to
 * the view directory, bytes) and `schema` (Spark JSON, without `_view_batch_`) are that version's
 * data files and columns as the refresh recorded them, plain Parquet; None: not recorded (read the
 * Delta table at `deltaVersion`).
 */
final case class ColumnView(
    name: String,
    columns: Seq[String],
    columnIds: Map[String, Int],
    path: String,
    deltaVersion: Option[Long],
    batches: Map[String, String],
    files: Option[Seq[(String, Long)]] = None,
    schema: Option[String] = None)

object ColumnViews {

  /** The `omnitable_meta` key of a table's view records. */
  def metaKey(tableId: String): String = s"views:$tableId"

  /** The Delta partition column of a view (the batch id). */
  val BatchColumn = "_view_batch_"

  private val Json = new ObjectMapper()

  /** The views of a record (JSON object name -> view); an unreadable record holds none. */
  def parse(json: String): Seq[ColumnView] =
    try {
      val root = Json.readTree(json)
      if (root == null || !root.isObject) Nil
      else root.properties().asScala.toSeq.map(e => view(e.getKey, e.getValue)).sortBy(_.name)
    } catch { case NonFatal(_) => Nil }

  private def view(name: String, n: JsonNode): ColumnView = {
    val ids = n.get("column_ids").properties().asScala.map(e => e.getKey -> e.getValue.asInt()).toMap
    val dv = Option(n.get("delta_version")).filterNot(_.isNull).map(_.asLong())
    val batches = Option(n.get("batches")).filterNot(_.isNull).map(_.properties().asScala.map(e =>
      e.getKey -> e.getValue.asText()).toMap).getOrElse(Map.empty)
    val files = Option(n.get("files")).filter(_.isArray).map(_.elements().asScala.map(f =>
      f.get(0).asText() -> f.get(1).asLong()).toSeq)
    ColumnView(
      name,
      n.get("columns").elements().asScala.map(_.asText()).toSeq,
      ids,
      n.get("path").asText(),
      dv,
      batches,
      files,
      Option(n.get("schema")).filter(_.isTextual).map(_.asText())
    )
  }

  /**
   * The canonical text of a batch: its id, then one line `fragment_id|vector_id|file_id,...` per
   * fragment (by id; `-`: no vector; the ids of its visible files carrying a view column, sorted).
   * The same text as python `fingerprint_text`.
   */
  def fingerprintText(batchId: String, fragments: Seq[FragmentEntry]): String = {
    val lines = fragments.sortBy(_.fragmentId).map { f =>
      val vector = f.deletes.fold("-")(_.vectorId)
      s"${f.fragmentId}|$vector|${f.files.map(_.fileId).sorted.mkString(",")}"
    }
    (batchId +: lines).mkString("\n")
  }

  /**
   * Batch id -> SHA-256 (hex) of [[fingerprintText]] for the fragments of a listing scoped to the
   * view's columns (its files are those carrying one of them).
   */
  def fingerprints(fragments: Seq[FragmentEntry]): Map[String, String] =
    fragments.groupBy(_.batchId).map { case (batch, frags) => batch -> sha256(fingerprintText(batch, frags)) }

  private def sha256(text: String): String =
    MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8)).map(b =>
      f"${b & 0xff}%02x").mkString
}
