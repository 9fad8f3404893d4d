package io.omnitable.spark.write

import scala.collection.mutable
import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{ColumnEntry, FeatureDef, TableSnapshot, WrittenFile}
import io.omnitable.spark.read.exec.SerializableHadoopConf
import io.omnitable.spark.read.plan.OmniTableBatch
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{StructField, StructType}

/** A fragment a backfill step computes: its id, directory (relative to the table) and physical rows. */
final case class FragmentWork(fragmentId: String, path: String, rowCount: Long)

/**
 * A record whose value did not convert to its feature's output type (Python's error of kind
 * `type`): its offset in the fragment, its row id, the value as a string, the digest of its inputs.
 */
final case class CastFailure(rowOffset: Long, rowId: Long, value: String, inputDigest: String)

/** One output file a step's task wrote for `feature`, and its records whose value did not convert to the output type. */
final case class FeatureOutput(feature: String, file: WrittenFile, typeErrors: Seq[CastFailure])

/**
 * One Spark job of a JVM backfill step (python/omnitable/exec/step_job.py for SQL features): the
 * step's fragments read whole, in order, through the `omnitable` source at `version` of `branch`
 * (by the catalog's own reader: [[TableFrames]]);
 * each feature's expression converted to its type as Python does (`TRY_CAST` under ANSI, `CAST`
 * otherwise) with a flag where a non-NULL value did not convert (the value as a string and the
 * inputs, Python's `sql_feature_exprs`); per fragment and feature, one
 * column file (`<fragment>/<feature>-<file_id>.parquet`, the output's name inside, deleted rows
 * NULL) written by the tasks ([[ColumnRewriter.stream]] with no current values).
 */
object SqlFeatureJob {

  def run(
      spark: SparkSession,
      frames: TableFrames,
      table: String,
      snap: TableSnapshot,
      branch: String,
      version: Long,
      features: Seq[FeatureDef],
      work: Map[String, Seq[FragmentWork]]): Seq[FeatureOutput] = {
    val fragments = work.values.flatten.toSeq.distinctBy(_.fragmentId)
    val df = frames.read(
      table,
      Map(
        "branch" -> branch,
        "versionAsOf" -> version.toString,
        "fragments" -> fragments.map(_.fragmentId).sorted.mkString(","),
        "split_fragments" -> "false")
    )
    val ansi = spark.sessionState.conf.ansiEnabled
    val exprs = Seq("_ai_fragment_", "_ai_row_offset_", "_ai_unique_id_") ++ features.flatMap(flagged(_, ansi))
    val tasks = features.map(f => f.name -> rewriteTask(spark, snap, f)).toMap
    val plan = StepTask(
      features.map(_.name),
      tasks,
      work.map { case (n, fs) => n -> fs.map(_.fragmentId).toSet },
      fragments.map(f => f.fragmentId -> f).toMap,
      Nil)
    val selected = df.selectExpr(exprs: _*)
    val inputs = features.indices.map { i =>
      selected.schema(4 + 2 * i).dataType.asInstanceOf[StructType]("inputs").dataType.asInstanceOf[StructType]
    }
    selected.queryExecution.toRdd.mapPartitions(plan.copy(inputTypes = inputs).run).collect().toSeq
  }

  /** python/omnitable/exec/step_job.py `sql_feature_exprs`: the converted value and its flag. */
  private def flagged(f: FeatureDef, ansi: Boolean): Seq[String] = {
    val (out, ddl) = f.outputs.head
    val expr = f.expr.get
    val converted = s"${if (ansi) "TRY_CAST" else "CAST"}(($expr) AS $ddl)"
    val inputs = if (f.inputs.isEmpty) "'none', NULL" else f.inputs.map(i => s"'$i', `$i`").mkString(", ")
    val flag = s"CASE WHEN ($expr) IS NOT NULL AND $converted IS NULL THEN named_struct('value', " +
      s"CAST(($expr) AS STRING), 'inputs', named_struct($inputs)) END"
    Seq(s"$converted AS `$out`", s"$flag AS `_ai_type_error_$out`")
  }

  private def rewriteTask(spark: SparkSession, snap: TableSnapshot, f: FeatureDef): RewriteTask = {
    val conf = spark.sessionState.conf
    val settings = WriteSettings.resolve(
      snap.table.name,
      Map.empty,
      k => Option(conf.getConfString(k, null)),
      snap.table.properties,
      named = false)
    val cols = f.outputNames.map { o =>
      val c: ColumnEntry = snap.columns.find(_.name == o).get
      UpdateColumn(c.name, c.columnId, c.name, f.name, c.dataType)
    }
    val schema = StructType(cols.map(t => StructField(t.physicalName, t.dataType)))
    val hadoop = OmniTableBatch.readerSettings(spark, OmniTableWriteBuilder.parquetConf(spark, schema, settings))
    RewriteTask(snap.tableUri, cols, new SerializableHadoopConf(hadoop))
  }
}

/**
 * The executor side: rows `(fragment, offset, row id, value, flag, value, flag, …)` of whole
 * fragments in offset order (only live rows); each feature's values go to its fragment's new file
 * at their offsets, the other rows NULL; a flag (a struct of the value as a string and the inputs,
 * of type `inputTypes`) marks a value that did not convert.
 */
private final case class StepTask(
    features: Seq[String],
    tasks: Map[String, RewriteTask],
    work: Map[String, Set[String]],
    fragments: Map[String, FragmentWork],
    inputTypes: Seq[StructType]) {

  def run(rows: Iterator[InternalRow]): Iterator[FeatureOutput] = {
    val out = mutable.ArrayBuffer.empty[FeatureOutput]
    val open = mutable.LinkedHashMap.empty[String, (FragmentRewriteStream, mutable.ArrayBuffer[CastFailure])]
    var current: String = null
    def finish(): Unit = {
      open.foreach { case (name, (s, errors)) => out += FeatureOutput(name, s.finish().head, errors.toSeq) }
      open.clear()
    }
    try {
      rows.foreach { row =>
        val frag = row.getUTF8String(0).toString
        if (frag != current) {
          finish()
          current = frag
          features.zipWithIndex.foreach { case (name, i) =>
            if (work(name).contains(frag)) {
              val w = fragments(frag)
              open(name) =
                (
                  ColumnRewriter.stream(tasks(name), FragmentRewrite(frag, w.path, w.rowCount, Map.empty)),
                  mutable.ArrayBuffer.empty[CastFailure])
            }
          }
        }
        val offset = row.getLong(1)
        features.zipWithIndex.foreach { case (name, i) =>
          open.get(name).foreach { case (s, errors) =>
            s.put(offset, row, Array(3 + 2 * i))
            if (!row.isNullAt(4 + 2 * i)) {
              val flag = row.getStruct(4 + 2 * i, 2)
              val inputs = flag.getStruct(1, inputTypes(i).length)
              errors += CastFailure(
                offset,
                row.getLong(2),
                flag.getUTF8String(0).toString,
                PyValues.inputDigest(inputs, inputTypes(i)))
            }
          }
        }
      }
      finish()
    } catch {
      case NonFatal(e) =>
        open.values.foreach(_._1.abort())
        tasks.headOption.foreach { case (_, t) => ColumnRewriter.deleteQuietly(t, out.map(_.file.path).toSeq) }
        throw e
    }
    out.iterator
  }
}
