package io.omnitable.spark.metadata

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{CatalogReader, TableSnapshot}
import io.omnitable.spark.errors.OmniTableErrors
import org.apache.hadoop.fs.Path
import org.apache.spark.sql.{Row, SparkSession}
import org.apache.spark.sql.functions.{broadcast, col}
import org.apache.spark.sql.types.{StringType, StructField, StructType}

/**
 * The rows of `omnitable.web.errors`: the table's record-level error table (a Delta table at the
 * location `error_tables` records, docs/errors.md) read with the active session, keeping what
 * `Table.errors()` keeps: the rows whose output file is visible in the snapshot, and the rejected
 * input rows (no file), which are always visible. A table without an error table has none.
 */
private[metadata] object ErrorRows {

  private val FileId = "file_id"

  def rows(reader: CatalogReader, snap: TableSnapshot, pageSize: Int): Seq[Row] = {
    val location = reader.withMetadata(s"the error table of table '${snap.table.name}'")(
      _.errorTableLocation(snap.table))
    val spark = SparkSession.active
    location.filter(exists(spark, _)) match {
      case None => Nil
      case Some(loc) =>
        val files = mutable.ArrayBuffer.empty[Row]
        reader.withMetadata(s"the files of table '${snap.table.name}'")(_.foreachFile(snap, pageSize)(f =>
          files += Row(f.fileId)))
        val columns = MetadataTables.Errors.fieldNames.map(col).toSeq
        try {
          val all = spark.read.format("delta").load(loc)
          val ids = spark.createDataFrame(files.asJava, StructType(Seq(StructField(FileId, StringType))))
          val outputs = all.join(broadcast(ids), Seq(FileId), "left_semi").select(columns: _*)
          outputs.unionByName(all.where(col(FileId).isNull).select(columns: _*)).collect().toSeq
        } catch {
          case NonFatal(e) => throw OmniTableErrors.errorTableUnreadable(snap.table.name, loc, e)
        }
    }
  }

  private def exists(spark: SparkSession, location: String): Boolean = {
    val log = new Path(location, "_delta_log")
    log.getFileSystem(spark.sparkContext.hadoopConfiguration).exists(log)
  }
}
