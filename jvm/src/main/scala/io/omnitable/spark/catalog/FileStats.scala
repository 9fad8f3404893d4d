package io.omnitable.spark.catalog

import com.fasterxml.jackson.core.JacksonException
import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.errors.OmniTableErrors

/**
 * A file's `files.stats`, parsed: one entry per column of its set in `position` order, each
 * `[null_count, min, max]` (any of them null) or null (schema.sql, `files`). Entries are
 * decoded when asked for.
 */
private[catalog] final class FileStats private (entries: JsonNode, warehouse: String, fileId: String) {

  /** The statistics at `position` ([[FileColumnStats.Unknown]] for a null entry). */
  def at(position: Int, column: Int): FileColumnStats = {
    if (position < 0 || position >= entries.size) {
      throw corrupt(s"column $column is at position $position of its set but the file has ${entries.size} entries")
    }
    val entry = entries.get(position)
    if (entry.isNull) FileColumnStats.Unknown
    else if (!entry.isArray || entry.size != 3) throw corrupt(s"entry $position is not [null_count, min, max]")
    else FileColumnStats(nullCount(entry.get(0), position), text(entry.get(1), position), text(entry.get(2), position))
  }

  private def nullCount(node: JsonNode, position: Int): Option[Long] =
    if (node.isNull) None
    else if (node.isIntegralNumber && node.canConvertToLong) Some(node.longValue)
    else throw corrupt(s"the null count of entry $position is not an integer")

  private def text(node: JsonNode, position: Int): Option[String] =
    if (node.isNull) None
    else if (node.isTextual) Some(node.textValue)
    else throw corrupt(s"a bound of entry $position is not text")

  private def corrupt(detail: String): Throwable = FileStats.corrupt(warehouse, fileId, detail, null)
}

private[catalog] object FileStats {

  private val Json = new ObjectMapper()

  /** Parses `json`, a non-NULL `files.stats` of file `fileId` (a corrupt-catalog error unless a JSON array). */
  def parse(json: String, warehouse: String, fileId: String): FileStats = {
    val node =
      try Json.readTree(json)
      catch { case e: JacksonException => throw corrupt(warehouse, fileId, "it is not JSON", e) }
    if (node == null || !node.isArray) throw corrupt(warehouse, fileId, "it is not a JSON array", null)
    new FileStats(node, warehouse, fileId)
  }

  private def corrupt(warehouse: String, fileId: String, detail: String, cause: Throwable): Throwable =
    OmniTableErrors.corruptCatalog(
      warehouse,
      s"the statistics of file '$fileId' (files.stats) are unreadable: $detail",
      cause)
}
