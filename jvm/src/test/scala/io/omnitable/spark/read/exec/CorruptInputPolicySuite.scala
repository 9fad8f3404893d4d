package io.omnitable.spark.read.exec

import java.io.{EOFException, FileNotFoundException, IOException}
import java.lang.reflect.InvocationTargetException
import java.net.SocketTimeoutException
import java.nio.file.AccessDeniedException

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.hadoop.fs.UnsupportedFileSystemException
import org.apache.parquet.io.ParquetDecodingException
import org.apache.spark.sql.execution.datasources.SchemaColumnConvertNotSupportedException
import org.scalatest.funsuite.AnyFunSuite
import shaded.parquet.org.apache.thrift.protocol.TProtocolException

/**
 * The one classifier of read errors: what `on_corrupt=skip_fragment` may skip (corruption), what
 * is retried but never skipped (transient I/O) and what fails at once (everything else). The
 * file-based cases (truncated, garbage, chmod 000, wrong type, missing, unknown scheme) are in
 * tests/spark/test_spark_dirty_input.py and CorruptInputSuite; these are the wrappings around them.
 */
class CorruptInputPolicySuite extends AnyFunSuite {
  import ReadFailure._

  private def wrapped(e: Throwable): Throwable = OmniTableErrors.fileReadFailed("file:/x.parquet", e)

  private val cases: Seq[(String, Throwable, ReadFailure)] = Seq(
    ("bad page", new ParquetDecodingException("could not read page"), Corrupt),
    ("truncated", new EOFException("Reached the end of stream"), Corrupt),
    ("row count", OmniTableErrors.misalignedFile("file:/x.parquet", 999, 1000), Corrupt),
    ("footer out of bounds", OmniTableErrors.corruptFooter("file:/x.parquet", "bytes [4, 99)"), Corrupt),
    ("thrift garbage", new IOException("can not read FileMetaData", new TProtocolException("no 'version'")), Corrupt),
    ("network", new SocketTimeoutException("Read timed out"), Transient),
    ("network in a decoder", new ParquetDecodingException("page", new SocketTimeoutException("timed out")), Transient),
    ("missing file", new FileNotFoundException("/x.parquet (No such file or directory)"), Environment),
    ("permission", new AccessDeniedException("/x.parquet"), Environment),
    ("unknown scheme", new UnsupportedFileSystemException("No FileSystem for scheme \"s3\""), Environment),
    ("wrong type", new SchemaColumnConvertNotSupportedException("text", "INT64", "string"), Environment),
    ("missing column", OmniTableErrors.schemaMismatch("file:/x.parquet", "no column 'text'"), Environment),
    ("other Spark build", new InvocationTargetException(new NoSuchMethodError("init")), Environment),
    ("bug", new NullPointerException(), Environment)
  )

  test("every kind of read error has one class, wrapped by the reader or not") {
    cases.foreach { case (name, e, expected) =>
      assert(CorruptInputPolicy.classify(e) == expected, name)
      assert(CorruptInputPolicy.classify(wrapped(e)) == expected, s"$name (wrapped)")
    }
  }

  test("a runtime error counts as corruption only when a Parquet decoder raised it") {
    val decoder = new IllegalArgumentException("negative length")
    decoder.setStackTrace(Array(new StackTraceElement("org.apache.parquet.bytes.BytesUtils", "read", "B.java", 1)))
    assert(CorruptInputPolicy.classify(decoder) == Corrupt)
    val ours = new IllegalArgumentException("negative length")
    ours.setStackTrace(Array(new StackTraceElement("io.omnitable.spark.read.ColumnFile", "open", "C.scala", 1)))
    assert(CorruptInputPolicy.classify(ours) == Environment)
  }

  test("killed tasks and fatal JVM errors are not handled at all") {
    assert(!CorruptInputPolicy.isHandled(new org.apache.spark.TaskKilledException("killed")))
    assert(!CorruptInputPolicy.isHandled(new OutOfMemoryError()))
    assert(!CorruptInputPolicy.isHandled(new java.io.InterruptedIOException()))
    assert(CorruptInputPolicy.isHandled(new EOFException()))
  }
}
