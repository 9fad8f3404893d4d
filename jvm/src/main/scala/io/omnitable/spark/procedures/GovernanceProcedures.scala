package io.omnitable.spark.procedures

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.JsonNode
import com.fasterxml.jackson.databind.node.ObjectNode
import io.omnitable.spark.catalog.CatalogReader
import io.omnitable.spark.procedures.OmniTableProcedure.{optional, required}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.{ArrayBasedMapData, GenericArrayData}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * The governance procedures: one per maintenance job ([[GovernanceProcedures.Jobs]]: `compact`,
 * `fold`, `expire_versions`, `remove_orphan_files`) and `maintain`, which runs any jobs in order.
 * Each runs the job in OmniTable's Python engine on the driver ([[PythonEngine]]), exactly as
 * `Table.maintain` runs it (Prepare -> Execute -> Commit, docs/governance.md), on the warehouse of
 * the catalog it is called in, and returns one row per job ([[GovernanceProcedures.Output]]).
 */
object GovernanceProcedures {

  /** One row per job run (docs/spark.md, "Procedures"). */
  val Output: StructType = StructType(Seq(
    StructField("job", StringType, nullable = false),
    StructField("status", StringType, nullable = false),
    StructField("branch", StringType, nullable = false),
    StructField("base_version", LongType, nullable = false),
    StructField("version", LongType),
    StructField("actions", LongType, nullable = false),
    StructField("summary", MapType(StringType, StringType, valueContainsNull = false), nullable = false)
  ))

  /** A job option given as a procedure parameter: its type, and its value as the job takes it (JSON). */
  sealed abstract class Opt(val param: String, val option: String, val dataType: DataType, val comment: String) {
    def parameter = optional(param, dataType, "NULL", comment)
    def json(a: ProcedureArgs): Option[JsonNode]
  }

  /** A whole number of at least 1. */
  final class Count(param: String, comment: String, option: String) extends Opt(param, option, LongType, comment) {
    def json(a: ProcedureArgs): Option[JsonNode] = a.optLong(param).map { n =>
      if (n < 1) throw a.invalid(param, s"is $n: give a whole number of at least 1")
      Nodes.numberNode(n)
    }
  }

  /** A fraction (the job checks its range). */
  final class Fraction(param: String, comment: String, option: String) extends Opt(param, option, DoubleType, comment) {
    def json(a: ProcedureArgs): Option[JsonNode] = a.optDouble(param).map(Nodes.numberNode(_))
  }

  /** An age in seconds: a number of seconds or a fixed interval (`'7 days'`), at least 0. */
  final class Age(param: String, comment: String, option: String) extends Opt(param, option, StringType, comment) {
    def json(a: ProcedureArgs): Option[JsonNode] =
      a.optString(param).map(t => Nodes.numberNode(ageSeconds(t, param, a)))
  }

  /** Names: a string of comma-separated names or an array of strings. */
  final class Names(param: String, comment: String, option: String) extends Opt(param, option, StringType, comment) {
    def json(a: ProcedureArgs): Option[JsonNode] = a.optNames(param, s"$param names").map { names =>
      val array = Nodes.arrayNode()
      names.foreach(array.add)
      array
    }
  }

  private def Nodes = PythonEngine.Json.getNodeFactory

  /** A job procedure: `CALL system.<procedure>(table, <options>, branch, dry_run)` runs Python job `job`. */
  final case class JobProcedure(procedure: String, job: String, doc: String, options: Seq[Opt])

  private val TargetRows = new Count(
    "target_fragment_rows",
    "rows per rewritten fragment (NULL: the table's setting)",
    "target_fragment_rows")
  private val Batches = new Names("batches", "only these batches (NULL: all)", "batches")

  /** The job procedures: adding a job of governance/jobs.py to Spark SQL is one line here. */
  val Jobs: Seq[JobProcedure] = Seq(
    JobProcedure(
      "compact",
      "compact",
      "Merges small fragments of a batch into target-sized ones (Table.maintain(['compact'])).",
      Seq(
        new Count("min_fragments", "rewrite batches of at least this many fragments (NULL: 2)", "min_fragments"),
        TargetRows,
        Batches)
    ),
    JobProcedure(
      "fold",
      "fold",
      "Folds deleted rows and update overlays into rewritten files (Table.maintain(['fold'])).",
      Seq(
        new Fraction(
          "min_deleted_fraction",
          "rewrite batches with at least this fraction of rows deleted (NULL: 0.1)",
          "min_deleted_fraction"),
        new Count(
          "min_overlay_files",
          "... or this many update overlay files (NULL: 1)",
          "min_overlay_files"),
        TargetRows,
        Batches
      )
    ),
    JobProcedure(
      "expire_versions",
      "expire",
      "Expires old versions and frees their files (Table.maintain(['expire'])).",
      Seq(
        new Age("older_than", "expire versions older than this: seconds or an interval such as '7 days'", "older_than"),
        new Count("retain_last", "keep at least the newest N versions of each branch", "retain_last")
      )
    ),
    JobProcedure(
      "remove_orphan_files",
      "orphans",
      "Deletes files no catalog row references (Table.maintain(['orphans'])).",
      Seq(new Age(
        "older_than",
        "only files older than this: seconds or an interval (NULL: governance.orphan_min_age_s)",
        "min_age_s"))
    )
  )

