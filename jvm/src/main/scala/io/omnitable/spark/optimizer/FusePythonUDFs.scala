package io.omnitable.spark.optimizer

import scala.collection.mutable

import io.omnitable.spark.conf.OmniTableConf
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{Alias, Attribute, AttributeSet, Expression, PythonUDF}
import org.apache.spark.sql.catalyst.plans.logical.{ArrowEvalPython, BatchEvalPython, Filter, LogicalPlan, Project}
import org.apache.spark.sql.execution.{FilterExec, ProjectExec, SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.python.{ArrowEvalPythonExec, BatchEvalPythonExec}

/**
 * Python UDF sharing (DESIGN.md §8): Python UDFs that Spark evaluates in stacked round trips are
 * evaluated once each, and in fewer passes where that cannot change which rows they see.
 *
 * Matches (when planning) a chain `Eval_k → (Project | Filter)* → Eval_k-1 → … → Eval_1 → child`
 * of Spark's Python evaluation nodes (`ArrowEvalPython`, `BatchEvalPython`, as
 * `ExtractPythonUDFs` leaves them) of one eval type: scalar pandas UDFs, Arrow-batched or plain
 * Python UDFs. Typical source: `withColumn(udf1) → filter → withColumn(udf2) → …`, where Spark
 * evaluates the UDFs a filter needs below it, then again above it. Rewrites it, keeping every
 * Filter and Project where it was:
 *
 *  - a UDF already computed lower in the chain (the same deterministic call on the same inputs:
 *    a filter's UDF Spark evaluates again above the filter, or a copy) is not evaluated again:
 *    its result is passed up from below, where it was computed on a superset of the rows;
 *  - a UDF whose inputs are columns below the lowest evaluation of its stretch (the evaluations
 *    with no Filter between them) joins that evaluation: same rows, one pass;
 *  - every other UDF stays where Spark put it.
 *
 * So a UDF runs only on rows Spark would run it on: never below a Filter it stood above (a filter,
 * whether on raw columns or computed values, may be a guard for it). The lowest evaluation becomes
 * a [[FusedPythonEvalExec]] (EXPLAIN: `FusePythonUDFs: n Python evaluations -> m, s shared`).
 *
 * Backs off for: non-deterministic UDFs or expressions anywhere in the chain (an evaluation
 * holding one ends it), different eval types (one pass runs one type), other eval types (grouped
 * map, iterator UDFs), other operators in between. Turned off by
 * `spark.omnitable.optimizer.fuse_python_udfs=false`.
 */
case class FusePythonUDFs(session: SparkSession) extends SparkStrategy with Logging {
  import FusePythonUDFs.Eval

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case Eval(top) if OmniTableConf.fromSQLConf().fusePythonUdfs => fuse(top).toSeq
    case _ => Nil
  }

  private def fuse(top: Eval): Option[SparkPlan] = {
    if (!top.deterministic) return None
    val nodes = (top.node +: FusePythonUDFs.chainBelow(top)).reverse // bottom-up
    if (nodes.size < 2) return None
    val p = FusePythonUDFs.place(nodes)
    if (p.moved == 0 && p.shared == 0) return None
    val Eval(bottom) = nodes.head: @unchecked
    val evaluations = nodes.count(Eval.unapply(_).isDefined)
    val chain = FusePythonUDFs.Chain(nodes, p, top.evalType, evaluations, p.computes.values.count(_.nonEmpty))
    val plan = nodes.indices.foldLeft(planLater(bottom.child))((below, i) => planNode(chain, i, below))
    logInfo(
      s"FusePythonUDFs: $evaluations Python evaluations -> ${chain.passes} (${p.moved} UDFs moved, ${p.shared} shared)")
    Some(plan)
  }

  /** Node `i` of `chain` planned over `below` (the plan of the nodes under it). */
  private def planNode(chain: FusePythonUDFs.Chain, i: Int, below: SparkPlan): SparkPlan = {
    // Results evaluations above need from here: those computed at or below this position.
    val wanted = chain.nodes.indices.drop(i + 1).flatMap(chain.placement.wants).distinct
    def passUp(plan: SparkPlan, keep: AttributeSet): Seq[Attribute] = {
      val present = AttributeSet(plan.output)
      wanted.filter(a => present.contains(a) && !keep.contains(a))
    }
    chain.nodes(i) match {
      case Filter(cond, _) => FilterExec(cond, below)
      case Project(list, _) => ProjectExec(list ++ passUp(below, AttributeSet(list.map(_.toAttribute))), below)
      case Eval(e) =>
        val evaluated = planEval(chain, i, e, below)
        val aliases = chain.placement.reused.getOrElse(i, Nil).map { case (r, src) =>
          r.exprId -> Alias(src, r.name)(r.exprId, r.qualifier, Some(r.metadata))
        }.toMap
        val present = AttributeSet(evaluated.output)
        val list = (e.node.output ++ passUp(evaluated, e.node.outputSet)).map {
          case a if present.contains(a) => a
          case a => aliases.getOrElse(a.exprId, a)
        }
        if (list.map(_.exprId) != evaluated.output.map(_.exprId)) ProjectExec(list, evaluated) else evaluated
      case other => throw new IllegalStateException(s"FusePythonUDFs: unexpected ${other.nodeName} in a chain")
    }
  }

  /** The UDFs placed at evaluation `i` of `chain` evaluated over `below`; the lowest one is the fused node. */
  private def planEval(chain: FusePythonUDFs.Chain, i: Int, e: Eval, below: SparkPlan): SparkPlan = {
    val here = chain.placement.computes.getOrElse(i, Nil)
    if (i == 0) {
      val p = chain.placement
      FusedPythonEvalExec(
        here.map(_._1),
        here.map(_._2),
        below,
        chain.evalType,
        chain.evaluations,
        chain.passes,
        p.shared)
    } else if (here.nonEmpty) evalExec(here.map(_._1), here.map(_._2), below, e.evalType)
    else below
  }

  private def evalExec(udfs: Seq[PythonUDF], res: Seq[Attribute], child: SparkPlan, evalType: Int): SparkPlan =
    if (evalType == PythonEvalTypes.SQL_BATCHED_UDF) BatchEvalPythonExec(udfs, res, child)
    else ArrowEvalPythonExec(udfs, res, child, evalType)
}

