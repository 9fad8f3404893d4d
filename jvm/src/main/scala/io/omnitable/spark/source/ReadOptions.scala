package io.omnitable.spark.source

import java.time.format.DateTimeParseException
import java.util.Locale

import io.omnitable.spark.catalog.{CatalogReader, SnapshotSpec}
import io.omnitable.spark.errors.OmniTableErrors
import io.omnitable.spark.read.plan.TableHandle

/**
 * The options of one `spark.read.format("omnitable")` read that select what to read (settings
 * such as batch_size live in [[io.omnitable.spark.OmniTableConf]]). Keys are case-insensitive.
 * `batches` and `fragments` (comma lists) restrict the read to those batches / fragment ids.
 */
final case class ReadOptions(
    table: String,
    snapshot: SnapshotSpec,
    batches: Option[Seq[String]],
    fragments: Option[Seq[String]] = None) {

  /** Loads [[table]] at the snapshot these options name; checks the batches exist. */
  def load(reader: CatalogReader, raw: Map[String, String]): TableHandle =
    TableHandle(reader, reader.loadTable(table, snapshot, batches), batches, fragments, raw)
}

object ReadOptions {
  val Table: String = "path"
  val VersionAsOf: String = "versionAsOf"
  val TimestampAsOf: String = "timestampAsOf"
  val Branch: String = "branch"
  val Tag: String = "tag"
  val Batches: String = "batches"
  val Fragments: String = "fragments"

  def parse(options: Map[String, String]): ReadOptions = {
    val lowered = options.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }
    def get(key: String): Option[String] = lowered.get(key.toLowerCase(Locale.ROOT)).map(_.trim).filter(_.nonEmpty)
    val table = get(Table).orElse(get("table")).getOrElse(throw OmniTableErrors.invalidOption(
      Table,
      "",
      "name the table to read: spark.read.format(\"omnitable\").load(\"<table>\")"))
    val version = get(VersionAsOf).map { v =>
      v.toLongOption.filter(_ >= 0).getOrElse(throw OmniTableErrors.invalidOption(
        VersionAsOf,
        v,
        "expected a version number >= 0"))
    }
    val timestamp = get(TimestampAsOf).map(parseTimestamp)
    def list(key: String, what: String): Option[Seq[String]] = get(key).map { raw =>
      val items = raw.split(",").toSeq.map(_.trim).filter(_.nonEmpty)
      if (items.isEmpty) throw OmniTableErrors.invalidOption(key, raw, s"expected a comma-separated list of $what")
      items
    }
    ReadOptions(
      table,
      SnapshotSpec(branch = get(Branch), tag = get(Tag), version = version, asOfMicros = timestamp),
      list(Batches, "batch names"),
      list(Fragments, "fragment ids"))
  }

  /**
   * An ISO-8601 instant ('2026-11-29T11:24:37Z', '2026-11-29 11:24:37.5+01:00'; no zone means UTC)
   * or epoch milliseconds, to epoch microseconds.
   */
  private def parseTimestamp(v: String): Long = v.toLongOption.map(_ * 1000L).getOrElse {
    val text = v.trim.replaceFirst("^(\\d{4}-\\d{2}-\\d{2}) ", "$1T")
    val instant =
      try java.time.OffsetDateTime.parse(text).toInstant
      catch {
        case _: DateTimeParseException =>
          try java.time.LocalDateTime.parse(text).toInstant(java.time.ZoneOffset.UTC)
          catch {
            case e: DateTimeParseException =>
              throw OmniTableErrors.invalidOption(
                TimestampAsOf,
                v,
                "expected an ISO-8601 instant such as 2026-11-29T11:24:37Z, or epoch milliseconds",
                e)
          }
      }
    instant.getEpochSecond * 1000000L + instant.getNano / 1000L
  }
}
