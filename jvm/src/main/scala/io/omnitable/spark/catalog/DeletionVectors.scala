package io.omnitable.spark.catalog

import java.util.{Base64, BitSet}
import java.util.zip.{DataFormatException, Deflater, Inflater}

import io.omnitable.spark.errors.OmniTableErrors

/**
 * The catalog's encoding of a deletion vector (schema.sql, `deletion_vectors`; written by
 * python/omnitable/vocabulary/deletions.py): base64 of the zlib compression of a little-endian
 * bitmap of the fragment's rows, bit `i % 8` of byte `i / 8` set when row offset `i` is deleted.
 */
object DeletionVectors {

  /**
   * The deleted row offsets of `vector`, the vector of fragment `fragment` (of `rowCount` rows)
   * of table `table`. Fails with [[OmniTableErrors.corruptDeletionVector]] unless the text is
   * base64 of a zlib stream of exactly `ceil(rowCount / 8)` bytes, no bit past `rowCount` is set
   * and the set bits number the catalog's `deleted_count`.
   */
  def decode(vector: DeletionVectorEntry, rowCount: Long, table: String, fragment: String): BitSet = {
    def fail(detail: String, cause: Throwable = null) =
      OmniTableErrors.corruptDeletionVector(table, fragment, vector.vectorId, detail, cause)
    if (rowCount > Int.MaxValue) throw fail(s"a fragment of $rowCount rows is too large for a bitmap")
    val expected = (rowCount + 7) / 8
    val compressed =
      try Base64.getDecoder.decode(vector.vector)
      catch { case e: IllegalArgumentException => throw fail(s"it is not base64 (${e.getMessage})", e) }
    val bitmap = inflate(compressed, expected.toInt, fail(_, _))
    if (bitmap.length != expected) {
      val holds = if (bitmap.length > expected) s"more than $expected" else bitmap.length.toString
      throw fail(s"it holds $holds bytes, a fragment of $rowCount rows needs $expected")
    }
    val bits = BitSet.valueOf(bitmap)
    if (bits.length() > rowCount) throw fail(s"it marks row ${bits.length() - 1}, past the fragment's $rowCount rows")
    if (bits.cardinality() != vector.deletedCount)
      throw fail(s"it marks ${bits.cardinality()} rows, the catalog's deleted_count says ${vector.deletedCount}")
    bits
  }

  /**
   * The stored text of the deleted offsets `deleted` of a fragment of `rowCount` rows, as
   * deletions.py `encode_vector` writes it (zlib level 6 of the `ceil(rowCount / 8)`-byte bitmap).
   */
  def encode(deleted: BitSet, rowCount: Long): String = {
    require(deleted.length() <= rowCount, s"offset ${deleted.length() - 1} past a fragment of $rowCount rows")
    val bitmap = java.util.Arrays.copyOf(deleted.toByteArray, ((rowCount + 7) / 8).toInt)
    val deflater = new Deflater(6)
    try {
      deflater.setInput(bitmap)
      deflater.finish()
      val out = new java.io.ByteArrayOutputStream()
      val buf = new Array[Byte](64 * 1024)
      while (!deflater.finished()) out.write(buf, 0, deflater.deflate(buf))
      Base64.getEncoder.encodeToString(out.toByteArray)
    } finally deflater.end()
  }

  /** The zlib stream `data`, inflated; reads at most `limit + 1` bytes (enough to tell a longer bitmap). */
  private def inflate(data: Array[Byte], limit: Int, fail: (String, Throwable) => Throwable): Array[Byte] = {
    val inflater = new Inflater()
    try {
      inflater.setInput(data)
      val out = new Array[Byte](limit + 1)
      var n = 0
      while (n < out.length && !inflater.finished() && !inflater.needsInput() && !inflater.needsDictionary())
        n += inflater.inflate(out, n, out.length - n)
      if (!inflater.finished() && n < out.length) throw fail("its zlib stream is truncated", null)
      java.util.Arrays.copyOf(out, n)
    } catch {
      case e: DataFormatException => throw fail(s"it is not a zlib stream (${e.getMessage})", e)
    } finally inflater.end()
  }
}