object FusePythonUDFs {

  /** A Python evaluation node of a fusible eval type. */
  private[optimizer] final case class Eval(
      node: LogicalPlan,
      udfs: Seq[PythonUDF],
      resultAttrs: Seq[Attribute],
      evalType: Int) {
    def child: LogicalPlan = node.children.head
    def deterministic: Boolean = udfs.forall(_.deterministic)
  }

  private[optimizer] object Eval {
    private val Fusible = Set(
      PythonEvalTypes.SQL_BATCHED_UDF,
      PythonEvalTypes.SQL_ARROW_BATCHED_UDF,
      PythonEvalTypes.SQL_SCALAR_PANDAS_UDF)

    def unapply(p: LogicalPlan): Option[Eval] = p match {
      case a @ ArrowEvalPython(udfs, res, _, t) if Fusible.contains(t) => Some(Eval(a, udfs, res, t))
      case b @ BatchEvalPython(udfs, res, _) => Some(Eval(b, udfs, res, PythonEvalTypes.SQL_BATCHED_UDF))
      case _ => None
    }
  }

  /** The chain below `top`, top-down, down to its lowest evaluation (empty: none). */
  private def chainBelow(top: Eval): Seq[LogicalPlan] = {
    def next(p: LogicalPlan): Option[LogicalPlan] = p match { // the child, if `p` belongs to the chain
      case Project(list, c) if list.forall(_.deterministic) => Some(c)
      case Filter(cond, c) if cond.deterministic => Some(c)
      case Eval(e) if e.evalType == top.evalType && e.deterministic => Some(e.child)
      case _ => None
    }
    val nodes = Iterator.unfold(top.child)(p => next(p).map(c => (p, c))).toSeq
    nodes.take(nodes.lastIndexWhere(Eval.unapply(_).isDefined) + 1)
  }

  /**
   * Where each UDF of a chain is computed, by position in `nodes` (the chain bottom-up).
   *
   * @param computes the UDFs (and result attributes) each evaluation computes
   * @param reused results an evaluation takes from an equal UDF computed at or below it (result → source)
   * @param wants what each evaluation needs passed up from below: reused sources and moved results
   */
  private final case class Placement(
      computes: Map[Int, Seq[(PythonUDF, Attribute)]],
      reused: Map[Int, Seq[(Attribute, Attribute)]],
      wants: Int => Seq[Attribute],
      moved: Int,
      shared: Int)

  /**
   * A chain being rewritten: its nodes bottom-up, where its UDFs are computed, its eval type, and
   * how many evaluations Spark planned and how many passes remain (for EXPLAIN).
   */
  private final case class Chain(
      nodes: Seq[LogicalPlan],
      placement: Placement,
      evalType: Int,
      evaluations: Int,
      passes: Int)

  private def place(nodes: Seq[LogicalPlan]): Placement = {
    val computes = mutable.Map[Int, mutable.ArrayBuffer[(PythonUDF, Attribute)]]()
    val reused = mutable.Map[Int, mutable.ArrayBuffer[(Attribute, Attribute)]]()
    val movedOut = mutable.Map[Int, mutable.ArrayBuffer[Attribute]]()
    val byCanon = mutable.Map[Expression, Attribute]()
    var stretch: Option[(Int, Eval)] = None // the lowest evaluation since the last Filter
    nodes.zipWithIndex.foreach {
      case (_: Filter, _) => stretch = None
      case (Eval(e), i) =>
        val (lowest, target) = stretch.getOrElse(i -> e)
        stretch = Some(lowest -> target)
        e.udfs.zip(e.resultAttrs).foreach { case (u, r) =>
          byCanon.get(u.canonicalized) match {
            case Some(src) => reused.getOrElseUpdate(i, mutable.ArrayBuffer()) += r -> src
            case None =>
              val at = if (u.references.subsetOf(target.child.outputSet)) lowest else i
              computes.getOrElseUpdate(at, mutable.ArrayBuffer()) += u -> r
              if (at != i) movedOut.getOrElseUpdate(i, mutable.ArrayBuffer()) += r
              byCanon(u.canonicalized) = r
          }
        }
      case _ =>
    }
    Placement(
      computes.view.mapValues(_.toSeq).toMap,
      reused.view.mapValues(_.toSeq).toMap,
      i => reused.get(i).toSeq.flatten.map(_._2) ++ movedOut.get(i).toSeq.flatten,
      movedOut.values.map(_.size).sum,
      reused.values.map(_.size).sum
    )
  }
}

/** The eval types FusePythonUDFs handles (pyspark's `PythonEvalType`; Spark's JVM copy is private). */
private[optimizer] object PythonEvalTypes {
  val SQL_BATCHED_UDF = 100
  val SQL_ARROW_BATCHED_UDF = 101
  val SQL_SCALAR_PANDAS_UDF = 200
}
