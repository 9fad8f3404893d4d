package io.omnitable.spark.backfill

import scala.collection.mutable

import io.omnitable.spark.catalog._
import io.omnitable.spark.errors.ProcedureErrors
import io.omnitable.spark.metadata.{CatalogFacts, Provider}

/**
 * One fused group of features of one level (python/omnitable/features/planner.py `Step`): the
 * fragments each feature computes, the output column ids the plan decided on, and the file
 * providing each (fragment, output) it replaces (None: missing).
 */
final case class BackfillStep(
    level: Int,
    features: Seq[FeatureDef],
    work: Map[String, Seq[FragmentRow]],
    columnIds: Map[String, Int],
    targets: Map[(String, String), Option[String]],
    retry: Map[String, Map[String, String]] = Map.empty) {

  /** The fragments of the step, first seen first (planner.py `Step.fragments`). */
  def fragments: Seq[FragmentRow] = {
    val seen = mutable.LinkedHashMap.empty[String, FragmentRow]
    features.foreach(f => work.getOrElse(f.name, Nil).foreach(fr => seen.getOrElseUpdate(fr.fragmentId, fr)))
    seen.values.toSeq
  }
}

/** What a backfill will do (planner.py `Plan`, data only). */
final case class BackfillPlan(
    table: String,
    baseVersion: Long,
    targets: Seq[String],
    batches: Seq[String],
    steps: Seq[BackfillStep])

/** The head of a branch as a backfill reads it: fragments, providers of the columns asked for, read sets. */
private[backfill] final case class HeadState(
    snap: TableSnapshot,
    features: Seq[FeatureDef],
    fragments: Seq[FragmentRow],
    providers: Map[(String, Int), Provider],
    readSets: Map[String, Map[String, Option[String]]],
    retired: Seq[ColumnNameRow],
    ownedFiles: Map[(String, String), Seq[String]],
    errorCounts: Map[(String, Int), Long] = Map.empty) {
  val byName: Map[String, Int] = snap.columns.map(c => c.name -> c.columnId).toMap

  def provider(fragment: String, column: String): Option[Provider] =
    byName.get(column).flatMap(id => providers.get((fragment, id)))

  /** Fragments not fully deleted (snapshot.py `live_fragments`). */
  def live: Seq[FragmentRow] = fragments.filter(f => f.rowCount - f.deletedRows > 0 || f.rowCount == 0)
}

/**
 * The JVM's backfill planner: Python's (planner.py `make_plan`, state.py `fragment_status`) for
 * SQL features. A feature is recomputed in a fragment where it is missing or stale, or where one
 * of its inputs is recomputed; features of one level sharing an input are fused into one step.
 */
object BackfillPlanner {

  private[backfill] def head(reader: CatalogReader, table: String, branch: String): HeadState = {
    val snap = reader.loadTable(table, SnapshotSpec(branch = Some(branch)))
    reader.withMetadata(s"the features of table '$table'") { q =>
      val active = snap.columns.map(_.name).toSet
      val current = mutable.LinkedHashMap.empty[String, FeatureDef]
      q.featureRows(snap).foreach { r =>
        val f = FeatureDef.fromRow(r.definition, r.fingerprint)
        if (f.outputNames.forall(active.contains)) current(r.name) = f
      }
      val features = current.values.toSeq
      val byName = snap.columns.map(c => c.name -> c.columnId).toMap
      val ids = features.flatMap(f => f.outputNames ++ f.inputs).flatMap(byName.get).toSet
      val (fragments, providers) = CatalogFacts.providers(q, snap, ids)
      val lineage = q.lineage(snap)
      val readSets = lineage.groupBy(_.fileId).map { case (file, rows) =>
        file -> CatalogFacts.readSet(rows.head.inputs)
      }
      HeadState(
        snap,
        features,
        fragments,
        providers,
        readSets,
        q.columnNames(snap).filter(_.state != "active"),
        owned(q, snap, current.keySet.toSet),
        lineage.filter(_.errorCount > 0).map(l => (l.fileId, l.columnId) -> l.errorCount).toMap
      )
    }
  }

  /**
   * (fragment, feature) -> the visible files a new file of the feature replaces there (runner.py
   * `_owned_files`): those of its group holding only its outputs among the active columns.
   */
  private def owned(
      q: MetadataQueries,
      snap: TableSnapshot,
      features: Set[String]): Map[(String, String), Seq[String]] = {
    val featureOf = snap.columns.filter(_.state == "active").map(c => c.columnId -> c.feature).toMap
    val sets = q.columnSets(snap.table)
    val out = mutable.HashMap.empty[(String, String), mutable.ArrayBuffer[String]]
    q.foreachFile(snap) { fr =>
      if (features.contains(fr.groupName)) {
        val cols = sets.getOrElse(fr.setId, Nil).map(_.columnId).filter(featureOf.contains)
        if (cols.forall(id => featureOf(id).contains(fr.groupName))) {
          out.getOrElseUpdate((fr.fragmentId, fr.groupName), mutable.ArrayBuffer.empty) += fr.fileId
        }
      }
    }
    out.map { case (k, v) => k -> v.toSeq }.toMap
  }

