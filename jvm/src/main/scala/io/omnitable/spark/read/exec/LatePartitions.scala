package io.omnitable.spark.read.exec

import org.apache.spark.sql.types.{LongType, StructField, StructType}

/** Derives the partitions late materialization reads first. */
private[exec] object LatePartitions {

  /**
   * The part of `part` that reads only the read columns `predicate` (indices into `schema`),
   * followed by `_ai_row_offset_`; files keep only the fields those columns need. Returns the
   * partition and its read schema.
   */
  def predicatePart(
      part: FragmentInputPartition,
      schema: StructType,
      predicate: Array[Int]): (FragmentInputPartition, StructType) = {
    val wanted = predicate.toSeq.map(k => part.sources(k))
    val usedFiles = wanted.collect { case ColumnSource.FromFile(f, _) => f }.distinct.sorted
    val fields =
      usedFiles.map(f => f -> wanted.collect { case ColumnSource.FromFile(`f`, i) => i }.distinct.sorted).toMap
    val files = usedFiles.map { f =>
      val slice = part.files(f)
      slice.copy(requestedSchema = StructType(fields(f).map(slice.requestedSchema(_))))
    }
    val sources = wanted.map {
      case ColumnSource.FromFile(f, i) => ColumnSource.FromFile(usedFiles.indexOf(f), fields(f).indexOf(i))
      case other => other
    } :+ ColumnSource.RowOffset
    val innerSchema = StructType(predicate.toSeq.map(schema(_)) :+ StructField("_ai_row_offset_", LongType, false))
    (part.copy(files = files.toArray, sources = sources.toArray), innerSchema)
  }
}
