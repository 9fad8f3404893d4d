package io.omnitable.spark.optimizer

import scala.util.control.NonFatal

import io.omnitable.spark.catalog.{ColumnView, ColumnViews, FragmentScope, SnapshotId, SystemColumns}
import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.optimizer.OmniTableRelations.Read
import io.omnitable.spark.read.plan.OptimizerMarks
import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, AttributeSet, NamedExpression}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan, Project, RowLevelWrite}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreeNodeTag
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.omnitable.SqlInternals

/**
 * Hot column-group views (docs/optimizer.md, docs/governance.md): a read of an OmniTable table
 * whose needed columns a declared view covers is answered from the view's Delta table when the
 * view is **fresh** for the snapshot read — the catalog's per-batch fingerprints of the snapshot
 * (its batch ids, fragments, deletion vectors and the files carrying the view's columns) equal
 * the ones the view recorded with its Delta version, and the view's column ids still carry their
 * names. The view is then read at exactly that version: the data files its refresh recorded for it,
 * as plain Parquet ([[ViewFiles]]), or the Delta table at that version when none were recorded;
 * filters above are pushed into the scan by Spark. Any other case (stale, never refreshed, a batch or fragment read option, a metadata
 * column, a type difference) reads the table as before.
 *
 * Matches a `Project` over Projects and Filters over one OmniTable relation (the columns those
 * operators reference are the ones the read needs) and replaces only the relation: every operator
 * above stays, so filters and UDFs see exactly the rows they would have seen. EXPLAIN shows a
 * `ColumnViewRead <table>.<view>` node over the chain, which reads the view. Off with `spark.omnitable.optimizer.views.enabled=false`.
 */
object UseFreshColumnViews extends Rule[LogicalPlan] {

  override val ruleName: String = "UseFreshColumnViews"

  /** On a relation: the needed columns for which no fresh view was found. */
  private val Checked = TreeNodeTag[Set[String]]("omnitable.columnViewsChecked")

  override def apply(plan: LogicalPlan): LogicalPlan =
    if (!OmniTableConf.fromSQLConf().views || plan.exists(_.isInstanceOf[RowLevelWrite])) plan
    else plan.transformDown {
      case p: Project if !p.exists(_.isInstanceOf[ColumnViewRead]) =>
        below(p) match {
          case Some(Read(rel, table)) =>
            val needed = AttributeSet(chain(p).flatMap(_.references)).intersect(rel.outputSet)
            val names = needed.toSeq.map(_.name).toSet
            // the batch runs this rule to a fixed point: ask the catalog once per relation and columns
            if (rel.getTagValue(Checked).contains(names)) p
            else viewRead(rel, table, needed) match {
              case Some((name, view)) =>
                val replaced = p.transformDown { case r: DataSourceV2Relation if r eq rel => view }
                ColumnViewRead(table.name(), name, replaced)
              case None =>
                rel.setTagValue(Checked, names)
                p
            }
          case _ => p
        }
    }

  /** The relation under a chain of Projects and Filters, if that is what `plan` is. */
  private def below(plan: LogicalPlan): Option[LogicalPlan] = plan match {
    case r @ Read(_, _) => Some(r)
    case Project(_, child) => below(child)
    case Filter(_, child) => below(child)
    case _ => None
  }

  private def chain(plan: LogicalPlan): Seq[LogicalPlan] = plan match {
    case p @ (_: Project | _: Filter) => p +: plan.children.flatMap(chain)
    case _ => Nil
  }

