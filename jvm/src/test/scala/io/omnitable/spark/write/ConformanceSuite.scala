package io.omnitable.spark.write

import java.io.File
import java.nio.file.Files

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.{PythonSteps, PythonStepsSession, TestWarehouses}
import io.omnitable.spark.catalog.{CatalogReader, Failpoints, SnapshotSpec}
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableCommitException, ProcedureErrors, WriteErrors}
import io.omnitable.spark.source.OmniTableCatalog
import org.apache.spark.sql.functions.lit
import org.scalatest.funsuite.AnyFunSuite

/**
 * Commit conformance, JVM implementation: every scenario of tests/conformance/scenarios/ (the
 * files the pytest runner tests/conformance/test_conformance.py reads for the Python committer)
 * run against the JVM committer on SQLite, and on PostgreSQL when OMNITABLE_TEST_POSTGRES_URL is
 * set (CI sets it). The base state and the concurrent writer's steps are done by the Python API
 * (tests/conformance/steps.py, in one `steps.py serve` process for the suite: [[PythonSteps]]);
 * the committing append is a Spark `writeTo(...).append()` (a replace: `overwrite(lit(true))`,
 * INSERT OVERWRITE's plan), a `DELETE FROM`, an update ([[ColumnUpdate]]), a rollback
 * `CALL <catalog>.system.rollback('web', N)`, a revert `CALL <catalog>.system.revert('web', N)`, a merge
 * `CALL <catalog>.system.merge_branch('web', B)` (failpoint `merge.before_commit`), a backfill
 * `CALL <catalog>.system.backfill('web', F)` of a SQL feature (failpoint `backfill.before_commit`,
 * after it computed), an upsert into a table keyed by `url` (a keyed `MERGE INTO`, failpoint
 * `merge.before_commit`), and the concurrent steps run between its snapshot and its commit (failpoint
 * `append.before_commit` / `delete.before_commit` / `update.before_commit` /
 * `rollback.before_commit` / `revert.before_commit`). A scenario's `around` steps (a Python
 * backfill) start first in a process of their own (a second `steps.py serve` process, for the
 * around steps of every scenario: its Spark session starts once), held at their commit (failpoint
 * `backfill.before_commit=pause:DIR`, DIR the scenario's own) while the committing writer runs,
 * then let go.
 */
class ConformanceSuite extends AnyFunSuite with PythonStepsSession {

  private val json = new ObjectMapper()
  private val root = TestWarehouses.repoRoot
  private val scenarios: Seq[String] =
    new File(root, "tests/conformance/scenarios").listFiles().map(_.getName).filter(_.endsWith(".json"))
      .map(_.stripSuffix(".json")).sorted.toSeq
  private val postgres: Option[String] = sys.env.get("OMNITABLE_TEST_POSTGRES_URL").filter(_.nonEmpty)

  /**
   * The PostgreSQL test server in the static configuration, as tests/conftest.py's session: a
   * backfill reads its table through a read option, whose `env:` password is read only for a
   * server configured at start (the catalogs here are set at run time, one per scenario).
   */
  override protected def sparkConf: Map[String, String] =
    postgres.map("spark.omnitable.warehouses.test_postgres" -> _).toMap

  /** The process that runs the `around` steps of every scenario (held at their commit). */
  private lazy val aroundSteps = new PythonSteps()

  override protected def afterAll(): Unit =
    try aroundSteps.close()
    finally super.afterAll()

  /** The `around` steps running in [[aroundSteps]], held at `backfill.before_commit`. */
  private final class Around(warehouse: String, dataRoot: String, name: String, baseNext: Long) {
    private val dir = Files.createTempDirectory("omnitable-around").toFile
    private val reached = new File(dir, "backfill.before_commit.reached")
    private val done = Future(aroundSteps.call("around", warehouse, dataRoot, name, baseNext.toString, dir.getPath))(
      ExecutionContext.global)

    /** Blocks until the steps reached their commit (they plan and compute first). */
    def awaitCommitPoint(): Unit =
      while (!reached.exists()) {
        done.value.foreach(r => fail(s"the around steps ended before their commit: $r"))
        Thread.sleep(100)
      }

