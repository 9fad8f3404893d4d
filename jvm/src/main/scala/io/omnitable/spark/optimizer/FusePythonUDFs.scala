package io.omnitable.spark.optimizer

import io.omnitable.spark.OmniTableConf
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{
  Alias,
  Attribute,
  AttributeSet,
  Expression,
  NamedExpression,
  PredicateHelper,
  PythonUDF
}
import org.apache.spark.sql.catalyst.plans.logical.{ArrowEvalPython, BatchEvalPython, Filter, LogicalPlan, Project}
import org.apache.spark.sql.execution.{FilterExec, ProjectExec, SparkPlan, SparkStrategy}
import org.apache.spark.sql.execution.python.{ArrowEvalPythonExec, BatchEvalPythonExec}

/**
 * Shared-input Python UDF fusion (DESIGN.md §8): Python UDFs that Spark evaluates in stacked
 * round trips — each sending its input columns to Python again — are evaluated in one pass.
 *
 * Matches (when planning) a chain `Eval_k → (Project | Filter)* → Eval_k-1 → … → Eval_1 → child`
 * of Spark's Python evaluation nodes (`ArrowEvalPython`, `BatchEvalPython`, as
 * `ExtractPythonUDFs` leaves them) of one eval type: scalar pandas UDFs, Arrow-batched or plain
 * Python UDFs. Typical source: `withColumn(udf1) → filter → withColumn(udf2) → filter → …`, where
 * Spark also re-evaluates the UDFs a filter needs. Rewrites it into one [[FusedPythonEvalExec]]
 * over `child` computing every UDF whose inputs are columns of `child` (each distinct UDF
 * once: copies are shared), then the chain's Filters and Projects (which pass the new results
 * up) and, where an upper evaluation stood, whatever UDFs could not move (they take results of
 * other UDFs as input) plus aliases keeping every result's expression id.
 *
 * Semantics: every row the Python workers see is a row they would have seen without fusion,
 * except rows removed by filters the moved UDFs now run before. Spark does not promise
 * short-circuit evaluation of deterministic UDFs (its own optimizer already pushes UDF predicates
 * below other filters), so a moved UDF may only pass a Filter that tests computed (UDF) values
 * only; a filter reading any raw column — possibly a guard such as `text IS NOT NULL` — ends the
 * chain, and `spark.omnitable.optimizer.fuse_python_udfs_across_filters=false` makes
 * every Filter end it.
 *
 * Backs off for: non-deterministic UDFs or expressions anywhere in the chain (an evaluation
 * holding one ends it), different eval types (one pass runs one type), other eval types (grouped
 * map, iterator UDFs), other operators in between. Turned off by
 * `spark.omnitable.optimizer.fuse_python_udfs=false`.
 */
