package io.omnitable.spark.procedures

import java.io.File
import java.nio.file.{Files, StandardCopyOption}

import scala.util.Random

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.PythonStepsSession
import io.omnitable.spark.catalog.Failpoints
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableCommitException}
import io.omnitable.spark.source.OmniTableCatalog
import org.apache.spark.sql.Row
import org.scalatest.funsuite.AnyFunSuite

/**
 * `CALL <catalog>.system.rollback / merge_branch / fast_forward` against Python: for random small
 * histories (tests/conformance/steps.py `history`, in one `serve` process for the suite:
 * [[PythonSteps]]), a JVM rollback and a Python rollback of copies of one SQLite catalog leave
 * the same rows and the same history rows (summaries byte-identical); a fast-forward merge the same; a JVM rollback killed mid-commit leaves nothing
 * visible; bad calls fail with Python's messages. (The races with Python commits are the
 * conformance scenarios, on SQLite and PostgreSQL: write/ConformanceSuite.)
 */
class UndoProceduresSuite extends AnyFunSuite with PythonStepsSession {

  private val json = new ObjectMapper()

  private def freshDir(): File = Files.createTempDirectory("omnitable-undo").toFile

  private def copyTree(from: File, to: File): File = {
    Files.walk(from.toPath).forEach { p =>
      val target = to.toPath.resolve(from.toPath.relativize(p))
      if (Files.isDirectory(p)) Files.createDirectories(target)
      else Files.copy(p, target, StandardCopyOption.REPLACE_EXISTING)
    }
    to
  }

  /** A Spark catalog name for warehouse `wh`. */
  private def catalogFor(wh: File): String = {
    val name = s"undo_${java.util.UUID.randomUUID().toString.take(8)}"
    spark.conf.set(s"spark.sql.catalog.$name", classOf[OmniTableCatalog].getName)
    spark.conf.set(s"spark.sql.catalog.$name.warehouse", wh.getPath)
    name
  }

  private def dump(wh: File, branch: String = "main"): JsonNode = json.readTree(python("dump", wh.getPath, "", branch))

  private def call(sql: String): Row = {
    val rows = spark.sql(sql).collect()
    assert(rows.length == 1)
    rows.head
  }

