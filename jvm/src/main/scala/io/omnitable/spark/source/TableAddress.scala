package io.omnitable.spark.source

import io.omnitable.spark.catalog.SnapshotSpec
import io.omnitable.spark.metadata.MetadataTables
import org.apache.spark.sql.connector.catalog.Identifier

/**
 * What an identifier of [[OmniTableCatalog]] names (Iceberg's convention for refs and metadata
 * tables): `[] . web` is table `web`; `[web] . branch_audit` is branch `audit` of table `web`,
 * and `[web] . tag_v1` tag `v1` of it. The prefixes are lower-case and the ref name is the rest,
 * exactly as written (quote names with `-`: `` omnitable.web.`tag_train-v1` ``). `[web] . history`
 * (any name of [[MetadataTables.Names]], lower-case) is that metadata table of `web`. Any other
 * identifier names nothing.
 *
 * @param ref the branch or tag: `Some(("branch", name))` or `Some(("tag", name))`
 * @param metadata the metadata table (`history`, `files`, ...), if the identifier names one
 */
private[source] final case class TableAddress(
    table: String,
    ref: Option[(String, String)],
    metadata: Option[String] = None) {

  /** `base` (a version, a ref or an instant from `VERSION AS OF` / `TIMESTAMP AS OF`) on this ref. */
  def spec(base: SnapshotSpec): SnapshotSpec = ref match {
    case Some((TableAddress.Branch, name)) => base.copy(branch = Some(name))
    case Some((_, name)) => base.copy(tag = Some(name))
    case None => base
  }

  /** The identifier as the user wrote it (without the catalog), for messages. */
  def display: String =
    ref.fold(table) { case (kind, name) => s"$table.${kind}_$name" } + metadata.fold("")(m => s".$m")
}

private[source] object TableAddress {
  val Branch: String = "branch"
  val Tag: String = "tag"

  def parse(ident: Identifier): Option[TableAddress] = ident.namespace() match {
    case Array() => Some(TableAddress(ident.name(), None))
    case Array(table) if MetadataTables.isName(ident.name()) => Some(TableAddress(table, None, Some(ident.name())))
    case Array(table) =>
      Seq(Branch, Tag).collectFirst {
        case kind if ident.name().startsWith(s"${kind}_") && ident.name().length > kind.length + 1 =>
          TableAddress(table, Some(kind -> ident.name().substring(kind.length + 1)))
      }
    case _ => None
  }
}
