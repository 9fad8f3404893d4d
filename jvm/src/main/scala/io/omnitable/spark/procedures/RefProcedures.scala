package io.omnitable.spark.procedures

import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{CatalogReader, RefRecord, RefWriter}
import io.omnitable.spark.procedures.OmniTableProcedure.{optional, required}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.Literal
import org.apache.spark.sql.catalyst.parser.CatalystSqlParser
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.{CalendarInterval, UTF8String}

/**
 * The branch and tag procedures: `create_branch`, `delete_branch`, `create_tag`, `delete_tag`,
 * each with the semantics of the Python API of the same name (docs/branches.md) and each
 * returning the ref it created or deleted as one row of [[RefProcedures.Output]].
 */
object RefProcedures {

  /** The row every ref procedure returns (docs/spark.md, "Procedures"). */
  val Output: StructType = StructType(Seq(
    StructField("name", StringType, nullable = false),
    StructField("kind", StringType, nullable = false),
    StructField("version", LongType, nullable = false),
    StructField("parent", StringType),
    StructField("fork_version", LongType),
    StructField("created_at", StringType, nullable = false),
    StructField("max_age_s", LongType),
    StructField("expires_at", StringType)
  ))

  private def str(s: String): UTF8String = UTF8String.fromString(s)

  def result(ref: RefRecord): ProcedureResult = {
    val row = InternalRow(
      str(ref.name),
      str(ref.kind),
      ref.version,
      ref.parent.map(str).orNull,
      ref.forkVersion.map(Long.box).orNull,
      str(ref.createdAt),
      ref.maxAgeS.map(Long.box).orNull,
      ref.expiresAt.map(str).orNull
    )
    new ProcedureResult(Output, Seq(row))
  }

  private val Table = required("table", StringType, "the table's name")

  def all(reader: () => CatalogReader): Seq[OmniTableProcedure] = {
    def writer = new RefWriter(reader())
    Seq(
      new OmniTableProcedure(
        "create_branch",
        Seq(
          Table,
          required("branch", StringType, "the new branch's name"),
          optional("from_ref", StringType, "'main'", "the branch (or tag) it starts from"),
          optional("version", LongType, "NULL", "the version of from_ref's history it starts as (NULL: the head)")
        ),
        "Creates a branch (Table.create_branch): one refs row, no data copied."
      ) {
        override protected def run(a: ProcedureArgs): ProcedureResult =
          result(writer.createBranch(a.string("table"), a.string("branch"), a.string("from_ref"), a.optLong("version")))
      },
      new OmniTableProcedure(
        "delete_branch",
        Seq(Table, required("branch", StringType, "the branch to delete")),
        "Deletes a branch (Table.delete_branch); its data files stay until cleanup."
      ) {
        override protected def run(a: ProcedureArgs): ProcedureResult =
          result(writer.deleteBranch(a.string("table"), a.string("branch")))
      },
      new OmniTableProcedure(
        "create_tag",
        Seq(
          Table,
          required("tag", StringType, "the new tag's name"),
          optional("version", LongType, "NULL", "the version to pin (NULL: the branch's head)"),
          optional("branch", StringType, "'main'", "the branch whose history holds the version"),
          optional("max_age", StringType, "NULL", "retention: seconds, or an interval such as '7 days'")
        ),
        "Pins a version as a tag (Table.create_tag)."
      ) {
        override protected def run(a: ProcedureArgs): ProcedureResult = {
          val maxAge = a.optString("max_age").map(maxAgeSeconds(_, a))
          result(writer.createTag(a.string("table"), a.string("tag"), a.string("branch"), a.optLong("version"), maxAge))
        }
      },
      new OmniTableProcedure(
        "delete_tag",
        Seq(Table, required("tag", StringType, "the tag to delete")),
        "Deletes a tag (Table.delete_tag); its version stays in the history.") {
        override protected def run(a: ProcedureArgs): ProcedureResult =
          result(writer.deleteTag(a.string("table"), a.string("tag")))
      }
    )
  }

  private val Micros = 1000000L

  /**
   * A tag's retention in whole seconds, as Python's `create_tag(max_age=...)` takes it: a number
   * of seconds (fractions dropped), or an interval (`'7 days'`, `'1 hour 30 minutes'`,
   * `INTERVAL '2' DAY`); at least one second. Months and years have no fixed length: refused.
   */
  def maxAgeSeconds(text: String, a: ProcedureArgs): Long = {
    val t = text.trim
    val seconds: Double = t.toDoubleOption.filter(d => !d.isNaN && !d.isInfinite).getOrElse {
      intervalMicros(t).getOrElse(throw a.invalid(
        "max_age",
        s"is '$text': give a number of seconds or an interval such as '7 days' or '12 hours'")).toDouble / Micros
    }
    if (!(seconds >= 1)) throw a.invalid("max_age", s"is '$text': a retention is at least 1 second")
    if (seconds >= Long.MaxValue.toDouble) throw a.invalid("max_age", s"is '$text': too long")
    seconds.toLong
  }

  /** The length of interval `text` in microseconds, if it is a fixed-length interval. */
  private[procedures] def intervalMicros(text: String): Option[Long] = {
    val sql = if (text.toLowerCase.startsWith("interval")) text else s"INTERVAL $text"
    val literal =
      try Some(CatalystSqlParser.parseExpression(sql))
      catch { case NonFatal(_) => None }
    literal.collect {
      case Literal(v: Long, _: DayTimeIntervalType) => Some(v)
      case Literal(v: CalendarInterval, CalendarIntervalType) if v.months == 0 =>
        Some(Math.addExact(Math.multiplyExact(v.days.toLong, 86400L * Micros), v.microseconds))
      case _ => None
    }.flatten
  }
}
