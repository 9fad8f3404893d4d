package io.omnitable.spark.write

import java.util.BitSet

import scala.jdk.CollectionConverters._

import io.omnitable.spark.catalog.{
  AppendCommit,
  CatalogWriter,
  DeletionVectors,
  FinishedRun,
  FragmentScope,
  KeyHash,
  NewDeletion,
  RowLevelCommit,
  SystemColumns,
  WrittenFragment
}
import io.omnitable.spark.conf.{OmniTableConf, TableProperties}
import io.omnitable.spark.errors.{OmniTableCommitException, WriteErrors}
import io.omnitable.spark.read.plan.{OmniTableScanBuilder, TableHandle}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.connector.distributions.{Distribution, Distributions}
import org.apache.spark.sql.connector.expressions.{Expression, Expressions, NamedReference, SortDirection, SortOrder}
import org.apache.spark.sql.connector.read.ScanBuilder
import org.apache.spark.sql.connector.write._
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * A row-level statement on one table snapshot (DSv2 `SupportsDelta`: delta-based, as OmniTable is
 * merge-on-read): the scan reads the rows with their `_ai_unique_id_` (the row id) and the
 * metadata columns `_ai_fragment_` and `_ai_row_offset_`; the tasks ([[OmniTableDeltaWriter]])
 * record deleted offsets and hand row changes to [[RowChanges]]; the driver
 * ([[OmniTableDeltaBatchWrite]]) commits once. docs/spark.md, "Row-level DML".
 */
final class OmniTableDeltaOperation(
    handle: TableHandle,
    catalog: CatalogWriter,
    val command: RowLevelOperation.Command)
    extends SupportsDelta {

  private val snap = handle.snapshot
  @volatile private var scanBuilder: Option[OmniTableScanBuilder] = None
  @volatile private var assigned: Option[Set[String]] = None
  @volatile private var orderKept = false

  /**
   * Set by `optimizer.KeepOmniTableUpdateOrder` before the write is built: the statement's rows
   * go from the scan to the write through projections and filters only, so each task writes the
   * rows its scan partition read, in the order read.
   */
  def keepsScanOrder(kept: Boolean): Unit = orderKept = kept

  /**
   * Whether the write needs no clustering by fragment and sort by offset: an UPDATE, or a MERGE
   * without inserted rows, whose rows keep the scan's order ([[keepsScanOrder]]; a MERGE's through
   * a broadcast of its source) and whose scan delivers each fragment whole, in
   * offset order, to one task ([[io.omnitable.spark.read.plan.OmniTableScan.deliversWholeFragments]]).
   * Then Spark plans no exchange and no sort: each task rewrites the fragments it read.
   */
  def streamsFragments: Boolean =
    (command == RowLevelOperation.Command.UPDATE || command == RowLevelOperation.Command.MERGE && !inserts) &&
      orderKept &&
      scanBuilder.flatMap(_.builtScan).exists(_.deliversWholeFragments)

  /**
   * The user columns an UPDATE assigns, when the session extension found them in the rewritten
   * plan (`optimizer.WriteOnlyAssignedColumns`); None: unknown, every user column is written.
   */
  def assignedColumns: Option[Set[String]] = assigned

  /** Set once, before the write is built, by `optimizer.WriteOnlyAssignedColumns`. */
  def assignColumns(names: Set[String]): Unit = assigned = Some(names)

  @volatile private var inserts = false
  @volatile private var appendNameKept = false

  /**
   * Every updated row keeps its `_ai_append_name_`: the plan writes the target row's own value in
   * every UPDATE (`optimizer.WriteOnlyAssignedColumns` proved it and put NULL there instead, so the
   * scan does not read the column); the tasks then skip their check of it. Set before the write is built.
   */
  def keepAppendName(): Unit = appendNameKept = true

  /**
   * The MERGE has `WHEN NOT MATCHED … INSERT` clauses: its write names a new batch before any
   * job runs (set by `optimizer.WriteOnlyAssignedColumns`, before the write is built).
   */
  def insertRows(): Unit = inserts = true

  override def description(): String = s"OmniTable ${command.toString.toLowerCase} on ${snap.table.name}"

  override def newScanBuilder(options: CaseInsensitiveStringMap): ScanBuilder = {
    val merged = handle.options ++ options.asCaseSensitiveMap().asScala
    val builder =
      new OmniTableScanBuilder(handle, OmniTableConf(merged, TableProperties(snap.table.name, snap.table.properties)))
    scanBuilder = Some(builder)
    builder
  }

  override def requiredMetadataAttributes(): Array[NamedReference] =
    Array(Expressions.column(SystemColumns.Fragment), Expressions.column(SystemColumns.RowOffset))

  override def rowId(): Array[NamedReference] = Array(Expressions.column(SystemColumns.RowId))

  override def newWriteBuilder(info: LogicalWriteInfo): DeltaWriteBuilder = new DeltaWriteBuilder {
    override def build(): DeltaWrite = {
      val changes = RowChanges.factory(command, handle, info, assigned, inserts, appendNameKept)
      val metadata = info.metadataSchema().orElseThrow(() =>
        new IllegalStateException(s"Spark gave no metadata schema for a ${command.toString} on ${snap.table.name}"))
      if (command == RowLevelOperation.Command.DELETE || streamsFragments) new DeltaWrite {
        override def description(): String = OmniTableDeltaOperation.this.description()
        override def toBatch: DeltaBatchWrite =
          new OmniTableDeltaBatchWrite(handle, catalog, command, readColumns, metadata, changes)
      }
      else
        new DeltaWrite with RequiresDistributionAndOrdering {
          override def description(): String = OmniTableDeltaOperation.this.description()
          override def toBatch: DeltaBatchWrite =
            new OmniTableDeltaBatchWrite(handle, catalog, command, readColumns, metadata, changes)
          // an updated fragment is rewritten by one task: rows clustered by fragment, in row order
          override def requiredDistribution(): Distribution =
            Distributions.clustered(Array[Expression](Expressions.column(SystemColumns.Fragment)))
          override def requiredOrdering(): Array[SortOrder] = Array(
            Expressions.sort(Expressions.column(SystemColumns.Fragment), SortDirection.ASCENDING),
            Expressions.sort(Expressions.column(SystemColumns.RowOffset), SortDirection.ASCENDING)
          )
        }
    }
  }

  /** The data columns the statement's scan read (name → id), its read set; none before a scan. */
  private def readColumns: Map[String, Int] = {
    val names = scanBuilder.map(_.requiredColumns.fieldNames.toSeq).getOrElse(Nil)
    snap.columns.filter(c => c.name != SystemColumns.RowId && names.exists(_.equalsIgnoreCase(c.name)))
      .map(c => c.name -> c.columnId).toMap
  }
}

