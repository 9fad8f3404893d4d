package io.omnitable.spark.write

import scala.collection.mutable
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import io.omnitable.spark.catalog._
import io.omnitable.spark.errors.{OmniTableCommitException, UpdateErrors, WriteErrors}
import io.omnitable.spark.read.exec.{AlignedFilesReader, FileSlice, SerializableHadoopConf}
import io.omnitable.spark.read.plan.OmniTableBatch
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.types.{LongType, StructField, StructType}

/** What an update did: the new version, rows updated, fragments touched, files written and their bytes. */
final case class UpdateResult(version: Long, rows: Long, fragments: Int, files: Int, bytesWritten: Long)

/**
 * `Table.update` from the JVM (python/omnitable/dataops/update.py, the same rules and files):
 * set `columns` of the rows `data` names by `_ai_unique_id_`, on the head of `branch`. Finds each
 * row's (fragment, offset) by reading the `_ai_unique_id_` files of the fragments whose id
 * statistics may hold it, rewrites the updated columns of the touched fragments
 * ([[ColumnRewriter]]) and commits once ([[CatalogWriter.commitUpdate]]). Ids that are not live
 * rows fail the update (nothing committed, the written files deleted). Runs on the driver: the
 * row-level SQL path (UPDATE / MERGE) locates rows in its scan and rewrites in its tasks.
 */
object ColumnUpdate {

  /** Entry point with a Java list of column names (py4j). */
  def run(
      spark: SparkSession,
      warehouse: String,
      table: String,
      data: DataFrame,
      columns: java.util.List[String]): UpdateResult =
    run(spark, warehouse, table, data, columns.asScala.toSeq, SystemColumns.MainBranch)

