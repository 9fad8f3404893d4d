package io.omnitable.spark.procedures

import io.omnitable.spark.backfill.JvmBackfill
import io.omnitable.spark.catalog.{CatalogReader, Failpoints, FeatureRegistrar, RegisterOutcome, SqlFeature}
import io.omnitable.spark.errors.ProcedureErrors
import io.omnitable.spark.procedures.OmniTableProcedure.{optional, required}
import io.omnitable.spark.write.TableFrames
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.GenericArrayData
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * `register_feature`: registers a SQL feature as Python's
 * `Table.register(omnitable.sql_feature(name, expression, type, version, inputs=...))` does
 * (docs/spark.md, "Procedures"; docs/features.md). Pandas features are Python objects: they are
 * registered from Python.
 */
object FeatureProcedures {

  /** The row `register_feature` returns (table_version NULL: this version was already registered, nothing changed). */
  val RegisterOutput: StructType = StructType(Seq(
    StructField("feature", StringType, nullable = false),
    StructField("version", StringType, nullable = false),
    StructField("inputs", ArrayType(StringType, containsNull = false), nullable = false),
    StructField("output_type", StringType, nullable = false),
    StructField("table_version", LongType)
  ))

  private def str(s: String): UTF8String = UTF8String.fromString(s)

  def result(o: RegisterOutcome): ProcedureResult = {
    val f = o.feature
    val row = InternalRow(
      str(f.name),
      str(f.version),
      new GenericArrayData(f.inputs.map(str).toArray[Any]),
      str(f.outputs.head._2),
      o.tableVersion.map(Long.box).orNull)
    new ProcedureResult(RegisterOutput, Seq(row))
  }

  private def failpoints: Failpoints = Failpoints(Option(SQLConf.get.getConfString(Failpoints.SessionConf, null)))

  /** `inputs` as given: column names separated by commas (blanks around them ignored); NULL: inferred. */
  private def inputs(a: ProcedureArgs): Seq[String] = a.optString("inputs") match {
    case None => Nil
    case Some(text) =>
      val names = text.split(",", -1).map(_.trim).toSeq
      if (names.exists(_.isEmpty)) throw a.invalid("inputs", s"is '$text': give column names separated by commas")
      names
  }

  def all(reader: () => CatalogReader): Seq[OmniTableProcedure] = Seq(
    new OmniTableProcedure(
      "register_feature",
      Seq(
        required("table", StringType, "the table's name"),
        required("name", StringType, "the feature's name (also its output column and column group)"),
        required("expression", StringType, "a Spark SQL expression over the table's columns"),
        required("type", StringType, "the output's Spark DDL type, e.g. 'int', 'double', 'array<string>'"),
        required("version", StringType, "the feature's version; a new version makes computed values stale"),
        optional(
          "inputs",
          StringType,
          "NULL",
          "the columns it reads, comma-separated (NULL: those the expression mentions)"),
        optional("branch", StringType, "'main'", "the branch to register it on")
      ),
      "Registers a SQL feature (Table.register(omnitable.sql_feature(...))); registering the same " +
        "version again changes nothing, a new version supersedes the current one."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult = {
        val name = a.string("name")
        val f = SqlFeature.define(name, a.string("expression"), a.string("type"), a.string("version"), inputs(a))
        val registrar = new FeatureRegistrar(reader(), failpoints)
        result(registrar.register(a.string("table"), a.string("branch"), f, SQLConf.get.caseSensitiveAnalysis))
      }
    }
  )

  /** The rows `backfill` returns: one per feature computed. */
  val BackfillOutput: StructType = StructType(Seq(
    StructField("feature", StringType, nullable = false),
    StructField("fragments", IntegerType, nullable = false),
    StructField("rows", LongType, nullable = false),
    StructField("version", LongType, nullable = false)
  ))

  /** `features` as given: feature or output column names separated by commas, or an array of them. */
  private def targets(a: ProcedureArgs): Seq[String] =
    a.optNames("features", "feature names").getOrElse(throw ProcedureErrors.nullArgument(a.procedure, "features"))

  /** `batches` as given: append names separated by commas, or an array of them (NULL: every batch). */
  private def batches(a: ProcedureArgs): Option[Seq[String]] = a.optNames("batches", "append names")

  /** `backfill` and `retry_errors`; their jobs read the table through `frames` (the catalog's reader). */
  /** runner.py `RunOptions`: a positive number of fragments per commit, or None (one commit per step). */
  private def checkpoint(a: ProcedureArgs): Option[Int] = a.optLong("checkpoint_fragments").map { n =>
    if (n < 1 || n > Int.MaxValue)
      throw a.invalid("checkpoint_fragments", s"is $n: give a positive number of fragments")
    n.toInt
  }

  def backfill(reader: () => CatalogReader, frames: TableFrames): Seq[OmniTableProcedure] = Seq(
    computing(
      reader,
      frames,
      "backfill",
      "compute",
      retryErrors = false,
      "Computes SQL features in the JVM where they are missing or stale (Table.backfill(features).run(spark)), " +
        "the SQL features they read first; one commit per step. A pandas feature fails: use Table.backfill."
    ),
    computing(
      reader,
      frames,
      "retry_errors",
      "retry",
      retryErrors = true,
      "Recomputes, in the JVM, the fragments whose current files of SQL features have failed records, and " +
        "whatever is missing or stale (Table.backfill(features, retry_errors=True).run(spark)). A pandas feature " +
        "fails: use the Python API."
    )
  )

  /** `backfill` or `retry_errors` ([[JvmBackfill]] with `retryErrors`): one result row per feature computed. */
  private def computing(
      reader: () => CatalogReader,
      frames: TableFrames,
      name: String,
      verb: String,
      retryErrors: Boolean,
      doc: String): OmniTableProcedure =
    new OmniTableProcedure(
      name,
      Seq(
        required("table", StringType, "the table's name"),
        required(
          "features",
          StringType,
          s"the SQL features (or their output columns) to $verb: comma-separated, or an array"),
        optional("branch", StringType, "'main'", s"the branch to $verb them on"),
        optional(
          "batches",
          StringType,
          "NULL",
          "append names, comma-separated or an array: only their fragments (NULL: every batch)"),
        optional(
          "checkpoint_fragments",
          LongType,
          "NULL",
          "commit every this many fragments per step (NULL: once per step)")
      ),
      doc
    ) {
      override protected def lists: Set[String] = Set("features", "batches")

      override protected def run(a: ProcedureArgs): ProcedureResult = {
        val spark = org.apache.spark.sql.SparkSession.active
        val done = new JvmBackfill(spark, reader(), frames, failpoints)
          .run(a.string("table"), a.string("branch"), targets(a), retryErrors, batches(a), checkpoint(a))
        val rows = done.map(d =>
          InternalRow(str(d.feature), Int.box(d.fragments), Long.box(d.rows), Long.box(d.version)))
        new ProcedureResult(BackfillOutput, rows)
      }
    }
}
