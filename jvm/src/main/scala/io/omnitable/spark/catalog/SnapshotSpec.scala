package io.omnitable.spark.catalog

/**
 * How a reader names a snapshot. At most one of `branch`, `tag`, `ref` (`ref` is a branch or a
 * tag, from SQL `VERSION AS OF 'name'`); `version` may go with a branch (time travel on that
 * branch); `asOfMicros` (SQL `TIMESTAMP AS OF`) picks the newest version committed at or before
 * that instant on the branch (default `main`). Nothing set: the head of `main`.
 */
final case class SnapshotSpec(
    branch: Option[String] = None,
    tag: Option[String] = None,
    ref: Option[String] = None,
    version: Option[Long] = None,
    asOfMicros: Option[Long] = None) {

  /** The options that were given, as `key=value` (for messages). */
  def described: Seq[String] =
    branch.map(b => s"branch='$b'").toSeq ++ tag.map(t => s"tag='$t'") ++ ref.map(r => s"ref='$r'") ++
      version.map(v => s"versionAsOf=$v") ++ asOfMicros.map(t => s"timestampAsOf=$t")
}

object SnapshotSpec {
  val Head: SnapshotSpec = SnapshotSpec()
}
