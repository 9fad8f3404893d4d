package io.omnitable.spark.optimizer

import io.omnitable.spark.OmniTableConf
import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.optimizer.OmniTableRelations.{chain, Chain, Read}
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.{
  Alias,
  And,
  Attribute,
  AttributeMap,
  EqualNullSafe,
  EqualTo,
  Expression,
  KnownNullable,
  NamedExpression,
  PredicateHelper
}
import org.apache.spark.sql.catalyst.plans.{FullOuter, Inner, JoinType, LeftOuter, LeftSemi, RightOuter}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, Join, JoinHint, LogicalPlan, Project}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreePattern.JOIN
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/**
 * Scan fusion (DESIGN.md §2, §8): two reads of the same omnitable snapshot joined on
 * `_ai_unique_id_` become one read of the union of their columns.
 *
 * Matches `Join(left, right, type, cond)` where each side is a chain of Projects and Filters
 * over an omnitable relation (see [[OmniTableRelations.chain]]), both relations read the same
 * rows (same warehouse, table, resolved snapshot, batch/fragment restrictions and options:
 * [[io.omnitable.spark.source.OmniTableTable.readIdentity]]), and `cond` contains
 * `left._ai_unique_id_ = right._ai_unique_id_` (or `<=>`) on the relations' own key columns.
 * Because the key is unique and never NULL within a snapshot, each row joins exactly itself:
 *
 *  - inner join: `Project(left ++ right, Filter(leftFilters AND rightFilters AND otherConds, relation))`;
 *  - left semi join: the same filter, left's columns only;
 *  - left/right/full outer join: only when the outer side(s) have no filters and `cond` is the
 *    key equality alone (then every row is matched), with the join's nullability kept.
 *
 * Repeated application fuses n-way joins (4 projections joined on the key → 1 scan). The fused
 * relation's table carries `fusedReads` in its [[OptimizerMarks]] (EXPLAIN: `FuseOmniTableScans:
 * n reads -> 1 scan`) and the new Project the [[OptimizerMarks.FiredRules]] tag.
 *
 * Backs off (leaves the join alone) for: join hints; different snapshots (versions, branches,
 * tags), tables, batch/fragment restrictions or options; any non-deterministic expression,
 * user-defined function or subquery on either side; other join types (anti, cross) or
 * conditions without the key equality; outer joins whose outer side is filtered.
 * Turned off by `spark.omnitable.optimizer.fuse_scans=false`.
 */
object FuseOmniTableScans extends Rule[LogicalPlan] with PredicateHelper with Logging {

  override val ruleName: String = "FuseOmniTableScans"

  override def apply(plan: LogicalPlan): LogicalPlan =
    if (!OmniTableConf.fromSQLConf().fuseScans) plan
    else plan.transformUpWithPruning(_.containsPattern(JOIN)) {
      case j: Join if j.hint == JoinHint.NONE => fuse(j).getOrElse(j)
    }

  private def fuse(join: Join): Option[LogicalPlan] =
    for {
      l <- chain(join.left)
      r <- chain(join.right)
      if sameRows(l.relation, r.relation)
      fused <- rewrite(join, l, r)
    } yield fused

  private def sameRows(a: DataSourceV2Relation, b: DataSourceV2Relation): Boolean = (a, b) match {
    case (Read(_, ta), Read(_, tb)) =>
      (a ne b) && ta.readIdentity(OmniTableRelations.options(a)) == tb.readIdentity(OmniTableRelations.options(b))
    case _ => false
  }

