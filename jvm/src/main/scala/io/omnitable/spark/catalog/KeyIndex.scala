package io.omnitable.spark.catalog

import java.nio.channels.Channels
import java.util.{BitSet, LinkedHashMap => JLinkedHashMap}

import scala.util.control.NonFatal

import io.omnitable.spark.errors.OmniTableErrors
import org.apache.arrow.memory.RootAllocator
import org.apache.arrow.vector.{BigIntVector, UInt8Vector, VectorSchemaRoot}
import org.apache.arrow.vector.ipc.{ArrowFileReader, ArrowFileWriter}
import org.apache.arrow.vector.types.pojo.{ArrowType, Field, Schema}
import org.apache.arrow.vector.util.ByteArrayReadableSeekableByteChannel
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

/**
 * One fragment's global key index (python/omnitable/format/keyindex.py, docs/format.md):
 * `<fragment path>/_key_index.arrow`, an uncompressed Arrow IPC file of the fragment's rows
 * sorted by their [[KeyHash]] (`h1`, `h2` uint64, unsigned order) with each row's `offset` in the
 * fragment. The file is immutable and follows its fragment's visibility; deleted rows are masked
 * by the fragment's deletion vector when probing ([[KeyIndex.probe]]).
 */
final class KeyIndex private (val h1: Array[Long], val h2: Array[Long], val offset: Array[Long]) {

  def size: Int = h1.length

  /** The row offset of `key` in this fragment (-1: absent), deleted rows included. */
  def find(key: KeyHash): Long = {
    var lo = 0
    var hi = h1.length
    while (lo < hi) { // first entry not below key in (h1, h2) unsigned order
      val mid = (lo + hi) >>> 1
      val c = java.lang.Long.compareUnsigned(h1(mid), key.h1)
      if (c < 0 || (c == 0 && java.lang.Long.compareUnsigned(h2(mid), key.h2) < 0)) lo = mid + 1 else hi = mid
    }
    if (lo < h1.length && h1(lo) == key.h1 && h2(lo) == key.h2) offset(lo) else -1L
  }
}

object KeyIndex {

  /** The index file's name inside its fragment's directory. */
  val FileName = "_key_index.arrow"

  /** Index entries held in memory by the process-wide cache at most (~1.2 GB), as keyindex.py. */
  private val CacheRows = 50000000L

  /** Where a fragment's live row holding a probed key is: its position in the probed fragments and its offset. */
  final case class Located(fragment: Int, offset: Long)

  /** The URI of the index file of the fragment at `fragmentPath` (relative to the table) of the table at `tableUri`. */
  def uri(tableUri: String, fragmentPath: String): String =
    DataPaths.join(tableUri, fragmentPath) + "/" + FileName

  /**
   * For each key of `keys`, the live row of `fragments` (the visible fragments of a snapshot of
   * table `table` at `tableUri`) holding it, or None. Runs on the driver: each fragment's index
   * file is read once (and cached, files never change), every key is a binary search in it.
   *
   * @throws io.omnitable.spark.errors.OmniTableReadException (`OMNITABLE_CORRUPT_KEY_INDEX`) for an
   *   unreadable file, another hash scheme, a file not covering its fragment's rows, or two live
   *   rows holding one key; (`OMNITABLE_CORRUPT_DELETION_VECTOR`) for a bad deletion vector
   */
  def probe(
      tableUri: String,
      table: String,
      fragments: Seq[FragmentEntry],
      keys: IndexedSeq[KeyHash],
      conf: Configuration): IndexedSeq[Option[Located]] = {
    val found = Array.fill[Option[Located]](keys.size)(None)
    if (keys.nonEmpty) fragments.zipWithIndex.foreach { case (frag, pos) =>
      val index = load(uri(tableUri, frag.path), frag.rowCount, conf)
      val deleted: BitSet = frag.deletes.map(DeletionVectors.decode(_, frag.rowCount, table, frag.fragmentId)).orNull
      keys.indices.foreach { i =>
        val off = index.find(keys(i))
        if (off >= 0 && (deleted == null || !deleted.get(off.toInt))) {
          if (found(i).isDefined) throw OmniTableErrors.duplicateKeyInIndex(frag.path)
          found(i) = Some(Located(pos, off))
        }
      }
    }
    found.toIndexedSeq
  }

  /**
   * The index file at `fileUri` of a fragment of `rowCount` rows, from the cache or read.
   *
   * @throws io.omnitable.spark.errors.OmniTableReadException (`OMNITABLE_CORRUPT_KEY_INDEX`) when
   *   the file is missing, unreadable, of another hash scheme or not of `rowCount` rows
   */
  def load(fileUri: String, rowCount: Long, conf: Configuration): KeyIndex =
    Cache.get(fileUri).getOrElse {
      val index = read(fileUri, rowCount, conf)
      Cache.put(fileUri, index)
      index
    }

