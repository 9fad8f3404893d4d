package io.omnitable.spark.procedures

import io.omnitable.spark.catalog.{BranchMergeWriter, CatalogReader, Failpoints, MergeOutcome, UndoOutcome, UndoWriter}
import io.omnitable.spark.procedures.OmniTableProcedure.{optional, required}
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.util.ArrayData
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/**
 * The catalog-only history procedures run in the JVM: `rollback` (Table.rollback), `revert`
 * (Table.revert; a keyed table's needs Python), and
 * `merge_branch` / `fast_forward` (Table.merge: fast-forward or three-way, keyed tables' keys
 * checked in the key index as Python checks them; docs/spark.md, "Procedures").
 */
object UndoProcedures {

  /** The row `rollback` returns: the new version, the head it replaced, the op and summary as history shows them. */
  val CommitOutput: StructType = StructType(Seq(
    StructField("version", LongType, nullable = false),
    StructField("parent_version", LongType, nullable = false),
    StructField("op", StringType, nullable = false),
    StructField("summary", StringType, nullable = false)
  ))

  /** A conflict a strategy resolved (Python's merge_plan.Conflict; column NULL: not a cell's). */
  val Conflict: StructType = StructType(Seq(
    StructField("kind", StringType, nullable = false),
    StructField("where", StringType, nullable = false),
    StructField("column", StringType),
    StructField("source", StringType, nullable = false),
    StructField("target", StringType, nullable = false)
  ))

  /** The row `merge_branch` and `fast_forward` return (Python's MergeResult; version NULL: nothing to merge). */
  val MergeOutput: StructType = StructType(Seq(
    StructField("version", LongType),
    StructField("fast_forward", BooleanType, nullable = false),
    StructField("base_version", LongType, nullable = false),
    StructField("source_version", LongType, nullable = false),
    StructField("cells", IntegerType, nullable = false),
    StructField("batches", IntegerType, nullable = false),
    StructField("deletes", IntegerType, nullable = false),
    StructField("columns", IntegerType, nullable = false),
    StructField("features", IntegerType, nullable = false),
    StructField("resolved", ArrayType(Conflict, containsNull = false), nullable = false)
  ))

  private def str(s: String): UTF8String = UTF8String.fromString(s)

  def result(o: UndoOutcome): ProcedureResult =
    new ProcedureResult(CommitOutput, Seq(InternalRow(o.version, o.parentVersion, str(o.op), str(o.summary))))

  def result(o: MergeOutcome): ProcedureResult = new ProcedureResult(
    MergeOutput,
    Seq(InternalRow(
      o.version.map(Long.box).orNull,
      o.fastForward,
      o.baseVersion,
      o.sourceVersion,
      o.count("cells"),
      o.count("batches"),
      o.count("deletes"),
      o.count("columns"),
      o.count("features"),
      ArrayData.toArrayData(o.resolved.map(c =>
        InternalRow(str(c.kind), str(c.where), c.column.map(str).orNull, str(c.source), str(c.target))).toArray)
    ))
  )

  private def failpoints: Failpoints = Failpoints(Option(SQLConf.get.getConfString(Failpoints.SessionConf, null)))

  private val Table = required("table", StringType, "the table's name")

  private val Strategies = Seq("fail", "ours", "theirs")

  /** `merge_branch` / `rebase_branch`: merges `source` into `into` with the `strategy` argument. */
  private def merge(reader: () => CatalogReader, a: ProcedureArgs, source: String, into: String): ProcedureResult = {
    val strategy = a.string("strategy")
    if (!Strategies.contains(strategy)) {
      throw a.invalid("strategy", s"is '$strategy': give one of ${Strategies.mkString(", ")}")
    }
    result(new BranchMergeWriter(
      reader(),
      failpoints).merge(a.string("table"), source, into, fastForwardOnly = false, strategy))
  }

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
        optional("strategy", StringType, "'fail'", "fail, ours or theirs: what a three-way merge does with conflicts")
      ),
      "Merges a branch (Table.merge): a fast-forward when the target has not moved since the source " +
        "forked (the source's rows are re-labelled, nothing copied), else a three-way merge at column grain " +
        "committed as one merge (no data file written); in a keyed table, keys both branches inserted are conflicts."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult =
        merge(reader, a, source = a.string("source_branch"), into = a.string("into"))
    },
    new OmniTableProcedure(
      "rebase_branch",
      Seq(
        Table,
        required("branch", StringType, "the branch brought up to date"),
        optional("onto", StringType, "'main'", "the branch whose changes it takes"),
        optional("strategy", StringType, "'fail'", "fail, ours (keep the branch's side) or theirs (take onto's)")
      ),
      "Brings onto's changes since the merge base into the branch (Table.rebase: a merge of onto into " +
        "the branch, one merge commit on it)."
    ) {
      override protected def run(a: ProcedureArgs): ProcedureResult =
        merge(reader, a, source = a.string("onto"), into = a.string("branch"))
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
