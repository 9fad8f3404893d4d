package io.omnitable.spark.write

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.PythonStepsProcess
import io.omnitable.spark.catalog.{
  CatalogAddress,
  CatalogReader,
  CatalogWriter,
  KeyHash,
  KeyIndex,
  RowLevelCommit,
  SnapshotSpec
}
import io.omnitable.spark.errors.{OmniTableCommitException, WriteErrors}
import org.apache.hadoop.conf.Configuration
import org.scalatest.funsuite.AnyFunSuite

/**
 * [[KeyChecks]]: a JVM upsert commit (keys probed at the base version, `keysChecked`) racing a
 * Python upsert or delete committed between its probe and its commit, on SQLite and PostgreSQL
 * (table `kr` of tests/spark/fixtures/key_index_steps.py): Python inserting a key it inserts, or
 * deleting the row of a key it found, is Python's conflict (nothing committed); Python inserting
 * another key makes it re-check and land; no concurrent commit, it lands at once.
 */
class KeyChecksSuite extends AnyFunSuite with PythonStepsProcess {

  private val json = new ObjectMapper()
  override protected def stepsFile: String = "tests/spark/fixtures/key_index_steps.py"
  private val postgres: Option[String] = sys.env.get("OMNITABLE_TEST_POSTGRES_URL").filter(_.nonEmpty)
  private val conf = new Configuration()

  /** key_index_steps.py's answer to `args`, as JSON. */
  private def pythonJson(args: String*): JsonNode = json.readTree(python(args: _*))

  private def key(id: Long): KeyHash = KeyHash.of(Seq(id))

  /**
   * Table `kr` (keys 0..9) on `backend`; the JVM probes key 1 (found) and 100 (new) at the base,
   * `concurrent` (a Python step, or none) commits, then the JVM commits its upsert through
   * [[KeyChecks]]: (the outcome, how many commit attempts, Python's view afterwards).
   */
  private def race(
      backend: String,
      concurrent: Option[String]): (Either[OmniTableCommitException, Long], Int, JsonNode) = {
    val dir = Files.createTempDirectory("omnitable-keychecks").toFile
    val (warehouse, dataRoot) = backend match {
      case "sqlite" => (new File(dir, "wh").getPath, "")
      case _ => (pythonJson("newdb", postgres.get).asText(), new File(dir, "data").getPath)
    }
    val base = pythonJson("kr", warehouse, dataRoot, """{"op": "create"}""").get("head").asLong()
    val reader = new CatalogReader(warehouse)
    val snap = reader.loadTable("kr", SnapshotSpec.Head)
    assert(snap.snapshot.version == base)
    val fragments = reader.loadFragments(snap).toIndexedSeq
    val probed = KeyIndex.probe(snap.tableUri, "kr", fragments, IndexedSeq(key(1L), key(100L)), conf)
    assert(probed(1).isEmpty, "key 100 is new")
    val at = probed(0).getOrElse(fail("key 1 is in the table"))
    val found = IndexedSeq(KeyChecks.Found(key(1L), fragments(at.fragment).fragmentId, at.offset))
    concurrent.foreach(step => pythonJson("kr", warehouse, dataRoot, step))
    val commit = RowLevelCommit(
      snap.table.tableId,
      "kr",
      "main",
      base,
      "upsert",
      Map("batch" -> "jvm"),
      Nil,
      Map.empty,
      keysChecked = Some(base))
    val writer = new CatalogWriter(CatalogAddress.parse(warehouse))
    var attempts = 0
    val outcome =
      try Right(KeyChecks.commitWith(reader, "kr", commit, IndexedSeq(key(100L)), found, conf) { c =>
          attempts += 1
          writer.commitRowLevel(c)
        })
      catch { case e: OmniTableCommitException => Left(e) }
    (outcome, attempts, pythonJson("kr", warehouse, dataRoot, """{"op": "read"}"""))
  }

  private def conflict(outcome: Either[OmniTableCommitException, Long]): String = outcome match {
    case Left(e) => assert(e.omniErrorClass == WriteErrors.CommitConflict); e.detail
    case Right(v) => fail(s"committed version $v")
  }

  private def ids(after: JsonNode): Seq[Long] = after.get("ids").elements().asScala.map(_.asLong()).toSeq

  for (backend <- Seq("sqlite", "postgres")) {
    test(s"a Python upsert of a key the JVM upsert inserts: Python's conflict, nothing committed [$backend]") {
      assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
      val (outcome, attempts, after) = race(backend, Some("""{"op": "upsert", "ids": [100]}"""))
      assert(conflict(outcome) == "Cannot commit upsert into table 'kr': a concurrent commit (after version 1) " +
        "inserted 1 of the keys it inserts and deleted or moved the rows of 0 of the keys it found; nothing was committed")
      assert(attempts == 1 && after.get("head").asLong() == 2L && ids(after) == (0L to 9L) :+ 100L)
    }

    test(s"a Python delete of a row the JVM upsert found: Python's conflict, nothing committed [$backend]") {
      assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
      val (outcome, attempts, after) = race(backend, Some("""{"op": "delete", "ids": [1]}"""))
      assert(conflict(outcome).contains("inserted 0 of the keys it inserts and deleted or moved the rows of 1 of"))
      assert(attempts == 1 && after.get("head").asLong() == 2L)
    }

    test(s"a Python upsert of another key: the JVM upsert re-checks its keys and lands after it [$backend]") {
      assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
      val (outcome, attempts, after) = race(backend, Some("""{"op": "upsert", "ids": [200]}"""))
      assert(outcome == Right(3L) && attempts == 2)
      assert(after.get("head").asLong() == 3L && ids(after) == (0L to 9L) :+ 200L)
    }

    test(s"no concurrent commit: the JVM upsert lands at once [$backend]") {
      assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
      val (outcome, attempts, after) = race(backend, None)
      assert(outcome == Right(2L) && attempts == 1 && after.get("head").asLong() == 2L)
    }
  }
}
