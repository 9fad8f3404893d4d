package io.omnitable.spark.write

import java.nio.file.{Files, Path => JPath}

import io.omnitable.spark.read.exec.SerializableHadoopConf
import org.apache.hadoop.conf.Configuration
import org.apache.spark.sql.types.StructType
import org.scalatest.funsuite.AnyFunSuite

/** An aborted append removes its whole batch directory, including files a late task closes afterwards. */
class AbortedBatchSuite extends AnyFunSuite {

  private def task(root: JPath, batchId: String): WriteTask = WriteTask(
    root.toUri.toString,
    "boom",
    batchId,
    new StructType(),
    Nil,
    0L,
    WriteSettings("boom", 1000L, 1000L, "zstd"),
    new SerializableHadoopConf(new Configuration()))

  private def write(root: JPath, rel: String): JPath = {
    val p = root.resolve(rel)
    Files.createDirectories(p.getParent)
    Files.write(p, Array[Byte](1, 2, 3))
  }

  test("a batch id is never one whose directory exists") {
    val root = Files.createTempDirectory("omni-abort")
    val t = task(root, "ffffffff-0000")
    write(root, s"${t.batchDirectory}/f/base-x.parquet")
    // a fresh id sharing the 8-character prefix of an existing batch directory is skipped
    assert(OmniTableBatchWrite.unusedBatchId(t, Iterator("ffffffff-1111", "eeeeeeee-2222")) == "eeeeeeee-2222")
    assert(OmniTableBatchWrite.unusedBatchId(t, Iterator("dddddddd-3333")) == "dddddddd-3333")
  }

  test("abort deletes reported fragments, unreported ones and files closed after the abort") {
    val root = Files.createTempDirectory("omni-abort")
    val t = task(root, OmniTableBatchWrite.unusedBatchId(task(root, "x")))
    val other = task(root, OmniTableBatchWrite.unusedBatchId(t)) // another batch of the same name
    val reported = write(root, s"${t.batchDirectory}/f1/base-a.parquet")
    val unreported = write(root, s"${t.batchDirectory}/f2/base-b.parquet")
    val kept = write(root, s"${other.batchDirectory}/f3/base-c.parquet")
    OmniTableBatchWrite.deleteBatch(t, Seq(s"${t.batchDirectory}/f1"))
    assert(!Files.exists(reported) && !Files.exists(unreported))
    val late = write(root, s"${t.batchDirectory}/f4/base-d.parquet") // a task closing after the abort
    val deadline = System.nanoTime() + 60L * 1000 * 1000 * 1000
    while (Files.exists(late) && System.nanoTime() < deadline) Thread.sleep(200)
    assert(!Files.exists(late), "the delayed sweep did not delete a file closed after the abort")
    assert(Files.exists(kept), "another batch's directory must survive")
  }
}