  /** The fresh view's read standing for `rel` (same output attributes), if one applies. */
  private def viewRead(rel: DataSourceV2Relation, table: OmniTableTable, needed: AttributeSet)
      : Option[(String, LogicalPlan)] = {
    val handle = table.handle
    // a batch / fragment option, or per-fragment partitions (split_fragments=false: the reader's
    // order is relied on), read the table itself
    val perFragment = (handle.options ++ OmniTableRelations.options(rel)).exists { case (k, v) =>
      k.equalsIgnoreCase("split_fragments") && v.trim.equalsIgnoreCase("false")
    }
    if (handle.batches.nonEmpty || handle.fragments.nonEmpty || !table.marks.isEmpty || perFragment) return None
    val names = needed.toSeq.map(_.name).toSet
    val snap = handle.snapshot
    val ids = snap.columns.map(c => c.name -> c.columnId).toMap
    val candidates = handle.reader.columnViews(snap).filter { v =>
      v.deltaVersion.isDefined && v.batches.size == snap.batchCount &&
      names.subsetOf(v.columns.toSet + SystemColumns.AppendName) &&
      v.columnIds.forall { case (n, id) => ids.get(n).contains(id) }
    }.sortBy(v => (v.columns.size, v.name))
    candidates.find(v => fresh(table, v)).flatMap(v => plan(rel, table, v, needed).map(v.name -> _))
  }

  /**
   * Whether `v`'s recorded fingerprints equal those of the snapshot read. A committed snapshot's
   * fragments never change, so the answer is remembered per (table, snapshot, view record): a
   * repeated read of the same snapshot skips the fingerprint listing (a catalog round trip and
   * one row per fragment and file). A changed record (a refresh) is a different key.
   */
  private def fresh(table: OmniTableTable, v: ColumnView): Boolean = {
    val snap = table.handle.snapshot
    val key = FreshKey(snap.warehouse, snap.table.tableId, snap.snapshot, v)
    FreshCache.get(key).getOrElse {
      val scope = FragmentScope(columns = Some(v.columnIds.values.toSet), statsColumns = Some(Set.empty))
      val listing = table.handle.reader.listFragments(snap, scope)
      val answer = ColumnViews.fingerprints(listing.fragments) == v.batches
      FreshCache.put(key, answer)
      answer
    }
  }

  private final case class FreshKey(warehouse: String, tableId: String, snapshot: SnapshotId, view: ColumnView)

  /** A small LRU of freshness answers (immutable facts: see [[fresh]]). */
  private object FreshCache {
    private val MaxEntries = 256
    private val map = new java.util.LinkedHashMap[FreshKey, java.lang.Boolean](64, 0.75f, true) {
      override def removeEldestEntry(e: java.util.Map.Entry[FreshKey, java.lang.Boolean]): Boolean =
        size() > MaxEntries
    }
    def get(k: FreshKey): Option[Boolean] = map.synchronized(Option(map.get(k)).map(_.booleanValue))
    def put(k: FreshKey, v: Boolean): Unit = map.synchronized { map.put(k, v); () }
  }

  private def plan(rel: DataSourceV2Relation, table: OmniTableTable, v: ColumnView, needed: AttributeSet)
      : Option[LogicalPlan] =
    try {
      val tableUri = table.handle.snapshot.tableUri
      val recorded = if (OmniTableConf.fromSQLConf().viewsRecordedFiles) ViewFiles.relation(tableUri, v) else None
      val delta = recorded.getOrElse {
        val path = tableUri + "/" + v.path
        val df = SparkSession.active.read.format("delta").option("versionAsOf", v.deltaVersion.get.toString).load(path)
        SqlInternals.analyzedPlan(df)
      }
      val byName = delta.output.map(a => a.name -> a).toMap
      val list: Seq[Option[NamedExpression]] = rel.output.filter(needed.contains).map { a =>
        byName.get(a.name).filter(_.dataType == a.dataType).map(d => Alias(d, a.name)(a.exprId, a.qualifier))
      }
      // the attributes above reference only covered columns; each must come with its type
      if (list.exists(_.isEmpty)) None
      else {
        val out = Project(list.flatten, delta)
        out.setTagValue(OptimizerMarks.FiredRules, Seq(s"$ruleName(${v.name})"))
        Some(out)
      }
    } catch { case NonFatal(_) => None }
}