    /** Lets them commit and waits for them (a failed step fails the test). */
    def release(): Unit = {
      assert(new File(dir, "backfill.before_commit.go").createNewFile())
      try Await.result(done, 5.minutes)
      catch { case e: PythonSteps.StepFailed => fail(s"the around steps failed:\n${e.getMessage}") }
    }
  }

  /** (warehouse, data root) of a fresh catalog on `backend`. */
  private def freshWarehouse(backend: String): (String, String) = {
    val dir = Files.createTempDirectory("omnitable-conformance").toFile
    backend match {
      case "sqlite" => (new File(dir, "wh").getPath, "")
      case _ => (python("newdb", postgres.get), new File(dir, "data").getPath)
    }
  }

  test("the scenario files are there") {
    assert(scenarios.size >= 6)
  }

  for (backend <- Seq("sqlite", "postgres"); name <- scenarios)
    test(s"$name [$backend]") {
      assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
      run(backend, name)
    }

  private def run(backend: String, name: String): Unit = {
    val scenario = json.readTree(new File(root, s"tests/conformance/scenarios/$name.json"))
    val (warehouse, dataRoot) = freshWarehouse(backend)
    val baseNext = json.readTree(python("prepare", warehouse, dataRoot, name)).get("next_row_id").asLong()
    val catalog = s"conf_${java.util.UUID.randomUUID().toString.take(8)}"
    spark.conf.set(s"spark.sql.catalog.$catalog", classOf[OmniTableCatalog].getName)
    spark.conf.set(s"spark.sql.catalog.$catalog.warehouse", warehouse)
    val commit = scenario.get("commit")
    def concurrent(): Unit = python("concurrent", warehouse, dataRoot, name, baseNext.toString)
    val around =
      Option(scenario.get("around")).filter(_.size > 0).map(_ => new Around(warehouse, dataRoot, name, baseNext))
    around.foreach(_.awaitCommitPoint())
    val outcome: Either[(String, String), Unit] =
      try Right(commit.path("op").asText("append") match {
          case "update" => update(catalog, warehouse, commit, () => concurrent())
          case "merge" => merge(catalog, commit, () => concurrent())
          case "upsert" => keyedMerge(catalog, commit, () => concurrent())
          case "delete" =>
            Failpoints.hooked("delete.before_commit")(concurrent()) {
              spark.sql(s"DELETE FROM $catalog.web WHERE ${deleteWhere(commit)}").collect()
            }
          case "rollback" =>
            Failpoints.hooked("rollback.before_commit")(concurrent()) {
              spark.sql(s"CALL $catalog.system.rollback('web', ${commit.get("to").asLong()})").collect()
            }
          case "revert" =>
            Failpoints.hooked("revert.before_commit")(concurrent()) {
              val dependents = commit.path("dependents").asText("fail")
              spark.sql(
                s"CALL $catalog.system.revert('web', ${commit.get("version").asLong()}, '$dependents')").collect()
            }
          case "merge_branch" =>
            Failpoints.hooked("merge.before_commit")(concurrent()) {
              val (source, strategy) = (commit.get("source").asText(), commit.path("strategy").asText("fail"))
              spark.sql(s"CALL $catalog.system.merge_branch('web', '$source', strategy => '$strategy')").collect()
            }
          case "backfill" => // computed on its snapshot; the concurrent steps run at its commit
            Failpoints.hooked("backfill.before_commit")(concurrent()) {
              spark.sql(s"CALL $catalog.system.backfill('web', '${commit.get("feature").asText()}')").collect()
            }
          case _ => append(catalog, commit, baseNext, () => concurrent())
        })
      catch { case e: Exception => Left(commitError(e)) }
    check(scenario.get("expect"), outcome, warehouse)
    around.foreach(_.release())
    val state = json.readTree(python("state", warehouse, dataRoot))
    val expect = scenario.get("expect")
    assert(state.get("batches") == Option(expect.get("batches")).getOrElse(json.nullNode()))
    assert(state.get("rows") == Option(expect.get("rows")).getOrElse(json.nullNode()))
    if (expect.has("status")) assert(state.get("status") == expect.get("status"), state)
    if (expect.has("columns")) assert(state.get("columns") == expect.get("columns"))
    if (expect.has("batch_order")) assert(state.get("batch_order") == expect.get("batch_order"), state)
  }