  /**
   * Plan the backfill of `targets` (feature or output column names) on the head of `branch`, on
   * the fragments of `batches` (append names; None: every batch; an unknown name fails as
   * snapshot.py `check_batches`).
   */
  def plan(
      reader: CatalogReader,
      table: String,
      branch: String,
      targets: Seq[String],
      retryErrors: Boolean,
      batches: Option[Seq[String]] = None): BackfillPlan = {
    val h = head(reader, table, branch)
    batches.foreach(checkBatches(reader.batchNames(h.snap).toSet, h.snap, _))
    planHead(h, table, targets, retryErrors, batches)
  }

  private def checkBatches(known: Set[String], snap: TableSnapshot, wanted: Seq[String]): Unit = {
    val missing = wanted.filterNot(known.contains)
    if (missing.nonEmpty)
      throw ProcedureErrors.notFound(
        s"Cannot find batch(es) ${missing.map(PyRepr.str).mkString(", ")} in table '${snap.table.name}' at " +
          s"version ${snap.snapshot.version}; see Table.batches()")
  }

  /**
   * With `retryErrors` (planner.py `make_plan(retry_errors=True)`), a done fragment whose current
   * file of the feature's first output has failed records (its lineage's `error_count`) is
   * recomputed too, and remembered in its step's `retry` (feature → fragment → that file).
   */
  private def planHead(
      h: HeadState,
      table: String,
      targets: Seq[String],
      retryErrors: Boolean,
      batches: Option[Seq[String]]): BackfillPlan = {
    val graph = Graph(h.features)
    val wanted = resolveTargets(h, graph, table, targets)
    wanted.map(graph.features).find(_.kind != "sql").foreach(f => throw pandasFeature(table, f, retryErrors))
    val closure = graph.ancestors(wanted)
    val recompute = mutable.LinkedHashMap.empty[String, Seq[FragmentRow]]
    val retry = mutable.HashMap.empty[String, Map[String, String]]
    val live = batches.fold(h.live)(bs => h.live.filter(f => bs.contains(f.batchName)))
    closure.toSeq.sortBy(n => (graph.level(n), n)).foreach { name =>
      val f = graph.features(name)
      val deps = graph.deps(name)
      val todo = live.filter { frag =>
        state(h, f, frag) != "done" ||
        deps.exists(d => recompute.get(d).exists(_.exists(_.fragmentId == frag.fragmentId))) ||
        (retryErrors && failedFile(h, f, frag).exists { file =>
          retry(name) = retry.getOrElse(name, Map.empty) + (frag.fragmentId -> file)
          true
        })
      }
      if (todo.nonEmpty) recompute(name) = todo
    }
    recompute.keys.map(graph.features).find(_.kind != "sql").foreach(f => throw pandasFeature(table, f, retryErrors))
    val steps = fuse(graph, recompute.toMap).map(recordTargets(h, _)).map(s =>
      s.copy(retry = retry.filter { case (n, _) => s.work.contains(n) }.toMap))
    BackfillPlan(table, h.snap.snapshot.version, wanted, live.map(_.batchName).distinct, steps)
  }

  /** The current file of `f`'s first output in `frag` when its lineage counts failed records (planner.py). */
  private def failedFile(h: HeadState, f: FeatureDef, frag: FragmentRow): Option[String] =
    f.outputNames.headOption.flatMap { out =>
      h.provider(frag.fragmentId, out).map(_.file.fileId).filter(id =>
        h.errorCounts.getOrElse((id, h.byName(out)), 0L) > 0)
    }

  private def pandasFeature(table: String, f: FeatureDef, retryErrors: Boolean): Throwable =
    if (retryErrors) {
      ProcedureErrors.needsPython(
        "retry_errors",
        s"Table.backfill(features, retry_errors=True).run(spark) or `omnitable backfill --retry-errors` for " +
          s"table '$table': feature '${f.id}' is a ${f.kind} feature (Python code)"
      )
    } else {
      ProcedureErrors.invalidOperation(
        s"Cannot backfill feature '${f.id}' of table '$table' in the JVM: it is a ${f.kind} feature (Python " +
          "code); run Table.backfill(features).run(spark) from Python (or `omnitable backfill`) for it. CALL " +
          "system.backfill computes SQL features only.")
    }

