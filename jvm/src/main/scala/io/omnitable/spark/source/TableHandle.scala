package io.omnitable.spark.source

import io.omnitable.spark.catalog.{CatalogReader, TableSnapshot}
import io.omnitable.spark.errors.OmniTableErrors

/**
 * A table bound to one snapshot, plus how to reach its catalog again (to list fragments when a
 * scan is planned) and the options it was loaded with. Driver-side only.
 */
final case class TableHandle(
    reader: CatalogReader,
    snapshot: TableSnapshot,
    batches: Option[Seq[String]],
    fragments: Option[Seq[String]],
    options: Map[String, String])

object TableHandle {

  /** Loads `options.table` at the snapshot the options name; checks the batches exist. */
  def load(reader: CatalogReader, options: ReadOptions, raw: Map[String, String]): TableHandle = {
    val snapshot = reader.loadTable(options.table, options.snapshot)
    options.batches.foreach { wanted =>
      val missing = wanted.filterNot(snapshot.batchNames.contains)
      if (missing.nonEmpty) throw OmniTableErrors.batchNotFound(options.table, missing, snapshot.batchNames)
    }
    TableHandle(reader, snapshot, options.batches, options.fragments, raw)
  }
}
