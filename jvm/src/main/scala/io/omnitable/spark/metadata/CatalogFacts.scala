package io.omnitable.spark.metadata

import scala.collection.mutable
import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{FeatureRow, FileRow, FragmentRow, LineageRow, MetadataQueries, TableSnapshot}

/** A registered feature's current version: its row and its definition's inputs and outputs (in order). */
private[spark] final case class CurrentFeature(
    row: FeatureRow,
    inputs: Seq[String],
    outputs: Seq[(String, String)]) {
  def id: String = s"${row.name}@${row.version}"
}

/** The file providing one column of one fragment, and the feature version that produced it there. */
private[spark] final case class Provider(file: FileRow, featureVersion: Option[String])

/**
 * Facts several metadata tables derive from the catalog rows, computed as the Python API does
 * (python/omnitable/features/registry.py, features/state.py, features/status.py).
 */
private[spark] object CatalogFacts {

  private val Json = new com.fasterxml.jackson.databind.ObjectMapper()

  /**
   * The current version of each feature, by name (`current_features`): of the registrations in
   * commit order, the last whose outputs are all active columns (`active`).
   */
  def currentFeatures(rows: Seq[FeatureRow], active: Set[String]): Seq[CurrentFeature] = {
    val out = mutable.LinkedHashMap.empty[String, CurrentFeature]
    rows.foreach { row =>
      val definition = Json.readTree(row.definition)
      val inputs = definition.path("inputs").elements().asScala.map(_.asText()).toSeq
      val outputs = definition.path("outputs").properties().asScala.map(e => e.getKey -> e.getValue.asText()).toSeq
      if (outputs.forall(o => active.contains(o._1))) out(row.name) = CurrentFeature(row, inputs, outputs)
    }
    out.values.toSeq.sortBy(_.row.name)
  }

  /** The read set of a lineage row: input column -> input file id (None when it had none). */
  def readSet(inputs: String): Map[String, Option[String]] =
    Json.readTree(inputs).elements().asScala.map { i =>
      val file = i.path("file_id")
      i.path("column").asText() -> Option.when(!file.isNull && !file.isMissingNode)(file.asText())
    }.toMap

  /**
   * The visible fragments of `snap` in table order and, for each of them and each of
   * `columnIds`, the providing file: the visible file carrying the column with the highest
   * added version (the highest file id among equals, as the scan's `fileFor`).
   */
  def providers(q: MetadataQueries, snap: TableSnapshot, columnIds: Set[Int])
      : (Seq[FragmentRow], Map[(String, Int), Provider]) = {
    val fragments = mutable.ArrayBuffer.empty[FragmentRow]
    q.foreachFragment(snap)(fragments += _)
    if (columnIds.isEmpty) return (fragments.toSeq, Map.empty)
    val sets = q.columnSets(snap.table).map { case (id, cs) => id -> cs.filter(c => columnIds.contains(c.columnId)) }
    val best = mutable.HashMap.empty[(String, Int), Provider]
    q.foreachFile(snap) { f =>
      sets.getOrElse(f.setId, Nil).foreach { c =>
        val key = (f.fragmentId, c.columnId)
        best.get(key) match {
          case Some(b)
              if b.file.addedVersion > f.addedVersion ||
                (b.file.addedVersion == f.addedVersion && b.file.fileId.compareTo(f.fileId) >= 0) =>
          case _ => best(key) = Provider(f, c.featureVersion)
        }
      }
    }
    (fragments.toSeq, best.toMap)
  }

  /** The lineage rows of the providing files only, by (fragment, column). */
  def currentLineage(
      lineage: Seq[LineageRow],
      providers: Map[(String, Int), Provider]): Map[(String, Int), LineageRow] =
    lineage.filter(l => providers.get((l.fragmentId, l.columnId)).exists(_.file.fileId == l.fileId))
      .map(l => (l.fragmentId, l.columnId) -> l).toMap
}