case class FusePythonUDFs(session: SparkSession) extends SparkStrategy with PredicateHelper with Logging {
  import FusePythonUDFs.Eval

  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case Eval(top) if OmniTableConf.fromSQLConf().fusePythonUdfs => fuse(top).toSeq
    case _ => Nil
  }

  private def fuse(top: Eval): Option[SparkPlan] = {
    if (!top.deterministic) return None
    val acrossFilters = OmniTableConf.fromSQLConf().fusePythonUdfsAcrossFilters
    // The chain from top (head) down to the lowest fusible evaluation (last).
    val chain = Iterator.iterate[Option[LogicalPlan]](Some(top.child)) {
      case Some(Project(list, c)) if list.forall(_.deterministic) => Some(c)
      case Some(f @ Filter(cond, c)) if acrossFilters && onComputedValues(f, cond) => Some(c)
      case Some(Eval(e)) if e.evalType == top.evalType && e.deterministic => Some(e.child)
      case _ => None
    }.takeWhile(_.isDefined).map(_.get).toSeq
    val lowest = chain.lastIndexWhere {
      case Eval(e) => e.evalType == top.evalType && e.deterministic
      case _ => false
    }
    if (lowest < 0) return None
    val Eval(bottom) = chain(lowest): @unchecked
    val between = chain.take(lowest) // nodes strictly between top and bottom, top-down
    val uppers = (top +: between.collect { case Eval(e) => e }).reverse // bottom-up, excluding bottom
    val inputs = bottom.child.outputSet

    // Which UDFs move into the bottom evaluation, and which existing result each shares.
    val fusedUdfs = scala.collection.mutable.ArrayBuffer[PythonUDF]() ++ bottom.udfs
    val fusedRes = scala.collection.mutable.ArrayBuffer[Attribute]() ++ bottom.resultAttrs
    val byCanon = scala.collection.mutable.Map[Expression, Attribute]() ++
      bottom.udfs.map(_.canonicalized).zip(bottom.resultAttrs)
    final case class Moved(udf: PythonUDF, result: Attribute, as: Attribute) // `as`: the fused result it reads
    val moved = uppers.map { e =>
      e -> e.udfs.zip(e.resultAttrs).collect {
        case (u, r) if u.references.subsetOf(inputs) =>
          byCanon.get(u.canonicalized) match {
            case Some(existing) => Moved(u, r, existing)
            case None =>
              fusedUdfs += u
              fusedRes += r
              byCanon(u.canonicalized) = r
              Moved(u, r, r)
          }
      }
    }.toMap
    val movedCount = moved.values.map(_.size).sum
    if (movedCount == 0) return None
    val shared = moved.values.flatten.count(m => m.as != m.result) +
      bottom.udfs.map(_.canonicalized).groupBy(identity).values.count(_.size > 1)

    // Results each position must pass up: those read by moved UDFs' evaluations above it.
    def neededAbove(upperEvals: Seq[Eval]): Seq[Attribute] =
      upperEvals.flatMap(e => moved(e).map(_.as)).distinct

    var cur: SparkPlan = FusedPythonEvalExec(
      fusedUdfs.toSeq,
      fusedRes.toSeq,
      planLater(bottom.child),
      top.evalType,
      uppers.size + 1,
      shared)
    val bottomUp = (top.node +: between).reverse // every node above bottom, bottom-up
    bottomUp.zipWithIndex.foreach { case (node, i) =>
      val above = bottomUp.drop(i).collect { case Eval(e) => e }
      node match {
        case Filter(cond, _) => cur = FilterExec(cond, cur)
        case Project(list, _) =>
          val keep = AttributeSet(list.map(_.toAttribute))
          cur = ProjectExec(list ++ neededAbove(above).filterNot(keep.contains), cur)
        case Eval(e) =>
          val staying = e.udfs.zip(e.resultAttrs).filterNot { case (_, r) => moved(e).exists(_.result == r) }
          if (staying.nonEmpty) cur = evalExec(staying.map(_._1), staying.map(_._2), cur, e.evalType)
          val aliases: Seq[NamedExpression] = moved(e).filter(m => m.as != m.result).map { m =>
            Alias(m.as, m.result.name)(m.result.exprId, m.result.qualifier, Some(m.result.metadata))
          }
          val passUp = neededAbove(above.filterNot(_ == e))
          val wanted = e.node.output ++ passUp.filterNot(a => e.node.outputSet.contains(a))
          val present = AttributeSet(cur.output)
          val list = wanted.map {
            case a if present.contains(a) => a
            case a => aliases.find(_.exprId == a.exprId).getOrElse(a)
          }
          if (list.map(_.exprId) != cur.output.map(_.exprId)) cur = ProjectExec(list, cur)
        case other => throw new IllegalStateException(s"FusePythonUDFs: unexpected ${other.nodeName} in a chain")
      }
    }
    logInfo(s"FusePythonUDFs: ${uppers.size + 1} Python evaluations -> 1 ($movedCount UDFs moved, $shared shared)")
    Some(cur)
  }

  /** Whether the filter tests only values Python UDFs below it computed (no raw column: no guard). */
  private def onComputedValues(f: Filter, cond: Expression): Boolean = {
    val computed = AttributeSet(f.child.collect { case Eval(e) => e.resultAttrs }.flatten)
    cond.deterministic && splitConjunctivePredicates(cond).forall(c => c.references.subsetOf(computed))
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

}

/** The eval types FusePythonUDFs handles (pyspark's `PythonEvalType`; Spark's JVM copy is private). */
private[optimizer] object PythonEvalTypes {
  val SQL_BATCHED_UDF = 100
  val SQL_ARROW_BATCHED_UDF = 101
  val SQL_SCALAR_PANDAS_UDF = 200
}
