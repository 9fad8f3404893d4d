package io.omnitable.spark.metadata

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.time.Instant

import scala.util.Try

import io.omnitable.spark.catalog.{CatalogReader, MetadataQueries, RunRow, TableSnapshot}
import org.apache.spark.sql.Row

/**
 * The rows of the catalog-backed metadata tables ([[MetadataTables]]) of one snapshot, in the
 * order of their Python API, handed one by one to `emit` (fragments and files page through the
 * catalog, `pageSize` rows per query: none of them is held here). `.errors` reads the error
 * table ([[ErrorRows]]).
 */
private[metadata] final class MetadataRows(reader: CatalogReader, snap: TableSnapshot, pageSize: Int) {
  import MetadataRows._

  def foreach(name: String)(emit: Row => Unit): Unit = name match {
    case "errors" => ErrorRows.rows(reader, snap, pageSize).foreach(emit)
    case _ => reader.withMetadata(s"the $name of table '${snap.table.name}'")(q => fromCatalog(q, name, emit))
  }

  private def fromCatalog(q: MetadataQueries, name: String, emit: Row => Unit): Unit = name match {
    case "history" => q.history(snap).foreach { c =>
        emit(Row(
          c.version,
          opt(c.parentVersion),
          c.branch,
          c.op,
          c.runId.orNull,
          c.summary,
          instant(c.committedAt),
          c.expired))
      }
    case "batches" => q.batches(snap).foreach(b => emit(Row(b.name, b.rows, b.fragments, instant(b.createdAt))))
    case "fragments" => q.foreachFragment(snap, pageSize) { f =>
        emit(Row(
          f.fragmentId,
          f.batchName,
          f.batchId,
          f.seq,
          f.rowCount,
          f.deletedRows,
          f.rowCount - f.deletedRows,
          f.path,
          f.addedVersion))
      }
    case "files" => files(q, emit)
    case "features" =>
      CatalogFacts.currentFeatures(q.featureRows(snap), snap.columns.map(_.name).toSet).foreach { f =>
        val r = f.row
        emit(Row(
          r.name,
          r.version,
          r.kind,
          f.inputs,
          f.outputs.toMap,
          r.fingerprint,
          instant(r.registeredAt),
          r.registeredVersion,
          r.branch,
          r.definition))
      }
    case "lineage" => lineage(q, emit)
    case "status" => new StatusGrid(q, snap).rows().foreach(emit)
    case "runs" => q.runs(snap.table).foreach { r =>
        emit(Row(
          r.runId,
          r.kind,
          runStatus(r),
          r.plan.orNull,
          r.metrics.orNull,
          r.message.orNull,
          instant(r.startedAt),
          r.finishedAt.map(instant).orNull,
          r.host.orNull,
          opt(r.pid),
          r.heartbeatAt.map(instant).orNull
        ))
      }
    case "refs" => q.refs(snap.table).foreach { r =>
        val created = instant(r.createdAt)
        emit(Row(
          r.name,
          r.kind,
          r.version,
          r.parent.orNull,
          opt(r.forkVersion),
          created,
          opt(r.maxAgeS),
          r.maxAgeS.map(s => created.plusSeconds(s)).orNull))
      }
  }

  /** Each visible file with the names (visible in the snapshot, any state) of its set's columns. */
  private def files(q: MetadataQueries, emit: Row => Unit): Unit = {
    val names = q.columnNames(snap).map(c => c.columnId -> c.name).toMap
    val sets = q.columnSets(snap.table)
    q.foreachFile(snap, pageSize) { f =>
      val columns = sets.getOrElse(f.setId, Nil)
      emit(Row(
        f.fileId,
        f.fragmentId,
        f.batchName,
        f.groupName,
        f.path,
        f.rowCount,
        f.sizeBytes,
        f.addedVersion,
        f.runId.orNull,
        columns.map(_.columnId),
        columns.flatMap(c => names.get(c.columnId)),
        columns.flatMap(c => c.featureVersion.flatMap(v => names.get(c.columnId).map(_ -> v))).toMap
      ))
    }
  }

  /** The lineage of the providing file of every derived column in every fragment (`Table.lineage()`). */
  private def lineage(q: MetadataQueries, emit: Row => Unit): Unit = {
    val rows = q.lineage(snap)
    val columns = snap.columns.filter(c => rows.exists(_.columnId == c.columnId))
    val (fragments, providers) = CatalogFacts.providers(q, snap, columns.map(_.columnId).toSet)
    val current = CatalogFacts.currentLineage(rows, providers)
    for {
      c <- columns
      f <- fragments
      l <- current.get((f.fragmentId, c.columnId))
    } emit(Row(
      c.name,
      f.batchName,
      f.fragmentId,
      l.path,
      l.addedVersion,
      l.feature,
      l.featureVersion,
      l.inputs,
      l.runId,
      l.engine,
      l.errorCount))
  }
}

private[metadata] object MetadataRows {

  /** A running run whose driver is gone is abandoned, as in python/omnitable/catalog/catalog.py. */
  val AbandonedAfterSeconds: Long = 300L

  private def opt(v: Option[Long]): java.lang.Long = v.map(Long.box).orNull

  /** A catalog time (ISO-8601 UTC text) as an instant. */
  def instant(iso: String): Instant = Instant.parse(iso)

  /**
   * `running` is reported as `abandoned` when the run's driver process is gone: its pid is not
   * alive on this host, or its heartbeat is older than [[AbandonedAfterSeconds]].
   */
  def runStatus(r: RunRow, now: Instant = Instant.now()): String = {
    val deadHere = r.host.contains(hostName) && r.pid.exists(p => !ProcessHandle.of(p).isPresent)
    val silent = r.heartbeatAt.exists(b => instant(b).plusSeconds(AbandonedAfterSeconds).isBefore(now))
    if (r.status == "running" && (deadHere || silent)) "abandoned" else r.status
  }

  /** This machine's name as Python's `socket.gethostname()` gives it (the kernel's node name). */
  private lazy val hostName: String = Try(
    new String(Files.readAllBytes(Paths.get("/proc/sys/kernel/hostname")), StandardCharsets.UTF_8).trim)
    .getOrElse(java.net.InetAddress.getLocalHost.getHostName)
}