  private def rewrite(join: Join, l: Chain, r: Chain): Option[LogicalPlan] = {
    val (relation, toLeft) = merge(l.relation, r.relation)
    def onRight(e: Expression): Expression = e.transformUp { case a: Attribute if toLeft.contains(a) => toLeft(a) }
    val rightProject = r.project.map(ne =>
      OmniTableRelations.substituteNamed(
        ne,
        AttributeMap(toLeft.toSeq.map {
          case (k, v) => k -> (v: Expression)
        })))
    val rightFilters = r.filters.map(onRight)
    // The join condition over the fused relation: both sides' outputs replaced by their definitions.
    val definitions = OmniTableRelations.aliases(l.project) ++ OmniTableRelations.aliases(rightProject)
    val conjuncts = join.condition.toSeq.flatMap(splitConjunctivePredicates)
      .map(c => onRight(OmniTableRelations.substitute(c, definitions)))
    val key = relation.output.find(_.name == SystemColumns.RowId)
    val (keyConds, others) = conjuncts.partition {
      case EqualTo(a: Attribute, b: Attribute) => key.exists(k => a.semanticEquals(k) && b.semanticEquals(k))
      case EqualNullSafe(a: Attribute, b: Attribute) => key.exists(k => a.semanticEquals(k) && b.semanticEquals(k))
      case _ => false
    }
    if (keyConds.isEmpty) return None
    val plain = others.isEmpty
    val shape: Option[(Seq[Expression], Seq[NamedExpression])] = join.joinType match {
      case Inner => Some((l.filters ++ rightFilters ++ others, l.project ++ rightProject))
      case LeftSemi => Some((l.filters ++ rightFilters ++ others, l.project))
      case LeftOuter if plain && rightFilters.isEmpty => Some((l.filters, l.project ++ rightProject))
      case RightOuter if plain && l.filters.isEmpty => Some((rightFilters, l.project ++ rightProject))
      case FullOuter if plain && l.filters.isEmpty && rightFilters.isEmpty => Some((Nil, l.project ++ rightProject))
      case _ => None
    }
    shape.flatMap { case (filters, project) =>
      val output = keepNullability(project, join.output)
      if (output.map(_.exprId) != join.output.map(_.exprId)) {
        logDebug(s"$ruleName: not fusing ${join.joinType} join: the fused output would differ")
        None
      } else {
        val reads = marks(l.relation).fusedReads + marks(r.relation).fusedReads
        val scan = relation.copy(table = table(relation).withMarks(OptimizerMarks(fusedReads = reads)))
        val body = if (filters.isEmpty) scan else Filter(filters.reduce(And), scan)
        val fused = Project(output, body)
        fused.setTagValue(OptimizerMarks.FiredRules, Seq(ruleName))
        logInfo(s"$ruleName: fused $reads reads of ${table(relation).name()} (${join.joinType} join on the key)")
        Some(fused)
      }
    }
  }

  /** `a` with `b`'s attributes it lacks (metadata columns), and `b`'s attributes mapped to `a`'s. */
  private def merge(
      a: DataSourceV2Relation,
      b: DataSourceV2Relation): (DataSourceV2Relation, AttributeMap[Attribute]) = {
    val byName = a.output.map(x => x.name -> x).toMap
    val missing = b.output.filterNot(x => byName.contains(x.name))
    val mapping = AttributeMap(b.output.flatMap(x => byName.get(x.name).map(y => (x: Attribute) -> (y: Attribute))))
    (a.copy(output = a.output ++ missing), mapping)
  }

  /** Expressions whose join output is nullable (outer joins) are marked nullable too. */
  private def keepNullability(project: Seq[NamedExpression], joinOutput: Seq[Attribute]): Seq[NamedExpression] = {
    val nullable = joinOutput.filter(_.nullable).map(_.exprId).toSet
    project.map {
      case ne if !nullable.contains(ne.exprId) || ne.nullable => ne
      case a: Attribute => Alias(KnownNullable(a), a.name)(a.exprId, a.qualifier, Some(a.metadata))
      case al: Alias =>
        Alias(
          KnownNullable(al.child),
          al.name)(al.exprId, al.qualifier, al.explicitMetadata, al.nonInheritableMetadataKeys)
      case other => other
    }
  }

  private def table(r: DataSourceV2Relation) = r.table.asInstanceOf[io.omnitable.spark.source.OmniTableTable]
  private def marks(r: DataSourceV2Relation): OptimizerMarks = table(r).marks

  private[optimizer] def joinTypes: Seq[JoinType] = Seq(Inner, LeftSemi, LeftOuter, RightOuter, FullOuter)
}
