package io.omnitable.spark.procedures

import io.omnitable.spark.catalog.{BranchMergeWriter, CatalogReader, Failpoints, MergeOutcome, UndoOutcome, UndoWriter}
import io.omnitable.spark.procedures.OmniTableProcedure.{optional, required}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * The catalog-only history procedures run in the JVM: `rollback` (Table.rollback), `revert`
 * (Table.revert; a keyed table's needs Python), and
 * `merge_branch` / `fast_forward` where the merge is a fast-forward (Table.merge); a merge that
 * needs a three-way merge fails with the Python API to use (docs/spark.md, "Procedures").
 */
object UndoProcedures {

  /** The row `rollback` returns: the new version, the head it replaced, the op and summary as history shows them. */
  val CommitOutput: StructType = StructType(Seq(
    StructField("version", LongType, nullable = false),
    StructField("parent_version", LongType, nullable = false),
    StructField("op", StringType, nullable = false),
    StructField("summary", StringType, nullable = false)
  ))

  /** The row `merge_branch` and `fast_forward` return (Python's MergeResult; version NULL: nothing to merge). */
  val MergeOutput: StructType = StructType(Seq(
    StructField("version", LongType),
    StructField("fast_forward", BooleanType, nullable = false),
    StructField("base_version", LongType, nullable = false),
    StructField("source_version", LongType, nullable = false)
  ))

  private def str(s: String): UTF8String = UTF8String.fromString(s)

  def result(o: UndoOutcome): ProcedureResult =
    new ProcedureResult(CommitOutput, Seq(InternalRow(o.version, o.parentVersion, str(o.op), str(o.summary))))

  def result(o: MergeOutcome): ProcedureResult = new ProcedureResult(
    MergeOutput,
    Seq(InternalRow(o.version.map(Long.box).orNull, o.fastForward, o.baseVersion, o.sourceVersion)))

  private def failpoints: Failpoints = Failpoints(Option(SQLConf.get.getConfString(Failpoints.SessionConf, null)))

  private val Table = required("table", StringType, "the table's name")

  private val Strategies = Seq("fail", "ours", "theirs")

  def all(reader: () => CatalogReader): Seq[OmniTableProcedure] = Seq(
    new OmniTableProcedure(
      "rollback",
      Seq(
        Table,
        required("version", LongType, "the version whose state becomes the head"),
        optional("branch", StringType, "'main'", "the branch to roll back"),
        optional("why", StringType, "NULL", "a note kept in the commit's summary")
      ),
      "Makes an older version's state the head as one new commit (Table.rollback); the versions in " +
        "between stay readable by time travel; no data file is written or deleted."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult = result(new UndoWriter(reader(), failpoints)
        .rollback(a.string("table"), a.string("branch"), a.optLong("version").get, a.optString("why")))
    },
    new OmniTableProcedure(
      "revert",
      Seq(
        Table,
        required("version", LongType, "the commit to undo (later commits are kept)"),
        optional("dependents", StringType, "'fail'", "when later backfills read what it wrote: fail or stale"),
        optional("branch", StringType, "'main'", "the branch whose history holds the commit"),
        optional("why", StringType, "NULL", "a note kept in the commit's summary")
      ),
      "Undoes exactly one commit as one new commit and keeps every later one (Table.revert); no data " +
        "file is written or deleted."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult = result(new UndoWriter(reader(), failpoints)
        .revert(
          a.string("table"),
          a.string("branch"),
          a.optLong("version").get,
          a.string("dependents"),
          a.optString("why")))
    },
    new OmniTableProcedure(
      "merge_branch",
      Seq(
        Table,
        required("source_branch", StringType, "the branch to merge"),
        optional("into", StringType, "'main'", "the branch merged into"),
        optional("strategy", StringType, "'fail'", "fail, ours or theirs (for a three-way merge: Python only)")
      ),
      "Merges a branch (Table.merge) when it is a fast-forward (the target has not moved since the " +
        "source forked: the source's rows are re-labelled, nothing copied); a three-way merge needs Python."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult = {
        val strategy = a.string("strategy")
        if (!Strategies.contains(strategy)) {
          throw a.invalid("strategy", s"is '$strategy': give one of ${Strategies.mkString(", ")}")
        }
        result(new BranchMergeWriter(reader(), failpoints)
          .merge(a.string("table"), a.string("source_branch"), a.string("into"), fastForwardOnly = false))
      }
    },
    new OmniTableProcedure(
      "fast_forward",
      Seq(
        Table,
        required("branch", StringType, "the branch whose head the target takes"),
        optional("into", StringType, "'main'", "the branch fast-forwarded")
      ),
      "Fast-forwards a branch to another that forked from it (Table.merge's fast-forward); fails when " +
        "the target moved since the fork."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult = result(new BranchMergeWriter(reader(), failpoints)
        .merge(a.string("table"), a.string("branch"), a.string("into"), fastForwardOnly = true))
    }
  )
}
