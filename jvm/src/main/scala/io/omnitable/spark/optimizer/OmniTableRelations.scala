package io.omnitable.spark.optimizer

import scala.jdk.CollectionConverters._

import io.omnitable.spark.source.OmniTableTable
import org.apache.spark.sql.catalyst.expressions.{
  Alias,
  Attribute,
  AttributeMap,
  Expression,
  NamedExpression,
  PredicateHelper,
  SubqueryExpression,
  UserDefinedExpression
}
import org.apache.spark.sql.catalyst.plans.logical.{Filter, LogicalPlan, Project}
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation

/** Recognizes omnitable reads in logical plans. */
private[optimizer] object OmniTableRelations extends PredicateHelper {

  /** A relation reading an omnitable table (DataFrame `format("omnitable")` or the SQL catalog). */
  object Read {
    def unapply(plan: LogicalPlan): Option[(DataSourceV2Relation, OmniTableTable)] = plan match {
      case r: DataSourceV2Relation => r.table match {
          case t: OmniTableTable => Some(r -> t)
          case _ => None
        }
      case _ => None
    }
  }

  def options(r: DataSourceV2Relation): Map[String, String] = r.options.asCaseSensitiveMap().asScala.toMap

  /**
   * A chain of Projects and Filters over one omnitable relation, flattened: `project` and
   * `filters` are expressed over the relation's attributes (aliases substituted; the projected
   * names keep their expression ids, so the chain's output is unchanged).
   */
  final case class Chain(project: Seq[NamedExpression], filters: Seq[Expression], relation: DataSourceV2Relation) {
    def output: Seq[Attribute] = project.map(_.toAttribute)
  }

  /**
   * `plan` as a [[Chain]], or None when it holds anything else, or an expression that is not
   * deterministic, calls a user-defined function or holds a subquery (moving such expressions
   * between operators could change how often or on which rows they run).
   */
  def chain(plan: LogicalPlan): Option[Chain] = plan match {
    case Read(r, _) => Some(Chain(r.output, Nil, r))
    case Project(list, child) if list.forall(movable) =>
      chain(child).map(c => c.copy(project = list.map(substituteNamed(_, aliases(c.project)))))
    case Filter(cond, child) if movable(cond) =>
      chain(child).map(c =>
        c.copy(filters = c.filters ++ splitConjunctivePredicates(substitute(cond, aliases(c.project)))))
    case _ => None
  }

  def movable(e: Expression): Boolean =
    e.deterministic && !SubqueryExpression.hasSubquery(e) && !e.exists(_.isInstanceOf[UserDefinedExpression])

  /** What each attribute produced by `project` stands for (only the aliased ones). */
  def aliases(project: Seq[NamedExpression]): AttributeMap[Expression] =
    AttributeMap(project.collect { case a: Alias => a.toAttribute -> a.child })

  def substitute(e: Expression, map: AttributeMap[Expression]): Expression =
    e.transformUp { case a: Attribute if map.contains(a) => map(a) }

  /** `ne` with `map` substituted, keeping its name and expression id. */
  def substituteNamed(ne: NamedExpression, map: AttributeMap[Expression]): NamedExpression = ne match {
    case a: Attribute if map.contains(a) => Alias(map(a), a.name)(a.exprId, a.qualifier, Some(a.metadata))
    case a: Attribute => a
    case al: Alias =>
      Alias(
        substitute(al.child, map),
        al.name)(al.exprId, al.qualifier, al.explicitMetadata, al.nonInheritableMetadataKeys)
    case other => other
  }
}
