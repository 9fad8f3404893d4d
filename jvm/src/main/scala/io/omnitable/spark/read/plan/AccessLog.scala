package io.omnitable.spark.read.plan

import java.nio.charset.StandardCharsets
import java.time.Instant
import java.time.temporal.ChronoUnit
import java.util.concurrent.ThreadLocalRandom

import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.ObjectMapper
import io.omnitable.spark.catalog.TableSnapshot
import io.omnitable.spark.conf.OmniTableConf
import org.apache.hadoop.fs.Path
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

/**
 * The access log (docs/governance.md, "Access log"; Python's omnitable/format/access.py): one
 * small JSON-lines file per scan under `<table>/_access/`, naming the columns the scan reads
 * (read schema and pushed predicates, system columns left out), written on the driver when the
 * scan is planned. Best effort: any error is logged at debug level and never fails a read. Off
 * with the session setting `spark.omnitable.access_log=false`, or the table property
 * `read.access_log=false` where the session does not set it.
 */
private[spark] object AccessLog extends Logging {

  private val Json = new ObjectMapper()

  /** Whether scans of `snap` are recorded. */
  def enabled(spark: SparkSession, snap: TableSnapshot): Boolean =
    spark.conf.getOption(OmniTableConf.ACCESS_LOG.sessionKey)
      .orElse(snap.table.properties.get("read.access_log"))
      .forall(v => !v.trim.equalsIgnoreCase("false"))

  /** Record a scan of `names` (unknown and system names ignored; a scan of every column is not recorded). */
  def record(snap: TableSnapshot, names: Set[String]): Unit =
    try {
      val spark = SparkSession.active
      val cols = snap.userColumns.filter(c => names.contains(c.name) && !c.name.startsWith("_ai_")).sortBy(_.columnId)
      if (cols.nonEmpty && cols.size < snap.userColumns.size && enabled(spark, snap)) {
        val entry = Json.createObjectNode()
        entry.put("table_id", snap.table.tableId)
        snap.snapshot.segments.headOption.fold(entry.putNull("branch"))(s => entry.put("branch", s.branch))
        entry.put("version", snap.snapshot.version)
        val names = entry.putArray("columns")
        cols.foreach(c => names.add(c.name))
        val ids = entry.putArray("column_ids")
        cols.foreach(c => ids.add(c.columnId))
        entry.put("reader", "spark")
        entry.put("time", Instant.now().truncatedTo(ChronoUnit.MILLIS).toString)
        entry.put("count", 1)
        val name = f"${System.currentTimeMillis()}%013d-jvm-${ThreadLocalRandom.current().nextLong() >>> 1}%x.json"
        val path = new Path(s"${snap.tableUri}/_access/$name")
        val out = path.getFileSystem(spark.sparkContext.hadoopConfiguration).create(path, false)
        try out.write((Json.writeValueAsString(entry) + "\n").getBytes(StandardCharsets.UTF_8))
        finally out.close()
      }
    } catch {
      case NonFatal(e) => logDebug(s"access log of ${snap.table.name} not recorded: $e")
    }
}
