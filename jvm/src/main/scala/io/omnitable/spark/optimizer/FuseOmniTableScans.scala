package io.omnitable.spark.optimizer

import io.omnitable.spark.catalog.SystemColumns
import io.omnitable.spark.conf.OmniTableConf
import io.omnitable.spark.optimizer.OmniTableRelations.{chain, Chain, Read}
import io.omnitable.spark.read.plan.OptimizerMarks
import org.apache.spark.internal.Logging
import org.apache.spark.sql.catalyst.expressions.{
  Alias,
  And,
  Attribute,
  AttributeMap,
  AttributeReference,
  EqualNullSafe,
  EqualTo,
  Expression,
  If,
  KnownNotNull,
  KnownNullable,
  Literal,
  NamedExpression,
  Or,
  PredicateHelper
}
import org.apache.spark.sql.catalyst.plans.{FullOuter, Inner, LeftOuter, LeftSemi, RightOuter}
import org.apache.spark.sql.catalyst.plans.logical.{Expand, Filter, Join, JoinHint, LogicalPlan, Project, Union}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.trees.TreePattern.{JOIN, UNION}
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation
import org.apache.spark.sql.types.BooleanType

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
 * Repeated application fuses n-way joins (4 projections joined on the key → 1 scan). A
 * `UNION ALL` of reads of one snapshot (per-feature DataFrames stacked into one) becomes one read
 * whose rows are expanded into every branch's row, kept where that branch's filters hold (a
 * branch's expressions are evaluated only on those rows). The fused
 * relation's table carries `fusedReads` in its [[OptimizerMarks]] (EXPLAIN: `FuseOmniTableScans:
 * n reads -> 1 scan`) and the new Project the [[OptimizerMarks.FiredRules]] tag.
 *
 * Backs off (leaves the join alone) for: join hints; different snapshots (versions, branches,
 * tags), tables, batch/fragment restrictions or options; any non-deterministic expression,
 * user-defined function or subquery on either side; other join types (anti, cross) or
 * conditions without the key equality; outer joins whose outer side is filtered; unions by
 * name with missing columns, or with any branch that is not such a read.
 * Turned off by `spark.omnitable.optimizer.fuse_scans=false`.
 */
object FuseOmniTableScans extends Rule[LogicalPlan] with PredicateHelper with Logging {

  override val ruleName: String = OptimizerMarks.FuseScansRule

  override def apply(plan: LogicalPlan): LogicalPlan =
    if (!OmniTableConf.fromSQLConf().fuseScans) plan
    else plan.transformUpWithPruning(_.containsPattern(JOIN)) {
      case j: Join if j.hint == JoinHint.NONE => fuse(j).getOrElse(j)
    }.transformUpWithPruning(_.containsPattern(UNION)) {
      case u: Union if u.children.size > 1 && !u.byName && !u.allowMissingCol => fuseUnion(u).getOrElse(u)
    }

  /**
   * `UNION ALL` of n reads of one snapshot → one read whose rows are each expanded into the n
   * branches' rows (Spark's `Expand`), each kept where its branch's filters hold; a branch's
   * values are evaluated only on the rows it keeps (wrapped in `If(filters, value, NULL)`), so
   * they never see, or fail on, another branch's rows. Under the expansion the relation is filtered by the OR of the branches' filters (so pushdown still
   * prunes); a branch without filters keeps every row.
   */
  private def fuseUnion(u: Union): Option[LogicalPlan] = {
    val chains = u.children.map(chain)
    if (chains.exists(_.isEmpty)) return None
    val all = chains.flatten
    if (!all.tail.forall(c => sameRows(all.head.relation, c.relation))) return None
    // A fresh instance: the union's output ids (its first branch's) must not name relation columns.
    val relation = all.tail.foldLeft(all.head.relation)((acc, c) => merge(acc, c.relation)._1).newInstance()
    val branches = all.map { c =>
      val toBase = merge(relation, c.relation)._2
      def onBase(e: Expression): Expression = e.transformUp {
        case a: Attribute if toBase.contains(a) => toBase(a)
      }
      val values = c.project.map {
        case a: Alias => onBase(a.child)
        case other => onBase(other)
      }
      (values, c.filters.map(onBase).reduceOption(And).getOrElse(Literal(true)))
    }
    val reads = all.map(c => marks(c.relation).fusedReads).sum
    val scan = withReads(relation, reads)
    val source = if (branches.exists(_._2 == Literal(true))) scan else Filter(branches.map(_._2).reduce(Or), scan)
    // A branch's values are computed only on rows its filters keep (If): computing them on the
    // other branches' rows could fail (ANSI) or cost. Hence nullable slots, made non-null again above.
    val keep = AttributeReference("__omnitable_keep", BooleanType, nullable = true)()
    val slots = u.output.map(a => AttributeReference(a.name, a.dataType, nullable = true, a.metadata)())
    val projections = branches.map {
      case (values, Literal(true, BooleanType)) => values :+ Literal(true)
      case (values, k) => values.map(v => If(k, v, Literal(null, v.dataType))) :+ k
    }
    val output = u.output.zip(slots).map { case (o, s) =>
      Alias(if (o.nullable) s else KnownNotNull(s), o.name)(o.exprId, o.qualifier, Some(o.metadata))
    }
    val fused = Project(output, Filter(keep, Expand(projections, slots :+ keep, source)))
    fused.setTagValue(OptimizerMarks.FiredRules, Seq(ruleName))
    logInfo(s"$ruleName: fused $reads reads of ${table(relation).name()} (UNION ALL)")
    Some(fused)
  }

  private def withReads(r: DataSourceV2Relation, reads: Int): DataSourceV2Relation =
    r.copy(table = table(r).withMarks(OptimizerMarks(fusedReads = reads)))

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
}
