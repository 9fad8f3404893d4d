package io.omnitable.spark.catalog

/**
 * Table addresses as both languages write them (python/omnitable/vocabulary/names.py): `web` is
 * table `web` of namespace `default`, `ns.web` table `web` of namespace `ns` (namespaces have one
 * level). [[address]] is the inverse: the bare name in `default`, `ns.name` elsewhere.
 */
object TableNames {
  val DefaultNamespace: String = "default"

  /** (namespace, name) of `address`; None when it has more than one dot or an empty part. */
  def split(address: String): Option[(String, String)] = address.split("\\.", -1) match {
    case Array(name) if name.nonEmpty => Some(DefaultNamespace -> name)
    case Array(ns, name) if ns.nonEmpty && name.nonEmpty => Some(ns -> name)
    case _ => None
  }

  def address(namespace: String, name: String): String =
    if (namespace == DefaultNamespace) name else s"$namespace.$name"

  private val Name = "^[A-Za-z_][A-Za-z0-9_]{0,127}$".r

  /** Whether `name` is a valid namespace (or table) name: the rule of the Python side. */
  def validName(name: String): Boolean = Name.matches(name)
}
