package io.omnitable.spark.catalog

import java.time.Instant

import scala.collection.mutable

import io.omnitable.spark.errors.OmniTableErrors

/**
 * Resolves a [[SnapshotSpec]] to a version and its segments, exactly as docs/catalog.md
 * ("Resolving a snapshot") and the Python reader (omnitable/catalog/snapshot.py) do:
 *
 *  - branch `b` at version `v`: `[(b, v)]` then the segments of `(parent_branch, fork_version)`;
 *  - tag `t`: the segments of `(t.parent_branch, t.version)`;
 *  - version `v`: the segments of `(commits[v].branch, v)`; with a branch, `v` must be covered
 *    by that branch's head segments.
 */
private[catalog] final class SnapshotResolver(conn: Jdbc.Conn, table: TableEntry, warehouse: String) {
  import SnapshotResolver._

  private lazy val refs: Map[String, RefRow] = Jdbc.query(
    conn,
    "SELECT name, kind, version, parent_branch, fork_version FROM refs WHERE table_id = ?",
    table.tableId) { rs =>
    RefRow(
      rs.getString(1),
      rs.getString(2),
      rs.getLong(3),
      Option(rs.getString(4)),
      Jdbc.optLong(rs, 5))
  }.map(r => r.name -> r).toMap

  private def names(kind: String): Seq[String] = refs.values.filter(_.kind == kind).map(_.name).toSeq

  def resolve(spec: SnapshotSpec): SnapshotId = {
    val selectors = Seq(spec.branch, spec.tag, spec.ref).count(_.isDefined)
    if (selectors > 1 || (spec.tag.isDefined && (spec.version.isDefined || spec.asOfMicros.isDefined)) ||
      (spec.version.isDefined && spec.asOfMicros.isDefined) ||
      (spec.ref.isDefined && (spec.version.isDefined || spec.asOfMicros.isDefined))) {
      throw OmniTableErrors.conflictingSnapshotOptions(table.name, spec.described)
    }
    (spec.ref, spec.tag, spec.version) match {
      case (Some(name), _, _) => resolveRef(name)
      case (_, Some(name), _) => resolveTag(name)
      case (_, _, Some(v)) => resolveVersion(v, spec.branch)
      case _ => resolveBranch(spec.branch.getOrElse(SystemColumns.MainBranch), spec.asOfMicros)
    }
  }

  private def resolveRef(name: String): SnapshotId = refs.get(name) match {
    case Some(r) if r.kind == "tag" => resolveTag(name)
    case Some(r) if r.kind == "branch" => resolveBranch(name, None)
    case _ => throw OmniTableErrors.refNotFound(table.name, "branch or tag", name, refs.keys.toSeq)
  }

  private def resolveTag(name: String): SnapshotId = {
    val tag = refs.get(name).filter(_.kind == "tag")
      .getOrElse(throw OmniTableErrors.refNotFound(table.name, "tag", name, names("tag")))
    val parent = tag.parentBranch.getOrElse(throw OmniTableErrors.corruptCatalog(
      warehouse,
      s"tag '$name' of table '${table.name}' has no parent branch"))
    SnapshotId(tag.version, branchSegments(parent, tag.version), s"tag $name (version ${tag.version})")
  }

  /** The table's expiry record (catalog/horizon.py: `omnitable_meta` key `expiry:<table_id>`), if any. */
  private lazy val expiry: Option[ExpiryRecord] = ExpiryRecord.read(conn, table.tableId)

  /**
   * catalog/horizon.py `check_not_expired`: `version`, committed on `owner`, is below that branch's expiry
   * horizon and pinned by no ref, so an expire commit may have deleted rows it saw: refused.
   */
  def checkNotExpired(version: Long, owner: String): Unit = expiry.filter(_.expired(owner, version)).foreach { r =>
    throw OmniTableErrors.versionExpired(table.name, version, owner, r.horizons(owner), r.version)
  }

  private def resolveVersion(v: Long, branch: Option[String]): SnapshotId = {
    val commitBranch = commitBranchOf(v)
    checkNotExpired(v, commitBranch)
    branch.foreach { b =>
      val head = branchSegments(b, branchHead(b))
      if (!head.exists(s => s.branch == commitBranch && v <= s.upto)) {
        throw OmniTableErrors.versionNotOnBranch(table.name, v, b)
      }
    }
    SnapshotId(v, branchSegments(commitBranch, v), s"version $v" + branch.map(b => s" of branch $b").getOrElse(""))
  }

  private def resolveBranch(branch: String, asOfMicros: Option[Long]): SnapshotId = {
    val head = branchHead(branch)
    asOfMicros match {
      case Some(ts) =>
        val v = versionAsOf(branchSegments(branch, head), ts, branch)
        checkNotExpired(v, commitBranchOf(v))
        SnapshotId(
          v,
          branchSegments(commitBranchOf(v), v),
          s"version $v of branch $branch (as of ${formatMicros(ts)})")
      case None =>
        SnapshotId(head, branchSegments(branch, head), s"branch $branch (version $head)")
    }
  }

  private def branchHead(branch: String): Long = refs.get(branch).filter(_.kind == "branch")
    .getOrElse(throw OmniTableErrors.refNotFound(table.name, "branch", branch, names("branch"))).version

  private def branchSegments(branch: String, upto: Long): Seq[Segment] = {
    val out = mutable.ArrayBuffer.empty[Segment]
    val seen = mutable.Set.empty[String]
    var current: Option[String] = Some(branch)
    var limit = upto
    while (current.isDefined) {
      val name = current.get
      if (!seen.add(name)) throw OmniTableErrors.corruptCatalog(warehouse, s"branch '$branch' has cyclic parents")
      val ref = refs.get(name).filter(_.kind == "branch")
        .getOrElse(throw OmniTableErrors.refNotFound(table.name, "branch", name, names("branch")))
      out += Segment(name, limit)
      current = ref.parentBranch
      limit = ref.forkVersion.getOrElse(limit)
    }
    out.toSeq
  }

  private def commitBranchOf(version: Long): String = {
    if (version < 0) throw OmniTableErrors.versionNotFound(table.name, version, latestVersion)
    Jdbc.query(
      conn,
      "SELECT branch FROM commits WHERE table_id = ? AND version = ?",
      table.tableId,
      Long.box(version))(_.getString(1)).headOption
      .getOrElse(throw OmniTableErrors.versionNotFound(table.name, version, latestVersion))
  }

  private def latestVersion: Long = Jdbc.query(
    conn,
    "SELECT MAX(version) FROM commits WHERE table_id = ?",
    table.tableId)(rs => rs.getLong(1)).headOption.getOrElse(0L)

  /** Newest version in `segments` committed at or before `micros` (UTC epoch microseconds). */
  private def versionAsOf(segments: Seq[Segment], micros: Long, branch: String): Long = {
    val commits = Jdbc.query(
      conn,
      "SELECT version, branch, committed_at FROM commits WHERE table_id = ?",
      table.tableId)(rs => (rs.getLong(1), rs.getString(2), rs.getString(3)))
    val eligible = commits.filter { case (v, b, at) =>
      segments.exists(s => s.branch == b && v <= s.upto) && toMicros(at) <= micros
    }
    if (eligible.isEmpty) throw OmniTableErrors.noVersionAsOf(table.name, branch, SnapshotResolver.formatMicros(micros))
    eligible.map(_._1).max
  }
}

private[spark] object SnapshotResolver {
  final case class RefRow(
      name: String,
      kind: String,
      version: Long,
      parentBranch: Option[String],
      forkVersion: Option[Long])

  def formatMicros(micros: Long): String =
    Instant.ofEpochSecond(Math.floorDiv(micros, 1000000L), Math.floorMod(micros, 1000000L) * 1000L).toString

  /** ISO-8601 UTC text ('2026-11-29T11:24:37.123456Z') to epoch microseconds. */
  def toMicros(iso: String): Long = {
    val i = Instant.parse(iso)
    Math.addExact(Math.multiplyExact(i.getEpochSecond, 1000000L), i.getNano / 1000L)
  }
}
