package io.omnitable.spark.read.plan

import org.apache.spark.sql.catalyst.expressions.{AttributeReference, Expression, ExprId}
import org.apache.spark.sql.catalyst.trees.TreeNodeTag

/**
 * What OmniTable's optimizer rules decided about one read. The marks travel inside the plan —
 * on the relation's table ([[io.omnitable.spark.source.OmniTableTable.marks]]), so the scan
 * built from it prints them in EXPLAIN — never in a side table.
 *
 * @param fusedReads how many reads of the snapshot [[io.omnitable.spark.optimizer.FuseOmniTableScans]] merged into this one (1: none)
 * @param lateMaterialization the filter conjuncts [[io.omnitable.spark.optimizer.LateMaterializeFilteredColumns]] asks the scan
 *   to evaluate before reading the other columns; the scan applies them only if Spark pushes the
 *   same predicates to it (proof that the filter still sits directly on the scan)
 *
 * Equal marks ask for the same reads: the conjuncts compare by column name, not by expression id
 * (equal reads in two parts of a plan carry different ids), so equal tables stay equal.
 */
final case class OptimizerMarks(fusedReads: Int = 1, lateMaterialization: Option[Seq[Expression]] = None) {

  private lazy val identity: (Int, Option[Seq[Expression]]) = (
    fusedReads,
    lateMaterialization.map(_.map(_.transform {
      case a: AttributeReference => AttributeReference(a.name, a.dataType, a.nullable, a.metadata)(ExprId(0))
    })))

  override def equals(other: Any): Boolean = other match {
    case m: OptimizerMarks => identity == m.identity
    case _ => false
  }

  override def hashCode(): Int = identity.hashCode()

  def isEmpty: Boolean = fusedReads == 1 && lateMaterialization.isEmpty

  /** One line per rule that fired, for EXPLAIN. */
  def describe: Seq[String] =
    (if (fusedReads > 1) Seq(s"${OptimizerMarks.FuseScansRule}: $fusedReads reads -> 1 scan") else Nil)
}

object OptimizerMarks {

  /** The rule name of [[io.omnitable.spark.optimizer.FuseOmniTableScans]] (EXPLAIN names it). */
  val FuseScansRule = "FuseOmniTableScans"
  val Empty: OptimizerMarks = OptimizerMarks()

  /** Tag on logical nodes a rule rewrote: the rule names (tests and plan inspection read it). */
  val FiredRules: TreeNodeTag[Seq[String]] = TreeNodeTag[Seq[String]]("omnitable.firedRules")
}
