package io.omnitable.spark.source

import io.omnitable.spark.catalog.{SnapshotSpec, TableNames}
import io.omnitable.spark.metadata.MetadataTables
import org.apache.spark.sql.connector.catalog.Identifier

/**
 * What an identifier of [[OmniTableCatalog]] names: table `table` of namespace `namespace`,
 * optionally one of its refs. Namespaces have one level; `default` holds the tables named
 * without one, so `omnitable.web` and `omnitable.default.web` are the same table.
 *
 * Refs follow Iceberg's convention: a last part `branch_<name>` is branch `<name>` of the table
 * the parts before it name, `tag_<name>` tag `<name>` (lower-case prefixes; the ref name is the
 * rest exactly as written: quote names with `-`, `` omnitable.web.`tag_train-v1` ``).
 *
 * Resolution rule (Iceberg's: a table wins over a suffix form), see [[resolve]]:
 *  - `[] . web`: table `default.web`.
 *  - `[a] . b`: table `b` of namespace `a` if it exists; otherwise, when `b` is a suffix form
 *    (`branch_x`, `tag_x`), that ref of table `default.a`.
 *  - `[a, b] . c`: `c` is a suffix form of table `b` of namespace `a`.
 *  - anything deeper names nothing.
 * So `omnitable.ns.branch_x` is the table `branch_x` of namespace `ns` when there is one, and
 * `omnitable.default.ns.branch_x` always the branch. Suffix forms are parsed in [[suffix]] only:
 * besides refs, a last part that is a name of [[MetadataTables.Names]] (lower-case: `history`,
 * `files`, ...) is that metadata table of the table (`omnitable.web.history`,
 * `omnitable.ns.web.history`).
 *
 * @param ref the branch or tag: `Some(("branch", name))` or `Some(("tag", name))`
 * @param metadata the metadata table (`history`, `files`, ...), if the identifier names one
 */
private[source] final case class TableAddress(
    namespace: String,
    table: String,
    ref: Option[(String, String)],
    metadata: Option[String] = None) {

  /** The table's address as the catalog reader takes it (`web`, `ns.web`). */
  def tableAddress: String = TableNames.address(namespace, table)

  /** `base` (a version, a ref or an instant from `VERSION AS OF` / `TIMESTAMP AS OF`) on this ref. */
  def spec(base: SnapshotSpec): SnapshotSpec = ref match {
    case Some((TableAddress.Branch, name)) => base.copy(branch = Some(name))
    case Some((_, name)) => base.copy(tag = Some(name))
    case None => base
  }

  /** The identifier as the user wrote it (without the catalog), for messages. */
  def display: String =
    ref.fold(tableAddress) { case (kind, name) => s"$tableAddress.${kind}_$name" } + metadata.fold("")(m => s".$m")
}

private[source] object TableAddress {
  val Branch: String = "branch"
  val Tag: String = "tag"

  /** What `ident` may name, first choice first (see the class comment); empty: nothing. */
  def candidates(ident: Identifier): Seq[TableAddress] = {
    val name = ident.name()
    ident.namespace() match {
      case Array() => Seq(TableAddress(TableNames.DefaultNamespace, name, None))
      case Array(a) => TableAddress(a, name, None) +: suffix(TableNames.DefaultNamespace, a, name).toSeq
      case Array(a, b) => suffix(a, b, name).toSeq
      case _ => Nil
    }
  }

  /**
   * The first candidate whose table exists (`tableExists` takes a table address, and is not
   * called for an identifier with one candidate); when none does, the last one (its error names
   * the table the user most likely meant).
   */
  def resolve(ident: Identifier, tableExists: String => Boolean): Option[TableAddress] =
    candidates(ident) match {
      case Seq(only) => Some(only)
      case all => all.find(a => tableExists(a.tableAddress)).orElse(all.lastOption)
    }

  /** The suffix form `name` of table `namespace.table` (a ref or a metadata table), if `name` is one. */
  private def suffix(namespace: String, table: String, name: String): Option[TableAddress] =
    if (MetadataTables.isName(name)) Some(TableAddress(namespace, table, None, Some(name)))
    else
      Seq(Branch, Tag).collectFirst {
        case kind if name.startsWith(s"${kind}_") && name.length > kind.length + 1 =>
          TableAddress(namespace, table, Some(kind -> name.substring(kind.length + 1)))
      }
}