  private val Table = required("table", StringType, "the table's name")
  private val Branch = optional("branch", StringType, "NULL", "the branch to maintain (NULL: main)")
  private val DryRun = optional("dry_run", BooleanType, "false", "only prepare: return what each job would do")

  def all(reader: () => CatalogReader): Seq[OmniTableProcedure] =
    Jobs.map(jobProcedure(reader, _)) :+ maintain(reader)

  private def jobProcedure(reader: () => CatalogReader, p: JobProcedure): OmniTableProcedure =
    new OmniTableProcedure(p.procedure, (Table +: p.options.map(_.parameter)) ++ Seq(Branch, DryRun), p.doc) {
      override protected def lists: Set[String] = p.options.collect { case n: Names => n.param }.toSet
      override protected def run(a: ProcedureArgs): ProcedureResult = {
        val options = PythonEngine.Json.createObjectNode()
        p.options.foreach(o => o.json(a).foreach(options.set[JsonNode](o.option, _)))
        val all = PythonEngine.Json.createObjectNode()
        if (!options.isEmpty) all.set[JsonNode](p.job, options)
        execute(reader, a, Seq(p.job), all)
      }
    }

  private def maintain(reader: () => CatalogReader): OmniTableProcedure =
    new OmniTableProcedure(
      "maintain",
      Seq(
        Table,
        optional("jobs", StringType, "NULL", "the jobs to run in order: an array of names or 'a,b' (NULL: compact)"),
        Branch,
        DryRun,
        optional(
          "options",
          StringType,
          "NULL",
          "JSON: job name -> its options, e.g. '{\"compact\": {\"min_fragments\": 4}}'")
      ),
      "Runs maintenance jobs in order, as Table.maintain does (jobs: compact, fold, expire, orphans, ...)."
    ) {
      override protected def lists: Set[String] = Set("jobs")
      override protected def run(a: ProcedureArgs): ProcedureResult = {
        val options = a.optString("options").map { text =>
          val node =
            try PythonEngine.Json.readTree(text)
            catch {
              case NonFatal(e) => throw a.invalid("options", s"is not JSON (${e.getMessage.linesIterator.next()})")
            }
          node match {
            case o: ObjectNode => o
            case _ => throw a.invalid("options", "is not a JSON object: give '{\"<job>\": {\"<option>\": <value>}}'")
          }
        }.getOrElse(PythonEngine.Json.createObjectNode())
        execute(reader, a, a.optNames("jobs", "job names").getOrElse(Seq("compact")), options)
      }
    }

  /** Runs `jobs` with `options` through the Python engine and turns its answer into rows. */
  private def execute(reader: () => CatalogReader, a: ProcedureArgs, jobs: Seq[String], options: ObjectNode)
      : ProcedureResult = {
    val table = a.string("table")
    val request = PythonEngine.Json.createObjectNode()
    request.put("table", table)
    a.optString("branch").foreach(request.put("branch", _))
    request.put("dry_run", a.bool("dry_run"))
    val names = request.putArray("jobs")
    jobs.foreach(names.add)
    request.set[JsonNode]("options", options)
    val session = SparkSession.active
    val engine =
      new PythonEngine(key => session.conf.getOption(key).orElse(session.sparkContext.getConf.getOption(key)))
    val answer = engine.call(a.procedure, reader().warehouse, request)
    new ProcedureResult(Output, answer.path("results").elements().asScala.map(row).toSeq)
  }

  private def str(s: String): UTF8String = UTF8String.fromString(s)

  private def row(r: JsonNode): InternalRow = {
    val summary = r.path("summary").properties().asScala.toSeq.map(e => (str(e.getKey), str(e.getValue.asText())))
    InternalRow(
      str(r.path("job").asText()),
      str(r.path("outcome").asText()),
      str(r.path("branch").asText()),
      r.path("base_version").asLong(),
      if (r.path("version").isIntegralNumber) java.lang.Long.valueOf(r.path("version").asLong()) else null,
      r.path("actions").asLong(),
      new ArrayBasedMapData(new GenericArrayData(summary.map(_._1)), new GenericArrayData(summary.map(_._2)))
    )
  }

  private val Micros = 1000000.0

  /** An age in seconds: a number, or a fixed-length interval; at least 0. */
  def ageSeconds(text: String, param: String, a: ProcedureArgs): Double = {
    val t = text.trim
    val seconds = t.toDoubleOption.filter(d => !d.isNaN && !d.isInfinite).getOrElse {
      RefProcedures.intervalMicros(t).getOrElse(throw a.invalid(
        param,
        s"is '$text': give a number of seconds or an interval such as '7 days' or '12 hours'")) / Micros
    }
    if (seconds < 0) throw a.invalid(param, s"is '$text': an age is at least 0 seconds")
    seconds
  }
}