  /**
   * Writes the index of a fragment (at `fragmentPath` of the table at `tableUri`) whose row `i` has
   * key hash `keys(i)`, as keyindex.py `write_key_index` writes it (entries in unsigned (h1, h2)
   * order, schema metadata naming [[KeyHash.Scheme]]); returns the file's URI (for cleanup when the
   * commit fails). Refuses to replace an existing file (index files are immutable); a write that
   * fails removes what it wrote.
   */
  def write(tableUri: String, fragmentPath: String, keys: IndexedSeq[KeyHash], conf: Configuration): String = {
    val order = Array.range(0, keys.size).sortWith((a, b) => keys(a).compare(keys(b)) < 0)
    val fileUri = uri(tableUri, fragmentPath)
    val path = new Path(fileUri)
    val allocator = new RootAllocator()
    val root = VectorSchemaRoot.create(FileSchema, allocator)
    try {
      val h1 = root.getVector("h1").asInstanceOf[UInt8Vector]
      val h2 = root.getVector("h2").asInstanceOf[UInt8Vector]
      val offset = root.getVector("offset").asInstanceOf[BigIntVector]
      root.allocateNew()
      order.indices.foreach { i =>
        h1.setSafe(i, keys(order(i)).h1)
        h2.setSafe(i, keys(order(i)).h2)
        offset.setSafe(i, order(i).toLong)
      }
      root.setRowCount(order.length)
      val fs = path.getFileSystem(conf)
      val out = fs.create(path, false)
      try
        try {
          val writer = new ArrowFileWriter(root, null, Channels.newChannel(out))
          writer.start()
          writer.writeBatch()
          writer.end()
          writer.close()
        } finally out.close()
      catch {
        case NonFatal(e) => // no partial file left behind
          try fs.delete(path, false)
          catch { case NonFatal(d) => e.addSuppressed(d) }
          throw e
      }
    } finally {
      root.close()
      allocator.close()
    }
    fileUri
  }

  /** The index file's schema (keyindex.py `_SCHEMA`). */
  private val FileSchema: Schema = {
    val u64 = new ArrowType.Int(64, false)
    val i64 = new ArrowType.Int(64, true)
    new Schema(
      java.util.List.of(
        Field.nullable("h1", u64),
        Field.nullable("h2", u64),
        Field.nullable("offset", i64)),
      java.util.Map.of("omnitable.key_hash", KeyHash.Scheme)
    )
  }

  /** Forgets every cached index (the next probes read the files again). */
  def clearCache(): Unit = Cache.clear()

  private def read(fileUri: String, rowCount: Long, conf: Configuration): KeyIndex = {
    val (scheme, h1, h2, offset) =
      try readColumns(fileUri, conf)
      catch {
        case NonFatal(e) => throw OmniTableErrors.corruptKeyIndex(s"Cannot read key index $fileUri: $e", e)
      }
    if (scheme != KeyHash.Scheme || h1.length != rowCount) {
      val hashedWith = if (scheme.isEmpty) "'no scheme'" else s"'$scheme'"
      throw OmniTableErrors.corruptKeyIndex(
        s"Cannot use key index $fileUri: it has ${h1.length} rows hashed with $hashedWith, the fragment has " +
          s"$rowCount rows and this version reads '${KeyHash.Scheme}'",
        null
      )
    }
    new KeyIndex(h1, h2, offset)
  }

  /** The file's hash scheme (empty when it records none) and its three columns. */
  private def readColumns(fileUri: String, conf: Configuration): (String, Array[Long], Array[Long], Array[Long]) = {
    val path = new Path(fileUri)
    val fs = path.getFileSystem(conf)
    val bytes = new Array[Byte](Math.toIntExact(fs.getFileStatus(path).getLen))
    val in = fs.open(path)
    try in.readFully(0L, bytes)
    finally in.close()
    val allocator = new RootAllocator()
    try {
      val reader = new ArrowFileReader(new ByteArrayReadableSeekableByteChannel(bytes), allocator)
      try {
        val root = reader.getVectorSchemaRoot
        val scheme =
          Option(root.getSchema.getCustomMetadata).flatMap(m => Option(m.get("omnitable.key_hash"))).getOrElse("")
        val h1, h2, offset = Array.newBuilder[Long]
        while (reader.loadNextBatch()) {
          val a = root.getVector("h1").asInstanceOf[UInt8Vector]
          val b = root.getVector("h2").asInstanceOf[UInt8Vector]
          val o = root.getVector("offset").asInstanceOf[BigIntVector]
          (0 until root.getRowCount).foreach { i => h1 += a.get(i); h2 += b.get(i); offset += o.get(i) }
        }
        (scheme, h1.result(), h2.result(), offset.result())
      } finally reader.close()
    } finally allocator.close()
  }

  /** Loaded index files by URI, least recently used evicted first once they hold more than [[CacheRows]] entries. */
  private object Cache {
    private val items = new JLinkedHashMap[String, KeyIndex](16, 0.75f, true)
    private var rows = 0L

    def get(uri: String): Option[KeyIndex] = synchronized(Option(items.get(uri)))

    def put(uri: String, index: KeyIndex): Unit = synchronized {
      if (!items.containsKey(uri)) {
        items.put(uri, index)
        rows += index.size
        val it = items.entrySet().iterator()
        while (rows > CacheRows && items.size > 1 && it.hasNext) {
          val oldest = it.next()
          if (oldest.getKey != uri) {
            rows -= oldest.getValue.size
            it.remove()
          }
        }
      }
    }

    def clear(): Unit = synchronized {
      items.clear()
      rows = 0L
    }
  }
}
