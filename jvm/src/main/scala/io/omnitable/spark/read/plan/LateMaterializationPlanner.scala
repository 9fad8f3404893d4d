package io.omnitable.spark.read.plan

import java.util.Locale

import io.omnitable.spark.catalog.FragmentEntry
import io.omnitable.spark.read.exec.{Filter, LateMaterialization}
import org.apache.spark.sql.catalyst.expressions.{And, AttributeReference, BoundReference, Expression}
import org.apache.spark.sql.connector.expressions.filter.Predicate
import org.apache.spark.sql.omnitable.SqlInternals
import org.apache.spark.sql.types.{ArrayType, DataType, MapType, StructType}

/**
 * Decides, on the driver, whether a scan uses late materialization (rule
 * [[io.omnitable.spark.optimizer.LateMaterializeFilteredColumns]] asks for it) and builds the
 * [[LateMaterialization]] executors receive.
 */
object LateMaterializationPlanner {

  /** What the scan decided: the plan for executors (None: read as usual) and a line for EXPLAIN. */
  final case class Decision(plan: Option[LateMaterialization], explain: String)

  private def off(why: String) = Decision(None, s"LateMaterializeFilteredColumns: off ($why)")

  /**
   * Decides whether the scan reads `conjuncts` (filter conjuncts over the relation, from the
   * rule) first. Only conjuncts Spark pushed to this scan count (`offered`: proof that the
   * filter still sits directly on it, since Spark pushes a filter's conjuncts only into the scan
   * right below it); it pays when the other columns are wider than the predicate columns and
   * the filter is estimated to keep at most `maxSelectivity` of the rows.
   */
  def decide(
      conjuncts: Seq[Expression],
      offered: Seq[Predicate],
      readSchema: StructType,
      readColumns: Seq[ReadColumn],
      toFilter: Predicate => Option[Filter],
      fragments: Seq[FragmentEntry],
      maxSelectivity: Double): Decision = {
    val verified = conjuncts.flatMap { c =>
      val atomic = c.references.forall(a => flat(a.dataType))
      SqlInternals.translateFilterV2(c).filter(p => atomic && offered.contains(p)).map(c -> _)
    }
    if (verified.isEmpty) return off("no pushed conjunct it could evaluate")
    val names = readColumns.map(_.field.name.toLowerCase(Locale.ROOT))
    val predicateNames = verified.flatMap(_._1.references.toSeq.map(_.name.toLowerCase(Locale.ROOT))).distinct
    val predicate = predicateNames.map(names.indexOf)
    if (predicate.contains(-1)) return off("a predicate column is not read")
    val stored = readColumns.zipWithIndex.collect { case (s: ReadColumn.Stored, i) => s -> i }
    val payload = stored.filterNot { case (_, i) => predicate.contains(i) }.map(_._1)
    if (payload.isEmpty) return off("no other stored column to read later")
    val predStored = stored.filter { case (_, i) => predicate.contains(i) }.map(_._1)
    val (predBytes, payloadBytes) = fragments.foldLeft((0L, 0L)) { case ((pb, wb), f) =>
      val pf = predStored.flatMap(c => f.fileFor(c.columnId)).distinct
      val wf = payload.flatMap(c => f.fileFor(c.columnId)).distinct.filterNot(pf.contains)
      (pb + pf.map(_.sizeBytes).sum, wb + wf.map(_.sizeBytes).sum)
    }
    if (payloadBytes <= predBytes) {
      return off(s"the other columns (${fmtBytes(payloadBytes)}) are not wider than the predicate columns " +
        s"(${fmtBytes(predBytes)})")
    }
    val filters = verified.map { case (_, p) => toFilter(p) }
    val rows = fragments.map(_.rowCount).sum.max(1L)
    val selectivity = fragments.map { f =>
      val s = filters.map(_.fold(1.0)(SelectivityEstimator.estimate(_, ScanPlanner.fragmentStats(f)))).product
      s * f.rowCount
    }.sum / rows
    val est = f"${selectivity * 100}%.1f%%"
    if (selectivity > maxSelectivity) return off(f"estimated selectivity $est > ${maxSelectivity * 100}%.0f%%")
    val position = predicateNames.zipWithIndex.toMap
    val condition = verified.map(_._1).reduce(And).transform {
      case a: AttributeReference =>
        BoundReference(position(a.name.toLowerCase(Locale.ROOT)), a.dataType, nullable = true)
    }
    val shown = predicate.map(readSchema(_).name).mkString(", ")
    Decision(
      Some(LateMaterialization(condition, predicate.toArray)),
      s"LateMaterializeFilteredColumns: on (reads $shown first; estimated selectivity $est)")
  }

  private def flat(t: DataType): Boolean = t match {
    case _: StructType | _: ArrayType | _: MapType => false
    case _ => true
  }

  private def fmtBytes(n: Long): String =
    if (n < 1024) s"$n B" else if (n < (1L << 20)) f"${n / 1024.0}%.1f KB" else f"${n / 1048576.0}%.1f MB"
}
