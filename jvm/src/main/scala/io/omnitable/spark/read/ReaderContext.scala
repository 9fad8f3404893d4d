package io.omnitable.spark.read

import java.io.InterruptedIOException
import java.nio.channels.ClosedByInterruptException

import scala.util.control.{ControlThrowable, NonFatal}

import io.omnitable.spark.metrics.ScanReportAccumulator
import org.apache.spark.{TaskContext, TaskKilledException}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.types.StructType

/** What every reader of one scan shares (serialized once per task with the reader factory). */
final case class ReaderContext(
    table: String,
    readSchema: StructType,
    batchSize: Int,
    rowFilter: Option[Filter],
    rowGroupFiltering: Boolean,
    limit: Option[Long],
    corrupt: CorruptInputPolicy,
    report: ScanReportAccumulator,
    hadoopConf: Broadcast[SerializableHadoopConf],
    late: Option[LateMaterialization] = None,
    /**
     * True for the inner reader of late materialization: its rows never leave the outer reader
     * (so a corrupt fragment can be skipped whenever found) and its fragment is counted by the outer one.
     */
    inner: Boolean = false)

/** What a reader does with a file it cannot read: retry, then skip the fragment or fail. */
final case class CorruptInputPolicy(skipFragment: Boolean, retries: Int, backoffMillis: Long = 50)

/** Rows of a fragment a reader returns: a contiguous range, or chosen rows (late materialization). */
private[read] sealed trait RowSet {
  def size: Long
}

private[read] object RowSet {
  final case class Range(start: Long, end: Long) extends RowSet {
    def size: Long = end - start
  }

  /** Fragment rows in increasing order. */
  final case class Rows(rows: Array[Long]) extends RowSet {
    def size: Long = rows.length.toLong
  }
}

/** Thrown inside a reader to abandon its fragment; never leaves the reader. */
private[read] object FragmentSkipped extends ControlThrowable

private[read] object CorruptInputPolicy {

  /**
   * Whether `e` is what a corrupt, truncated or unreachable file can cause (I/O errors, Parquet
   * decoding errors, broken format invariants, runtime errors of a decoder fed garbage) rather
   * than the task being killed or the JVM failing.
   */
  def isUnreadable(e: Throwable): Boolean = e match {
    case _: TaskKilledException => false
    case _: InterruptedIOException | _: ClosedByInterruptException => false
    case _ if Option(TaskContext.get()).exists(_.isInterrupted()) => false
    case NonFatal(_) => true
    case _ => false
  }
}
