package io.omnitable.spark.read.plan

import io.omnitable.spark.catalog.{CatalogReader, TableSnapshot}

/**
 * A table bound to one snapshot, plus how to reach its catalog again (to list fragments when a
 * scan is planned) and the options it was loaded with (built by
 * [[io.omnitable.spark.source.ReadOptions.load]]). Driver-side only.
 */
final case class TableHandle(
    reader: CatalogReader,
    snapshot: TableSnapshot,
    batches: Option[Seq[String]],
    fragments: Option[Seq[String]],
    options: Map[String, String])