/**
 * The driver side of a row-level statement: unions the offsets the tasks deleted per fragment
 * (a split fragment is read by several tasks) with the vector the fragment had at the snapshot,
 * and commits the new cumulative vectors ([[CatalogWriter.commitRowLevel]], op `delete` with
 * Python's summary). A statement that changes nothing commits nothing. A conflict with a
 * concurrent commit fails it with `OMNITABLE_COMMIT_CONFLICT` (Spark cannot re-plan it; re-run
 * the statement).
 */
private[write] final class OmniTableDeltaBatchWrite(
    handle: TableHandle,
    catalog: CatalogWriter,
    command: RowLevelOperation.Command,
    readColumns: => Map[String, Int],
    metadata: org.apache.spark.sql.types.StructType,
    changes: RowChangesFactory)
    extends DeltaBatchWrite {

  private val snap = handle.snapshot
  @volatile private var keepFiles = false
  @volatile private var prepared: RowChangesFactory = changes
  @volatile private var partitions = 1
  @volatile private var startedAt = CatalogWriter.utcNow() // the inserted batch's run: recorded at the commit

  /**
   * The tasks' factory; a MERGE inserting rows first reserves `partitions << 33` ids for its new
   * batch (as an append does: each task numbers its inserted rows from `base + (partition << 33)`)
   * and picks the batch's id.
   */
  override def createBatchWriterFactory(info: PhysicalWriteInfo): DeltaWriterFactory = {
    prepared = changes match {
      case c: ColumnChangesFactory if c.inserts.isDefined =>
        partitions = math.max(1, info.numPartitions())
        startedAt = CatalogWriter.utcNow()
        val task = c.inserts.get
        val base = catalog.reserveRowIds(snap.table.tableId, snap.table.name, partitions.toLong << WriteTask.IdShift)
        val withBase = task.copy(idBase = base)
        c.copy(inserts = Some(withBase.copy(batchId = OmniTableBatchWrite.unusedBatchId(withBase))))
      case other => other
    }
    new DeltaWriterFactoryImpl(metadata, prepared)
  }

  override def useCommitCoordinator(): Boolean = true

  override def commit(messages: Array[WriterCommitMessage]): Unit = {
    val results = messages.toSeq.collect { case m: RowsChanged => m }
    val written = results.flatMap(_.changes)
    val deleted = results.flatMap(_.deleted).groupMapReduce(_._1)(_._2) { (a, b) =>
      val out = a.clone().asInstanceOf[BitSet]
      out.or(b)
      out
    }
    val base = RowLevelCommit(
      snap.table.tableId,
      snap.table.name,
      snap.snapshot.segments.head.branch,
      snap.snapshot.version,
      "delete",
      Map.empty,
      Nil,
      readColumns)
    val (deletions, rows) = newVectors(deleted)
    val commit = prepared.toCommit(
      written,
      base.copy(deletions = deletions, summary = Map("rows" -> rows, "fragments" -> deletions.size)))
    if (commit.deletions.isEmpty && written.isEmpty) return // nothing matched: nothing to commit
    try
      prepared match {
        case c: ColumnChangesFactory if c.inserted(written).nonEmpty =>
          commitInserts(c, c.inserted(written), commit, if (c.keyed) c.found(written) else IndexedSeq.empty)
        case c: ColumnChangesFactory if c.keyed => commitKeyedMatches(c, commit, c.found(written))
        case _ =>
          catalog.failpoints.hit(if (commit.files.nonEmpty) "update.before_commit" else "delete.before_commit")
          catalog.commitRowLevel(commit)
      }
    catch {
      case e: OmniTableCommitException if e.omniErrorClass == WriteErrors.CommitOutcomeUnknown =>
        keepFiles = true
        throw e
    }
  }

  override def abort(messages: Array[WriterCommitMessage]): Unit = if (!keepFiles) {
    prepared.abort(messages.toSeq.collect { case RowsChanged(_, Some(w)) => w })
  }

  /**
   * Commit a MERGE that inserted rows: their fragments are one new batch (ids checked against the
   * reserved range, as an append's), committed with the matched rows' changes in one version (op
   * `upsert`, Python's upsert summary plus the update's and delete's), or alone as an append when
   * no target row matched; either way with the batch's ingest run (plan and metrics as a JVM
   * append's), recorded succeeded in the commit's transaction. Generated ids that concurrent
   * commits may overlap are checked exactly ([[RowIdChecks.commitWith]]).
   */
  private def commitInserts(
      c: ColumnChangesFactory,
      fragments: Seq[WrittenFragment],
      commit: RowLevelCommit,
      found: IndexedSeq[KeyChecks.Found]): Long = {
    val task = c.inserts.get
    val ranges = OmniTableBatchWrite.checkReserved(task, partitions, fragments)
    val append = AppendCommit(
      snap.table.tableId,
      snap.table.name,
      commit.branch,
      snap.snapshot.version,
      task.batchId,
      task.batchName,
      fragments,
      ranges)
    val checks = new RowIdChecks(snap, task, SparkSession.active)
    val inserted = fragments.map(_.rowCount).sum
    val run = FinishedRun(
      CatalogWriter.newRunId("ingest"),
      AppendRun.plan(task.batchName, OmniTableBatchWrite.appId, partitions),
      startedAt,
      Map("rows" -> inserted))
    if (task.key.isEmpty && commit.deletions.isEmpty && commit.files.isEmpty) {
      catalog.failpoints.hit("append.before_commit")
      return checks.commitWith(catalog, append, None)(a => catalog.commitAppend(a, Some(run)))
    }
    val merged = commit.summary.get("columns").map(_ => commit.summary.getOrElse("rows", 0L)).getOrElse(0L)
    val deleted =
      if (commit.files.nonEmpty) commit.summary.getOrElse("deleted", 0L) else commit.summary.getOrElse("rows", 0L)
    val summary = commit.summary ++ Map(
      "batch" -> task.batchName,
      "rows" -> inserted,
      "fragments" -> fragments.size,
      "replaced" -> false,
      "inserted" -> inserted,
      "merged" -> merged,
      "deleted" -> deleted,
      "user" -> sys.props.getOrElse("user.name", "")
    )
    val upsert = commit.copy(op = "upsert", summary = summary, run = Some(run))
    task.key match {
      case None =>
        catalog.failpoints.hit("merge.before_commit")
        checks.commitWith(catalog, append, None)(a => catalog.commitRowLevel(upsert.copy(append = Some(a))))
      case Some(_) => commitKeyed(task, fragments, upsert, append, checks, found)
    }
  }

  /**
   * A keyed MERGE that inserted no row (every source key matched a row): Python's upsert without
   * new rows, op `upsert` (its summary: `batch`, `inserted` 0, `merged`), committed with
   * `keysChecked` = the version the MERGE read: the rows of the keys it found (`found`) must
   * still hold them ([[KeyChecks.commitWith]]: a deleted one is Python's upsert conflict).
   */
  private def commitKeyedMatches(c: ColumnChangesFactory, commit: RowLevelCommit, found: IndexedSeq[KeyChecks.Found])
      : Long = {
    val summary = commit.summary ++ Map(
      "batch" -> c.inserts.get.batchName,
      "inserted" -> 0L,
      "merged" -> commit.summary.getOrElse("rows", 0L),
      "user" -> sys.props.getOrElse("user.name", ""))
    val upsert = commit.copy(op = "upsert", summary = summary, keysChecked = Some(snap.snapshot.version))
    catalog.failpoints.hit("merge.before_commit")
    KeyChecks.commitWith(handle.reader, snap.table.name, upsert, IndexedSeq.empty, found, c.task.hadoopConf.value)(
      catalog.commitRowLevel)
  }

  /**
   * A MERGE into a keyed table (docs/spark.md, "Keyed tables in the JVM"): op `upsert` even when
   * no row matched (as `Table.upsert`), after checking the inserted keys are distinct (read from
   * the index files the tasks wrote), committed with `keysChecked` = the version the MERGE read
   * (its join found these keys absent there, and the `found` keys at the rows it updated): keys
   * inserted, and rows of found keys deleted, by commits after it are re-probed at the new head
   * ([[KeyChecks.commitWith]]: a clash is Python's upsert conflict).
   */
  private def commitKeyed(
      task: WriteTask,
      fragments: Seq[WrittenFragment],
      upsert: RowLevelCommit,
      append: AppendCommit,
      checks: RowIdChecks,
      found: IndexedSeq[KeyChecks.Found]): Long = {
    val conf = task.hadoopConf.value
    val keys = KeyChecks.insertedKeys(snap.table.name, snap.tableUri, fragments, conf)
    if (task.key.exists(k => KeyHash.weak(k.types)) && keys.nonEmpty) {
      KeyChecks.refuseCollisions(handle.reader, snap.table.name, upsert.branch, snap.snapshot.version, keys, conf)
    }
    val keyed = upsert.copy(keysChecked = Some(snap.snapshot.version))
    catalog.failpoints.hit("merge.before_commit")
    checks.commitWith(catalog, append, None)(a =>
      KeyChecks.commitWith(handle.reader, snap.table.name, keyed.copy(append = Some(a)), keys, found, conf)(
        catalog.commitRowLevel))
  }

  /** The new cumulative vector of every fragment with deleted rows, and how many rows are newly deleted. */
  private def newVectors(deleted: Map[String, BitSet]): (Seq[NewDeletion], Long) = {
    if (deleted.isEmpty) return (Nil, 0L)
    val scope = FragmentScope(fragments = Some(deleted.keys.toSeq.sorted), columns = Some(Set.empty))
    val listing = handle.reader.listFragments(snap, scope)
    val byId = listing.fragments.map(f => f.fragmentId -> f).toMap
    var rows = 0L
    val out = deleted.toSeq.sortBy(_._1).map { case (id, bits) =>
      val frag = byId.getOrElse(id, throw new IllegalStateException(s"fragment $id is not in ${snap.snapshot.label}"))
      val all = frag.deletes.fold(new BitSet)(v => DeletionVectors.decode(v, frag.rowCount, snap.table.name, id))
      val before = all.cardinality()
      all.or(bits)
      rows += all.cardinality() - before
      NewDeletion(
        id,
        frag.batchId,
        all.cardinality().toLong,
        DeletionVectors.encode(all, frag.rowCount),
        frag.deletes.map(_.vectorId))
    }
    (out, rows)
  }
}
