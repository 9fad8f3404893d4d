package io.omnitable.spark.catalog

import java.nio.charset.StandardCharsets.UTF_8
import java.time.LocalDate

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.types.{ByteType, DataType, DateType, IntegerType, LongType, ShortType, StringType}
import org.apache.spark.unsafe.types.UTF8String

/**
 * The 128-bit hash of a keyed table's key (`create_table(key=[...])`), the order of its global key
 * index (`_key_index.arrow`, [[KeyIndex]]): the JVM port of python/omnitable/vocabulary/keys.py
 * `key_hashes`, equal to it bit for bit (the hash is part of the on-storage format, scheme
 * [[KeyHash.Scheme]]).
 *
 *  - a string: SipHash-2-4 of its UTF-8 bytes under each of two fixed 16-byte keys (pandas'
 *    `hash_object_array`), each then mixed by pandas' 64-bit finalizer ([[KeyHash.mix]]);
 *  - an integer of any width or a date (days since 1970-01-01): the finalizer of its int64 value,
 *    both halves equal (a bijection: integer keys never collide);
 *  - several columns: in key order, each half `mix(acc * 0x100000001B3 ^ next)`.
 *
 * Halves are unsigned 64-bit values held in a `Long` (compare with `java.lang.Long.compareUnsigned`).
 */
final case class KeyHash(h1: Long, h2: Long) {

  /** This key hash followed by the next key column's hash `next` (keys.py, the fold). */
  def fold(next: KeyHash): KeyHash =
    KeyHash(KeyHash.mix(h1 * KeyHash.Fold ^ next.h1), KeyHash.mix(h2 * KeyHash.Fold ^ next.h2))

  /** Unsigned order of (h1, h2): the order of an index file's entries. */
  def compare(other: KeyHash): Int = {
    val c = java.lang.Long.compareUnsigned(h1, other.h1)
    if (c != 0) c else java.lang.Long.compareUnsigned(h2, other.h2)
  }

  override def toString: String =
    s"KeyHash(${java.lang.Long.toUnsignedString(h1)}, ${java.lang.Long.toUnsignedString(h2)})"
}

object KeyHash {

  /** The hash scheme index files record in their schema metadata (`omnitable.key_hash`). */
  val Scheme = "omnitable-key-hash-1"

  private val Fold = 0x100000001b3L
  private val SipKey1 = sipKey("omnitable-key-h1")
  private val SipKey2 = sipKey("omnitable-key-h2")

  /**
   * Whether distinct keys of these column types (in key order) can collide at 64 bits, not 128
   * (python/omnitable/vocabulary/keys.py `weak_key_hash`): a key of several columns, none a
   * string, has equal halves ([[ofLong]]); a key of one integer or date column never collides.
   */
  def weak(types: Seq[DataType]): Boolean = types.size > 1 && !types.exists(_.isInstanceOf[StringType])

  /** The hash of one string key column value. */
  def ofString(s: String): KeyHash = ofUtf8(s.getBytes(UTF_8))

  /** The hash of one string key column value given as its UTF-8 bytes. */
  def ofUtf8(bytes: Array[Byte]): KeyHash =
    KeyHash(mix(sipHash24(SipKey1._1, SipKey1._2, bytes)), mix(sipHash24(SipKey2._1, SipKey2._2, bytes)))

  /** The hash of one integer (any width) or date (days since the epoch) key column value. */
  def ofLong(v: Long): KeyHash = {
    val h = mix(v)
    KeyHash(h, h)
  }

  /**
   * The hash of a key given as its column values in key order: `String` or `UTF8String`,
   * `Byte`/`Short`/`Int`/`Long`, `java.time.LocalDate` or `java.sql.Date` (no nulls: keys are never null).
   */
  def of(values: Seq[Any]): KeyHash = {
    require(values.nonEmpty, "a key has at least one column")
    values.map(ofValue).reduceLeft(_ fold _)
  }