  /**
   * The committing append (a replace: `overwrite(lit(true))`, INSERT OVERWRITE's plan), with
   * `ids_after_base` as a supplied `_ai_unique_id_` column (steps.py `commit_rows`).
   */
  private def append(catalog: String, commit: JsonNode, baseNext: Long, concurrent: () => Unit): Unit = {
    val batch = commit.get("batch").asText()
    val rows = (0 until commit.get("rows").asInt()).map(i => (s"$batch-$i", i.toDouble))
    val plain = spark.createDataFrame(rows).toDF("url", "score")
    val df = Option(commit.get("ids_after_base")) match {
      case Some(ids) =>
        val supplied = rows.zipWithIndex.map { case ((u, s), i) => (baseNext + ids.get(i).asLong(), u, s) }
        spark.createDataFrame(supplied).toDF("_ai_unique_id_", "url", "score").coalesce(1)
      case None => plain.coalesce(1)
    }
    Failpoints.hooked("append.before_commit")(concurrent()) {
      val writer = df.writeTo(s"$catalog.web").option("append_name", batch)
      if (commit.path("mode").asText("error") == "replace") writer.overwrite(lit(true)) else writer.append()
    }
  }

  /** The committing update of the `score` of the row whose `url` is given ([[ColumnUpdate]]). */
  private def update(catalog: String, warehouse: String, commit: JsonNode, concurrent: () => Unit): Unit = {
    val url = commit.get("url").asText()
    val id = spark.sql(s"SELECT _ai_unique_id_ FROM $catalog.web WHERE url = '$url'").head().getLong(0)
    val df = spark.createDataFrame(Seq((id, commit.get("score").asDouble()))).toDF("_ai_unique_id_", "score")
    Failpoints.hooked("update.before_commit")(concurrent()) {
      ColumnUpdate.run(spark, warehouse, "web", df, Seq("score"), "main")
    }
  }

  /**
   * The committing `MERGE INTO` of the row whose `url` is given (its `score`: WHEN MATCHED THEN
   * UPDATE), or whose `delete_url` is given (WHEN MATCHED THEN DELETE), matched by `_ai_unique_id_`.
   */
  private def merge(catalog: String, commit: JsonNode, concurrent: () => Unit): Unit =
    if (commit.has("insert")) mergeInsert(catalog, commit, concurrent) else mergeMatched(catalog, commit, concurrent)

  /**
   * `MERGE … WHEN MATCHED THEN UPDATE SET score … WHEN NOT MATCHED THEN INSERT`: the source holds
   * the matched row and `insert`'s rows (steps.py `rows`) with no id, which match nothing; the
   * batch is named by the session setting; the concurrent steps run at `merge.before_commit`.
   */
  private def mergeInsert(catalog: String, commit: JsonNode, concurrent: () => Unit): Unit = {
    val url = commit.get("url").asText()
    val id = spark.sql(s"SELECT _ai_unique_id_ FROM $catalog.web WHERE url = '$url'").head().getLong(0)
    val ins = commit.get("insert")
    val batch = ins.get("batch").asText()
    val fresh = (0 until ins.get("rows").asInt()).map(i => (Option.empty[Long], s"$batch-$i", i.toDouble))
    spark.createDataFrame((Some(id), url, commit.get("score").asDouble()) +: fresh)
      .toDF("_ai_unique_id_", "url", "score").createOrReplaceTempView("merge_src")
    mergeInto(catalog, "merge_src", "t._ai_unique_id_ = s._ai_unique_id_", batch, concurrent)
  }