  /** state.py `fragment_status` of feature `f` (its current version) in `frag`: done, stale or missing. */
  private[backfill] def state(h: HeadState, f: FeatureDef, frag: FragmentRow): String = {
    if (!f.outputNames.forall(h.byName.contains)) return "missing"
    val outs = f.outputNames.map(o => h.provider(frag.fragmentId, o))
    if (outs.exists(_.isEmpty)) return "missing"
    val present = outs.flatten
    if (present.map(_.featureVersion).toSet != Set(Some(f.version))) return "stale"
    val computedAt = present.map(_.file.addedVersion).min
    val changed = f.inputs.filter(h.byName.contains).exists { name =>
      val p = h.provider(frag.fragmentId, name)
      p.exists(_.file.addedVersion > computedAt) || present.exists { out =>
        h.readSets.get(out.file.fileId).flatMap(_.get(name)).exists(_ != p.map(_.file.fileId))
      }
    }
    if (changed) "stale" else "done"
  }

  /** planner.py `_resolve_targets`: feature names or output columns, each once. */
  private def resolveTargets(h: HeadState, g: Graph, table: String, targets: Seq[String]): Seq[String] = {
    if (targets.isEmpty) {
      throw ProcedureErrors.invalidOperation("Cannot plan a backfill: give at least one target feature or column")
    }
    targets.map { t =>
      if (g.features.contains(t)) t
      else
        g.producer.getOrElse(
          t, {
            if (h.retired.exists(c => c.name == t || c.feature.contains(t))) {
              throw ProcedureErrors.notFound(
                s"Cannot backfill '$t' on table '$table': it is retired; restore it first (Table.restore)")
            }
            val names = g.features.keys.toSeq.sorted
            throw ProcedureErrors.notFound(
              s"Cannot backfill '$t' on table '$table': no registered feature or output column of that name; " +
                s"registered features: ${if (names.isEmpty) "none" else names.mkString(", ")}")
          }
        )
    }.distinct
  }

  /** planner.py `_fuse`: the features of each level sharing an input column form one step. */
  private def fuse(g: Graph, recompute: Map[String, Seq[FragmentRow]]): Seq[BackfillStep] =
    recompute.keys.groupBy(g.level).toSeq.sortBy(_._1).flatMap { case (level, ns) =>
      val names = ns.toSeq.sorted
      val parent = mutable.HashMap.from(names.map(n => n -> n))
      def find(n: String): String = if (parent(n) == n) n else { parent(n) = find(parent(n)); parent(n) }
      val owner = mutable.HashMap.empty[String, String]
      names.foreach(n =>
        g.features(n).inputs.foreach { c =>
          owner.get(c) match {
            case Some(o) => parent(find(n)) = find(o)
            case None => owner(c) = n
          }
        })
      val groups = names.groupBy(find).values.map(_.sorted).toSeq.sortBy(_.mkString("\u0000"))
      groups.map(ms =>
        BackfillStep(level, ms.map(g.features), ms.map(m => m -> recompute(m)).toMap, Map.empty, Map.empty))
    }

  /** planner.py `_record_targets`: output column ids and the files a step replaces. */
  private def recordTargets(h: HeadState, s: BackfillStep): BackfillStep = {
    val ids = s.features.flatMap(_.outputNames).filter(h.byName.contains).map(o => o -> h.byName(o)).toMap
    val targets = for {
      f <- s.features
      frag <- s.work(f.name)
      o <- f.outputNames if h.byName.contains(o)
    } yield (frag.fragmentId, o) -> h.provider(frag.fragmentId, o).map(_.file.fileId)
    s.copy(columnIds = ids, targets = targets.toMap)
  }
}

/** features/graph.py `FeatureGraph` of the current features. */
private[backfill] final case class Graph(all: Seq[FeatureDef]) {
  val features: Map[String, FeatureDef] = all.map(f => f.name -> f).toMap
  val producer: Map[String, String] = all.flatMap(f => f.outputNames.map(_ -> f.name)).toMap

  def deps(name: String): Set[String] = features(name).inputs.flatMap(producer.get).toSet

  private val levels = mutable.HashMap.empty[String, Int]

  def level(name: String): Int = levels.getOrElseUpdate(name, 1 + (deps(name).toSeq.map(level) :+ 0).max)

  def ancestors(names: Seq[String]): Set[String] = {
    val out = mutable.HashSet.empty[String]
    val stack = mutable.Stack.from(names)
    while (stack.nonEmpty) {
      val n = stack.pop()
      if (out.add(n)) stack.pushAll(deps(n))
    }
    out.toSet
  }
}