  /** The hash of the key in columns `ordinals` (of types `types`, in key order) of a Spark row. */
  def ofRow(row: InternalRow, ordinals: Seq[Int], types: Seq[DataType]): KeyHash = {
    require(ordinals.nonEmpty && ordinals.size == types.size, "a key has at least one column, each with its type")
    ordinals.zip(types).map { case (i, t) =>
      t match {
        case _: StringType => ofUtf8(row.getUTF8String(i).getBytes)
        case ByteType => ofLong(row.getByte(i).toLong)
        case ShortType => ofLong(row.getShort(i).toLong)
        case IntegerType | DateType => ofLong(row.getInt(i).toLong)
        case LongType => ofLong(row.getLong(i))
        case other => throw new IllegalArgumentException(s"a key column cannot have type ${other.simpleString}")
      }
    }.reduceLeft(_ fold _)
  }

  private def ofValue(v: Any): KeyHash = v match {
    case s: String => ofString(s)
    case s: UTF8String => ofUtf8(s.getBytes)
    case b: Byte => ofLong(b.toLong)
    case s: Short => ofLong(s.toLong)
    case i: Int => ofLong(i.toLong)
    case l: Long => ofLong(l)
    case d: LocalDate => ofLong(d.toEpochDay)
    case d: java.sql.Date => ofLong(d.toLocalDate.toEpochDay)
    case null => throw new IllegalArgumentException("a key value cannot be null")
    case other => throw new IllegalArgumentException(s"a key value cannot be a ${other.getClass.getName}")
  }

  /** pandas' `hash_array` finalizer of a uint64 (a bijection of 64-bit values). */
  def mix(v: Long): Long = {
    var x = v
    x ^= x >>> 30
    x *= 0xbf58476d1ce4e5b9L
    x ^= x >>> 27
    x *= 0x94d049bb133111ebL
    x ^ (x >>> 31)
  }

  /** A 16-byte ASCII SipHash key as its two little-endian 64-bit halves. */
  private def sipKey(key: String): (Long, Long) = {
    val b = key.getBytes(UTF_8)
    require(b.length == 16, "a SipHash key has 16 bytes")
    (littleEndian(b, 0, 8), littleEndian(b, 8, 8))
  }

  /** `n` (at most 8) bytes of `b` from `from` as a little-endian unsigned value. */
  private def littleEndian(b: Array[Byte], from: Int, n: Int): Long = {
    var v = 0L
    var i = n - 1
    while (i >= 0) {
      v = (v << 8) | (b(from + i) & 0xffL)
      i -= 1
    }
    v
  }

  /** SipHash-2-4 (the reference algorithm, 64-bit output) of `data` under key (`k0`, `k1`). */
  def sipHash24(k0: Long, k1: Long, data: Array[Byte]): Long = {
    val s =
      Array(k0 ^ 0x736f6d6570736575L, k1 ^ 0x646f72616e646f6dL, k0 ^ 0x6c7967656e657261L, k1 ^ 0x7465646279746573L)
    val whole = data.length & ~7
    var i = 0
    while (i < whole) {
      val m = littleEndian(data, i, 8)
      s(3) ^= m
      sipRound(s); sipRound(s)
      s(0) ^= m
      i += 8
    }
    val last = (data.length.toLong << 56) | littleEndian(data, whole, data.length - whole)
    s(3) ^= last
    sipRound(s); sipRound(s)
    s(0) ^= last
    s(2) ^= 0xffL
    sipRound(s); sipRound(s); sipRound(s); sipRound(s)
    s(0) ^ s(1) ^ s(2) ^ s(3)
  }

  private def sipRound(s: Array[Long]): Unit = {
    s(0) += s(1); s(1) = java.lang.Long.rotateLeft(s(1), 13); s(1) ^= s(0); s(0) = java.lang.Long.rotateLeft(s(0), 32)
    s(2) += s(3); s(3) = java.lang.Long.rotateLeft(s(3), 16); s(3) ^= s(2)
    s(0) += s(3); s(3) = java.lang.Long.rotateLeft(s(3), 21); s(3) ^= s(0)
    s(2) += s(1); s(1) = java.lang.Long.rotateLeft(s(1), 17); s(1) ^= s(2); s(2) = java.lang.Long.rotateLeft(s(2), 32)
  }
}