  /** The OmniTable error (class, message) inside what `body` threw. */
  private def error(body: => Any): (String, String) = {
    val e = intercept[Exception](body)
    Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).collectFirst {
      case c: OmniTableCommitException => (c.omniErrorClass, c.detail)
      case a: OmniTableAnalysisException => (a.omniErrorClass, a.getMessage)
    }.getOrElse(throw e)
  }

  test("rollback of random histories: the JVM and Python leave the same rows and history") {
    val rng = new Random(14)
    for (seed <- 1 to 6) {
      val base = new File(freshDir(), "wh")
      val head = json.readTree(python("history", base.getPath, "", seed.toString)).get("head").asLong()
      val target = 1 + rng.nextInt(head.toInt - 1)
      val py = copyTree(base, new File(freshDir(), "wh"))
      val jvm = copyTree(base, new File(freshDir(), "wh"))
      val pyVersion = json.readTree(python("rollback", py.getPath, "", target.toString)).get("version").asLong()
      val row = call(s"CALL ${catalogFor(jvm)}.system.rollback('web', $target)")
      assert(row.getLong(0) == pyVersion && row.getLong(1) == head && row.getString(2) == "rollback")
      val (p, j) = (dump(py), dump(jvm))
      assert(j == p, s"seed $seed, rollback to $target of $head")
      assert(row.getString(3) == j.get("history").get(0).get("summary").asText())
      // the state of the target: its rows as time travel reads them
      val expected = spark.sql(s"SELECT * FROM ${catalogFor(base)}.web VERSION AS OF $target").collect().toSet
      assert(spark.table(s"${catalogFor(jvm)}.web").collect().toSet == expected, s"seed $seed")
    }
  }

  test("revert of random commits: the JVM and Python commit the same, or refuse with the same message") {
    val rng = new Random(41)
    val classes = Map(
      "CommitConflict" -> "OMNITABLE_COMMIT_CONFLICT",
      "ValidationError" -> "OMNITABLE_INVALID_OPERATION",
      "NotFoundError" -> "OMNITABLE_NOT_FOUND")
    for (seed <- 31 to 38) {
      val base = new File(freshDir(), "wh")
      val head = json.readTree(python("history", base.getPath, "", seed.toString)).get("head").asLong()
      val k = rng.nextInt(head.toInt + 1).toLong
      val py = copyTree(base, new File(freshDir(), "wh"))
      val jvm = copyTree(base, new File(freshDir(), "wh"))
      val out = json.readTree(python("revert", py.getPath, "", k.toString))
      val c = catalogFor(jvm)
      if (out.has("version")) {
        val row = call(s"CALL $c.system.revert('web', $k)")
        assert(row.getLong(0) == out.get("version").asLong() && row.getString(2) == "revert", s"seed $seed, v$k")
      } else {
        val (cls, msg) = error(spark.sql(s"CALL $c.system.revert('web', $k)").collect())
        assert(cls == classes(out.get("error").asText()), s"seed $seed, v$k: $msg")
        assert(msg.contains(out.get("message").asText()), s"seed $seed, v$k: $msg")
      }
      assert(dump(jvm) == dump(py), s"seed $seed, revert of $k of $head")
    }
  }

  test("revert: a note, stale dependents refused as Python refuses them, a keyed table checked in the JVM") {
    val wh = new File(freshDir(), "wh")
    python("history", wh.getPath, "", "3")
    val c = catalogFor(wh)
    val (k1, m1) = error(spark.sql(s"CALL $c.system.revert('web', 1, dependents => 'maybe')").collect())
    assert(k1 == "OMNITABLE_INVALID_OPERATION" && m1.contains("dependents must be one of fail, stale, got 'maybe'"), m1)
    val (k2, m2) = error(spark.sql(s"CALL $c.system.revert('web', -2)").collect())
    assert(k2 == "OMNITABLE_INVALID_OPERATION" && m2.contains("give an integer >= 0, got -2"), m2)
    python("run", wh.getPath, "", """[{"op": "append", "batch": "n1", "rows": 2}]""")
    val head = dump(wh).get("history").get(0).get("version").asLong()
    val row = call(s"CALL $c.system.revert(table => 'web', version => $head, why => 'bad batch')")
    assert(row.getString(3).contains("\"reverted\": " + head) && row.getString(3).contains("\"why\": \"bad batch\""))
    assert(!dump(wh).get("batches").toString.contains("n1"))
    python("run", wh.getPath, "", """[{"op": "create_table", "name": "keyed", "key": "url"}]""")
    val (k3, m3) = error(spark.sql(s"CALL $c.system.revert('keyed', 1)").collect())
    assert(k3 == "OMNITABLE_NOT_FOUND" && m3.contains("Cannot revert version 1 of table 'keyed': no such version"), m3)
  }

  test("rollback with a note, on a branch, and a second rollback that brings the rolled-back state back") {
    val wh = new File(freshDir(), "wh")
    python("history", wh.getPath, "", "21")
    python(
      "run",
      wh.getPath,
      "",
      """[{"op": "create_branch", "name": "dev"}, {"op": "append", "batch": "d1", "rows": 2, "branch": "dev"},
        |{"op": "delete", "url": "b0-0", "branch": "dev"}]""".stripMargin
    )
    val py = copyTree(wh, new File(freshDir(), "wh"))
    val c = catalogFor(wh)
    val devHead = dump(wh, "dev").get("history").get(0).get("version").asLong()
    val first =
      call(s"CALL $c.system.rollback(table => 'web', version => ${devHead - 2}, branch => 'dev', why => 'oops')")
    assert(first.getString(3).contains("\"why\": \"oops\""), first)
    val second = call(s"CALL $c.system.rollback('web', $devHead, 'dev')")
    assert(second.getLong(0) == first.getLong(0) + 1)
    assert(dump(wh, "dev").get("rows") == dump(py, "dev").get("rows"))
    assert(dump(wh).get("rows") == dump(py).get("rows"), "main is untouched")
  }

  test("a JVM rollback killed mid-commit leaves nothing visible") {
    for (point <- Seq("commit.before_insert", "commit.mid_insert", "commit.before_end")) {
      val wh = new File(freshDir(), "wh")
      python("history", wh.getPath, "", "7")
      val before = dump(wh)
      val c = catalogFor(wh)
      spark.conf.set(Failpoints.SessionConf, s"$point=raise")
      try {
        val e = intercept[Exception](spark.sql(s"CALL $c.system.rollback('web', 1)").collect())
        assert(Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).exists(_.getMessage.contains(point)))
      } finally spark.conf.unset(Failpoints.SessionConf)
      assert(dump(wh) == before, point)
      assert(call(s"CALL $c.system.rollback('web', 1)").getString(2) == "rollback", "it runs afterwards")
    }
  }

  test("bad rollbacks fail with Python's messages and commit nothing") {
    val wh = new File(freshDir(), "wh")
    python("history", wh.getPath, "", "5")
    python(
      "run",
      wh.getPath,
      "",
      """[{"op": "create_branch", "name": "dev"}, {"op": "append", "batch": "m1", "rows": 1},
        |{"op": "append", "batch": "d1", "rows": 1, "branch": "dev"}]""".stripMargin
    )
    val before = dump(wh)
    val c = catalogFor(wh)
    val head = before.get("history").get(0).get("version").asLong()
    val devOnly = head + 1
    def refused(sql: String, cls: String, part: String): Unit = {
      val (k, msg) = error(spark.sql(sql).collect())
      assert(k == cls && msg.contains(part), msg)
    }
    refused(
      s"CALL $c.system.rollback('web', -1)",
      "OMNITABLE_INVALID_OPERATION",
      "version must be an integer >= 0, got -1")
    refused(
      s"CALL $c.system.rollback('web', $head)",
      "OMNITABLE_INVALID_OPERATION",
      s"the head of branch 'main' is version $head")
    refused(s"CALL $c.system.rollback('web', 999)", "OMNITABLE_INVALID_OPERATION", "give an earlier version")
    refused(s"CALL $c.system.rollback('web', $devOnly)", "OMNITABLE_INVALID_OPERATION", "give an earlier version")
    refused(
      s"CALL $c.system.rollback('web', $head, 'dev')",
      "OMNITABLE_NOT_FOUND",
      s"Cannot find version $head in the history of branch 'dev'")
    refused(s"CALL $c.system.rollback('web', 1, 'nope')", "OMNITABLE_REF_NOT_FOUND", "branch 'nope'")
    refused(s"CALL $c.system.rollback('nope', 1)", "TABLE_OR_VIEW_NOT_FOUND", "nope")
    assert(dump(wh) == before)
  }

  test("merge_branch fast-forwards and merges three-way as Python does") {
    val wh = new File(freshDir(), "wh")
    python("history", wh.getPath, "", "9")
    python(
      "run",
      wh.getPath,
      "",
      """[{"op": "create_branch", "name": "dev"}, {"op": "append", "batch": "d1", "rows": 2, "branch": "dev"},
        |{"op": "delete", "url": "b0-1", "branch": "dev"}, {"op": "create_branch", "name": "dev2", "branch": "dev"},
        |{"op": "append", "batch": "e1", "rows": 1, "branch": "dev2"}]""".stripMargin
    )
    val py = copyTree(wh, new File(freshDir(), "wh"))
    val c = catalogFor(wh)
    val pyOut = json.readTree(python("merge", py.getPath, "", "dev"))
    assert(pyOut.get("fast_forward").asBoolean())
    val row = call(s"CALL $c.system.merge_branch('web', 'dev')")
    assert(row.getLong(0) == pyOut.get("version").asLong() && row.getBoolean(1))
    assert(dump(wh) == dump(py))
    assert(dump(wh, "dev") == dump(py, "dev"))
    assert(dump(wh, "dev2") == dump(py, "dev2"))
    // nothing new on dev now: no commit
    val again = call(s"CALL $c.system.merge_branch('web', 'dev')")
    assert(again.isNullAt(0) && !again.getBoolean(1))
    // dev2 forked from dev's head, which main now is (its parent became main): a fast-forward
    val ff = call(s"CALL $c.system.fast_forward('web', 'dev2')")
    assert(ff.getBoolean(1) && json.readTree(python("merge", py.getPath, "", "dev2")).get("fast_forward").asBoolean())
    assert(dump(wh) == dump(py) && dump(wh, "dev2") == dump(py, "dev2"))
    python(
      "run",
      wh.getPath,
      "",
      """[{"op": "create_branch", "name": "f"}, {"op": "append", "batch": "f1", "rows": 1, "branch": "f"}, {"op": "append", "batch": "m9", "rows": 1}]"""
    )
    val before = dump(wh)
    val (k2, m2) = error(spark.sql(s"CALL $c.system.fast_forward('web', 'f')").collect())
    assert(k2 == "OMNITABLE_COMMIT_CONFLICT" && m2.contains("'main' moved since 'f' forked"), m2)
    val (k3, m3) = error(spark.sql(s"CALL $c.system.merge_branch('web', 'main', 'main')").collect())
    assert(k3 == "OMNITABLE_INVALID_OPERATION" && m3.contains("into itself"), m3)
    val (k4, _) = error(spark.sql(s"CALL $c.system.merge_branch('web', 'f', strategy => 'mine')").collect())
    assert(k4 == "OMNITABLE_INVALID_PROCEDURE_ARGUMENT")
    assert(dump(wh) == before)
    // main moved since f forked: a three-way merge, committed as one merge (f1 copied), as Python's
    val py3 = copyTree(wh, new File(freshDir(), "wh"))
    val pyMerged = json.readTree(python("merge", py3.getPath, "", "f"))
    val merged = call(s"CALL $c.system.merge_branch('web', 'f')")
    assert(!merged.isNullAt(0) && !merged.getBoolean(1) && merged.getInt(5) == 1)
    assert(merged.getLong(0) == pyMerged.get("version").asLong() && !pyMerged.get("fast_forward").asBoolean())
    assert(dump(wh) == dump(py3) && dump(wh, "f") == dump(py3, "f"))
  }

  test("a fast-forward killed mid-update leaves nothing visible") {
    val wh = new File(freshDir(), "wh")
    python("history", wh.getPath, "", "11")
    python(
      "run",
      wh.getPath,
      "",
      """[{"op": "create_branch", "name": "dev"}, {"op": "append", "batch": "d1", "rows": 2, "branch": "dev"}]""")
    val (main, dev) = (dump(wh), dump(wh, "dev"))
    val c = catalogFor(wh)
    spark.conf.set(Failpoints.SessionConf, "fast_forward.mid_update=raise")
    try intercept[Exception](spark.sql(s"CALL $c.system.merge_branch('web', 'dev')").collect())
    finally spark.conf.unset(Failpoints.SessionConf)
    assert(dump(wh) == main && dump(wh, "dev") == dev)
  }
}