  def run(
      spark: SparkSession,
      warehouse: String,
      table: String,
      data: DataFrame,
      columns: Seq[String],
      branch: String): UpdateResult = {
    val reader = new CatalogReader(warehouse)
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch)))
    val targets = targetsOf(snap, data.schema, columns)
    val values = collectValues(snap, data, targets)
    val task = rewriteTask(spark, snap, targets)
    val failpoints = Failpoints(Option(spark.conf.get(Failpoints.SessionConf, null)))
    val writer = new CatalogWriter(reader.address, failpoints = failpoints)
    val written = mutable.ArrayBuffer.empty[WrittenFile]
    try {
      val hits = rewriteAll(snap, reader.loadFragments(snap), task, values, written)
      if (hits != values.size) throw UpdateErrors.notLive(snap.table.name, values.size - hits, values.size)
      val commit = UpdateCommit(
        snap.table.tableId,
        snap.table.name,
        branch,
        snap.snapshot.version,
        targets.map(_.name),
        hits,
        written.toSeq)
      failpoints.hit("update.before_commit")
      val version = writer.commitUpdate(commit)
      UpdateResult(version, hits, written.map(_.fragmentId).distinct.size, written.size, written.map(_.sizeBytes).sum)
    } catch {
      case e: OmniTableCommitException if e.omniErrorClass == WriteErrors.CommitOutcomeUnknown =>
        throw e // the commit may reference the files: keep them
      case NonFatal(e) =>
        ColumnRewriter.deleteQuietly(task, written.map(_.path).toSeq)
        throw e
    }
  }

  /** The updated columns, checked as update.py `_values` does. */
  private def targetsOf(snap: TableSnapshot, schema: StructType, columns: Seq[String]): Seq[UpdateColumn] = {
    val table = snap.table.name
    if (columns.isEmpty) throw UpdateErrors.noColumns(table)
    val missing = columns.filterNot(c => schema.fieldNames.contains(c))
    if (missing.nonEmpty) throw UpdateErrors.missingInData(table, missing)
    if (!schema.fieldNames.contains(SystemColumns.RowId)) {
      throw UpdateErrors.badIds(table, s"the data has no ${SystemColumns.RowId} column naming the rows")
    }
    val keys = keyColumns(snap.table.properties)
    columns.map { name =>
      if (name == SystemColumns.RowId || name == SystemColumns.AppendName) throw UpdateErrors.systemColumn(table, name)
      if (keys.contains(name)) throw UpdateErrors.keyColumn(table, name)
      val c = snap.userColumns.find(c => c.name == name && c.state == "active")
        .getOrElse(throw UpdateErrors.unknownColumns(table, Seq(name)))
      UpdateColumn(c.name, c.columnId, c.physicalName, c.groupName, c.dataType)
    }
  }

  /** The key columns of a keyed table (property `table.key`: a JSON list of names, or one name). */
  private def keyColumns(properties: Map[String, String]): Set[String] = properties.get("table.key") match {
    case None => Set.empty
    case Some(raw) =>
      try {
        val node = new com.fasterxml.jackson.databind.ObjectMapper().readTree(raw)
        if (node.isArray) node.elements().asScala.map(_.asText()).toSet else Set(node.asText())
      } catch { case NonFatal(_) => Set(raw) }
  }

  /** `_ai_unique_id_` → the new values (cast to the columns' types, ANSI: a lossy cast fails). */
  private def collectValues(snap: TableSnapshot, data: DataFrame, targets: Seq[UpdateColumn])
      : Map[Long, InternalRow] = {
    val projected = data.select(
      (col(SystemColumns.RowId).cast(LongType) +: targets.map(t => col(t.name).cast(t.dataType))): _*)
    val rows = projected.queryExecution.toRdd.map(_.copy()).collect()
    val out = mutable.HashMap.empty[Long, InternalRow]
    rows.foreach { r =>
      if (r.isNullAt(0)) throw UpdateErrors.badIds(snap.table.name, s"null ${SystemColumns.RowId} values")
      val id = r.getLong(0)
      val values = new org.apache.spark.sql.catalyst.expressions.GenericInternalRow(
        targets.indices.map(i => if (r.isNullAt(i + 1)) null else r.get(i + 1, targets(i).dataType)).toArray[Any])
      if (out.put(id, values).isDefined) {
        throw UpdateErrors.badIds(snap.table.name, s"duplicate ${SystemColumns.RowId} value $id")
      }
    }
    out.toMap
  }

  private def rewriteTask(spark: SparkSession, snap: TableSnapshot, targets: Seq[UpdateColumn]): RewriteTask = {
    val conf = spark.sessionState.conf
    val settings = WriteSettings.resolve(
      snap.table.name,
      Map.empty,
      k => Option(conf.getConfString(k, null)),
      snap.table.properties,
      named = false)
    val schema = StructType(targets.map(t => StructField(t.physicalName, t.dataType)))
    val hadoop = OmniTableBatch.readerSettings(spark, OmniTableWriteBuilder.parquetConf(spark, schema, settings))
    RewriteTask(snap.tableUri, targets, new SerializableHadoopConf(hadoop))
  }

  /** Rewrites every fragment holding a row of `values` (files appended to `written`); how many rows were found. */
  private def rewriteAll(
      snap: TableSnapshot,
      fragments: Seq[FragmentEntry],
      task: RewriteTask,
      values: Map[Long, InternalRow],
      written: mutable.ArrayBuffer[WrittenFile]): Long = {
    if (values.isEmpty) return 0L
    val rid = snap.rowIdColumn
    val (lo, hi) = (values.keys.min, values.keys.max)
    var hits = 0L
    fragments.foreach { frag =>
      frag.fileFor(rid.columnId).filter(f => mayOverlap(f.columns.get(rid.columnId), lo, hi)).foreach { idFile =>
        val offsets = locate(snap, frag, idFile, rid, task, values)
        if (offsets.nonEmpty) {
          hits += offsets.length
          val providers = task.columns.flatMap(c => frag.fileFor(c.columnId).map(c.columnId -> _.path)).toMap
          val rewrite = FragmentRewrite(frag.fragmentId, frag.path, frag.rowCount, providers)
          written ++= ColumnRewriter.rewrite(task, rewrite, offsets.map(_._1), offsets.map(_._2))
        }
      }
    }
    hits
  }

  private def mayOverlap(stats: Option[FileColumnStats], lo: Long, hi: Long): Boolean = stats match {
    case Some(FileColumnStats(_, Some(a), Some(b))) =>
      (a.toLongOption, b.toLongOption) match {
        case (Some(min), Some(max)) => min <= hi && max >= lo
        case _ => true
      }
    case _ => true
  }

  /** (offset, new values) of the live rows of `frag` that `values` names, by offset (update.py `_index`). */
  private def locate(
      snap: TableSnapshot,
      frag: FragmentEntry,
      idFile: FileEntry,
      rid: ColumnEntry,
      task: RewriteTask,
      values: Map[Long, InternalRow]): Array[(Long, InternalRow)] = {
    val deleted = frag.deletes.map(d => DeletionVectors.decode(d, frag.rowCount, snap.table.name, frag.fragmentId))
    val slice = FileSlice(
      DataPaths.join(snap.tableUri, idFile.path),
      StructType(Seq(StructField(rid.physicalName, LongType))),
      frag.rowCount)
    val found = mutable.ArrayBuffer.empty[(Long, InternalRow)]
    val reader = new AlignedFilesReader(Seq(slice), frag.rowCount, task.hadoopConf.value)
    try reader.foreachBatch { (first, n, batches) =>
        val ids = batches.head.column(0)
        var i = 0
        while (i < n) {
          val row = first + i
          if (!ids.isNullAt(i) && !deleted.exists(_.get(row.toInt))) {
            values.get(ids.getLong(i)).foreach(v => found += row -> v)
          }
          i += 1
        }
      }
    finally reader.close()
    found.toArray
  }
}
