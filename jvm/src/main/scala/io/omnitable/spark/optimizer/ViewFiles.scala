package io.omnitable.spark.optimizer

import scala.util.control.NonFatal

import io.omnitable.spark.catalog.ColumnView
import org.apache.hadoop.fs.{FileStatus, Path}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Expression
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.execution.datasources.{
  FileIndex,
  FileStatusWithMetadata,
  HadoopFsRelation,
  LogicalRelation,
  PartitionDirectory
}
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * A fresh view read straight from the data files its refresh recorded (python
 * `governance/views.py` `_data_files`): a Parquet relation over exactly those files, with the
 * recorded schema. It skips what a Delta read costs per query (the Delta log replay, the file
 * listing and data-skipping job) and lists nothing: the files of a Delta version never change.
 * Filters above it are pushed into the Parquet scan (row groups and pages), as for any file source.
 */
object ViewFiles {

  /** The relation reading `view`'s recorded files under table directory `tableUri`; None when the record has no files or schema, or the schema does not parse. */
  def relation(tableUri: String, view: ColumnView): Option[LogicalPlan] =
    for {
      files <- view.files
      json <- view.schema
      schema <- parse(json)
    } yield {
      val spark = SparkSession.active
      val root = new Path(s"$tableUri/${view.path}")
      val fs = root.getFileSystem(spark.sessionState.newHadoopConf())
      val dir = fs.makeQualified(root)
      val index = new RecordedFileIndex(dir, files.map { case (rel, size) => new Path(dir, rel) -> size })
      val relation = HadoopFsRelation(index, new StructType(), schema, None, new ParquetFileFormat(), Map.empty)(spark)
      LogicalRelation(relation, isStreaming = false)
    }

  private def parse(json: String): Option[StructType] =
    try DataType.fromJson(json) match {
        case s: StructType => Some(s)
        case _ => None
      }
    catch { case NonFatal(_) => None }
}

/** A [[FileIndex]] of a fixed list of unpartitioned files (path, bytes) under `root`: no listing. */
final class RecordedFileIndex(root: Path, files: Seq[(Path, Long)]) extends FileIndex {
  private val statuses = files.map { case (p, n) =>
    FileStatusWithMetadata(new FileStatus(n, false, 1, RecordedFileIndex.BlockSize, 0L, p))
  }
  override def rootPaths: Seq[Path] = Seq(root)
  override def listFiles(partitionFilters: Seq[Expression], dataFilters: Seq[Expression]): Seq[PartitionDirectory] =
    Seq(PartitionDirectory(InternalRow.empty, statuses))
  override def inputFiles: Array[String] = files.map(_._1.toString).toArray
  override def refresh(): Unit = ()
  override def sizeInBytes: Long = files.map(_._2).sum
  override def partitionSchema: StructType = new StructType()
  override def toString: String = s"RecordedFileIndex(${files.size} files under $root)"
}

object RecordedFileIndex {
  private val BlockSize = 128L * 1024 * 1024
}