  /**
   * The committing upsert into the table keyed by `url`: a keyed `MERGE … ON t.url = s.url WHEN
   * MATCHED THEN UPDATE SET score … WHEN NOT MATCHED THEN INSERT` of `urls` with `score` (steps.py
   * `upsert_data`), new keys as batch `batch`; the concurrent steps run at `merge.before_commit`.
   */
  private def keyedMerge(catalog: String, commit: JsonNode, concurrent: () => Unit): Unit = {
    val score = commit.get("score").asDouble()
    val rows = (0 until commit.get("urls").size()).map(i => (commit.get("urls").get(i).asText(), score))
    spark.createDataFrame(rows).toDF("url", "score").createOrReplaceTempView("upsert_src")
    mergeInto(catalog, "upsert_src", "t.url = s.url", commit.get("batch").asText(), concurrent)
  }

  /**
   * `MERGE INTO web t USING source s ON on` updating `score` of matched rows and inserting the
   * others as batch `batch`; the concurrent steps run at `merge.before_commit`.
   */
  private def mergeInto(catalog: String, source: String, on: String, batch: String, concurrent: () => Unit): Unit = {
    spark.conf.set("spark.omnitable.write.appendName", batch)
    try
      Failpoints.hooked("merge.before_commit")(concurrent()) {
        spark.sql(
          s"MERGE INTO $catalog.web t USING $source s ON $on " +
            "WHEN MATCHED THEN UPDATE SET score = s.score " +
            "WHEN NOT MATCHED THEN INSERT (url, score) VALUES (s.url, s.score)").collect()
      }
    finally spark.conf.unset("spark.omnitable.write.appendName")
  }

  private def mergeMatched(catalog: String, commit: JsonNode, concurrent: () => Unit): Unit = {
    val deletes = commit.has("delete_url")
    val url = commit.get(if (deletes) "delete_url" else "url").asText()
    val id = spark.sql(s"SELECT _ai_unique_id_ FROM $catalog.web WHERE url = '$url'").head().getLong(0)
    val score = if (deletes) 0.0 else commit.get("score").asDouble()
    spark.createDataFrame(Seq((id, score))).toDF("_ai_unique_id_", "score").createOrReplaceTempView("merge_src")
    val action = if (deletes) "DELETE" else "UPDATE SET score = s.score"
    Failpoints.hooked(if (deletes) "delete.before_commit" else "update.before_commit")(concurrent()) {
      spark.sql(
        s"MERGE INTO $catalog.web t USING merge_src s ON t._ai_unique_id_ = s._ai_unique_id_ " +
          s"WHEN MATCHED THEN $action").collect()
    }
  }

  /** A committing delete's filter as SQL (steps.py `delete_where`: `url` or `score` equal to a value). */
  private def deleteWhere(commit: JsonNode): String =
    if (commit.has("url")) s"url = '${commit.get("url").asText()}'"
    else s"score = ${commit.get("score").asDouble()}"

  /** `outcome`: Right (committed) or the error's (class, message). */
  private def check(expect: JsonNode, outcome: Either[(String, String), Unit], warehouse: String): Unit = {
    val kinds = Map(
      "conflict" -> Set(WriteErrors.CommitConflict, ProcedureErrors.MergeConflict),
      "not_found" -> Set(WriteErrors.TableDropped, "OMNITABLE_NOT_FOUND"),
      "exists" -> Set(WriteErrors.BatchExists),
      "invalid" -> Set("OMNITABLE_INVALID_OPERATION")
    )
    if (expect.has("version")) {
      assert(outcome.isRight, outcome)
      val head = new CatalogReader(warehouse).loadTable("web", SnapshotSpec.Head).snapshot.version
      assert(head == expect.get("version").asLong())
    } else {
      val (kind, errorClasses) = kinds.find { case (k, _) => expect.has(k) }.get
      val (errorClass, detail) = outcome.swap.getOrElse(fail(s"expected $kind, the writer committed"))
      assert(errorClasses.contains(errorClass), detail)
      assert(detail.contains(expect.get(kind).asText()), detail)
    }
  }

  /** The commit or procedure error inside what Spark threw (it wraps errors of the job's commit). */
  private def commitError(e: Throwable): (String, String) =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).collectFirst {
      case c: OmniTableCommitException => (c.omniErrorClass, c.detail)
      case a: OmniTableAnalysisException => (a.omniErrorClass, a.getMessage)
    }.getOrElse(throw e)
}
