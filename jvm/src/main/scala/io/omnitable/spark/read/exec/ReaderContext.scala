package io.omnitable.spark.read.exec

import java.io.{EOFException, FileNotFoundException, InterruptedIOException, IOException}
import java.nio.channels.ClosedByInterruptException
import java.nio.file.{AccessDeniedException, NoSuchFileException}
import java.util.zip.{DataFormatException, ZipException}

import scala.util.control.{ControlThrowable, NonFatal}

import io.omnitable.spark.errors.{OmniTableErrors, OmniTableReadException}
import io.omnitable.spark.metrics.ScanReportAccumulator
import org.apache.hadoop.fs.{ChecksumException, PathPermissionException, UnsupportedFileSystemException}
import org.apache.hadoop.security.AccessControlException
import org.apache.parquet.io.ParquetDecodingException
import org.apache.spark.{TaskContext, TaskKilledException}
import org.apache.spark.broadcast.Broadcast
import org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException
import org.apache.spark.sql.types.StructType

/**
 * How the readers of one scan read: rows per batch, the pushed data filter (tested against
 * row-group statistics when `rowGroupFiltering`), the pushed limit and what to do with corrupt files.
 */
final case class ReaderSettings(
    batchSize: Int,
    rowFilter: Option[Filter],
    rowGroupFiltering: Boolean,
    limit: Option[Long],
    corrupt: CorruptInputPolicy)

/** What every reader of one scan shares (serialized once per task with the reader factory). */
final case class ReaderContext(
    table: String,
    readSchema: StructType,
    settings: ReaderSettings,
    report: ScanReportAccumulator,
    hadoopConf: Broadcast[SerializableHadoopConf],
    late: Option[LateMaterialization] = None,
    /**
     * True for the inner reader of late materialization: its rows never leave the outer reader
     * (so a corrupt fragment can be skipped whenever found) and its fragment is counted by the outer one.
     */
    inner: Boolean = false,
    /** How a task of a scan planned on the executors lists its fragments; None: the driver listed them. */
    slices: Option[SliceResolver] = None)

/** What a reader does with a file it cannot read: retry, then skip the fragment or fail. */
final case class CorruptInputPolicy(skipFragment: Boolean, retries: Int, backoffMillis: Long = 50)

/** Rows of a fragment a reader returns: a contiguous range, or chosen rows (late materialization). */
private[exec] sealed trait RowSet {
  def size: Long
}

private[exec] object RowSet {
  final case class Range(start: Long, end: Long) extends RowSet {
    def size: Long = end - start
  }

  /** Fragment rows in increasing order. */
  final case class Rows(rows: Array[Long]) extends RowSet {
    def size: Long = rows.length.toLong
  }
}

/** Thrown inside a reader to abandon its fragment; never leaves the reader. */
private[exec] object FragmentSkipped extends ControlThrowable

/** Why a column file could not be read, which decides whether it is retried and skippable. */
private[exec] sealed trait ReadFailure

private[exec] object ReadFailure {

  /** The file's bytes are broken (footer, magic, page, checksum, compression, row count): retried, then skippable. */
  case object Corrupt extends ReadFailure

  /** An I/O error a retry may fix (network, object store): retried, then the task fails with it. */
  case object Transient extends ReadFailure

  /**
   * Not the file's bytes but what reads them: schema drift, a missing file, permission denied, no
   * FileSystem for the scheme, an unsupported Spark build, a bug. Fails at once with its cause.
   */
  case object Environment extends ReadFailure
}

object CorruptInputPolicy {

  /** Whether `e` may be handled by the reader at all (not a killed task or a failing JVM). */
  private[exec] def isHandled(e: Throwable): Boolean = e match {
    case _: TaskKilledException => false
    case _: InterruptedIOException | _: ClosedByInterruptException => false
    case _ if Option(TaskContext.get()).exists(_.isInterrupted()) => false
    case NonFatal(_) => true
    case _ => false
  }

  /**
   * The one classifier of read errors (docs/spark.md, "Dirty input"). Anything in the cause chain
   * that says the environment is at fault (a missing file or file system, permissions, schema
   * drift, linkage or reflection errors of another Spark build) wins; otherwise the innermost
   * cause that tells decides: Parquet format, decoding, checksum and decompression errors,
   * truncation and the reader's own format checks are corruption, other I/O errors (also when a
   * decoder wraps them) are transient, anything else (a bug) is not skippable.
   */
  private[exec] def classify(e: Throwable): ReadFailure = {
    val chain = OmniTableErrors.causes(e)
    if (chain.exists(isEnvironment)) ReadFailure.Environment
    else {
      chain.reverseIterator.collectFirst {
        case t if isCorrupt(t) => ReadFailure.Corrupt
        case _: IOException => ReadFailure.Transient
      }.getOrElse(ReadFailure.Environment)
    }
  }

  private def isEnvironment(t: Throwable): Boolean = t match {
    case o: OmniTableReadException => o.omniErrorClass == OmniTableErrors.SchemaMismatch
    case _: SchemaColumnConvertNotSupportedException => true
    case _: FileNotFoundException | _: AccessDeniedException | _: NoSuchFileException => true
    case _: UnsupportedFileSystemException | _: AccessControlException | _: PathPermissionException => true
    case _: SecurityException | _: LinkageError | _: ReflectiveOperationException => true
    case _ => false
  }

  private val CodecPackages =
    Seq("com.github.luben.zstd.", "org.xerial.snappy.", "net.jpountz.lz4.", "io.airlift.compress.", "org.brotli.")

  private val DecoderPackages =
    Seq("org.apache.parquet.", "org.apache.spark.sql.execution.datasources.parquet.") ++ CodecPackages

  private def isCorrupt(t: Throwable): Boolean = t match {
    case o: OmniTableReadException =>
      o.omniErrorClass == OmniTableErrors.CorruptFile || o.omniErrorClass == OmniTableErrors.MisalignedFile
    case _: ParquetDecodingException | _: ChecksumException | _: EOFException => true
    case _: DataFormatException | _: ZipException => true
    case _ if isThrift(t.getClass) || CodecPackages.exists(t.getClass.getName.startsWith) => true
    case _: RuntimeException => // a decoder fed garbage (bad magic, bad lengths, bad encodings)
      t.getStackTrace.headOption.exists(f => DecoderPackages.exists(f.getClassName.startsWith))
    case _ => false
  }

  private def isThrift(c: Class[_]): Boolean =
    c != null && (c.getName.endsWith("thrift.TException") || isThrift(c.getSuperclass))
}
