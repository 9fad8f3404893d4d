package io.omnitable.spark.write

import java.io.File
import java.nio.file.Files

import com.fasterxml.jackson.databind.ObjectMapper
import io.omnitable.spark.{PythonSteps, SharedSparkSession}
import io.omnitable.spark.catalog.Failpoints
import io.omnitable.spark.errors.{OmniTableAnalysisException, OmniTableCommitException, WriteErrors}
import io.omnitable.spark.source.{OmniTableCatalog, OmniTableTable}
import org.scalatest.funsuite.AnyFunSuite

/**
 * `DELETE FROM` from Spark SQL (docs/spark.md, "Row-level DML"), committed by the JVM, on SQLite
 * and on PostgreSQL when OMNITABLE_TEST_POSTGRES_URL is set: the tables are written and read
 * back with the Python API (tests/spark/fixtures/dml_steps.py, in one `serve` process for the
 * suite: [[PythonSteps]]), so what the JVM commits is checked by the reference reader. Races with
 * Python commits are conformance scenarios (tests/conformance/scenarios/delete_*.json,
 * [[ConformanceSuite]]).
 */
class RowLevelDeleteSuite extends AnyFunSuite with SharedSparkSession {

  private val json = new ObjectMapper()
  private val postgres: Option[String] = sys.env.get("OMNITABLE_TEST_POSTGRES_URL").filter(_.nonEmpty)

  /** dml_steps.py's commands (and steps.py's `newdb`): each script in one process for the suite. */
  private val dmlSteps = new PythonSteps("tests/spark/fixtures/dml_steps.py")
  private val conformanceSteps = new PythonSteps

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    dmlSteps.start()
  }

  override protected def afterAll(): Unit =
    try {
      dmlSteps.close()
      conformanceSteps.close()
    } finally super.afterAll()

  private def run(steps: PythonSteps, args: String*): String =
    try steps.call(args: _*)
    catch { case e: PythonSteps.StepFailed => fail(e.getMessage) }

  /** A fresh warehouse with dml_steps.py's tables, and a Spark catalog name bound to it. */
  private final class Wh(backend: String) {
    private val dir = Files.createTempDirectory("omnitable-dml").toFile
    val (warehouse, dataRoot) = backend match {
      case "sqlite" => (new File(dir, "wh").getPath, "")
      case _ =>
        (
          run(conformanceSteps, "newdb", postgres.get),
          new File(dir, "data").getPath)
    }
    steps("make")
    val catalog = s"dml_${java.util.UUID.randomUUID().toString.take(8)}"
    spark.conf.set(s"spark.sql.catalog.$catalog", classOf[OmniTableCatalog].getName)
    spark.conf.set(s"spark.sql.catalog.$catalog.warehouse", warehouse)

    def steps(args: String*): String = run(dmlSteps, (args.head +: warehouse +: dataRoot +: args.tail): _*)
    def urls(args: String*): Seq[String] = {
      val node = json.readTree(steps(("read" +: args): _*))
      (0 until node.size()).map(node.get(_).asText())
    }
    def history: com.fasterxml.jackson.databind.JsonNode = json.readTree(steps("history"))
    def sql(statement: String): Unit = spark.sql(statement.replace("$t", s"$catalog.web")).collect()
  }

  private val all = (0 until 6).map(i => s"b0-$i") ++ (0 until 4).map(i => s"b1-$i")

  private def backends(name: String)(body: Wh => Unit): Unit =
    for (backend <- Seq("sqlite", "postgres"))
      test(s"$name [$backend]") {
        assume(backend == "sqlite" || postgres.isDefined, "OMNITABLE_TEST_POSTGRES_URL is not set")
        body(new Wh(backend))
      }

  private def commitError(e: Throwable): OmniTableCommitException =
    Iterator.iterate(e)(_.getCause).takeWhile(_ != null).collectFirst { case c: OmniTableCommitException => c }
      .getOrElse(throw e)

  backends("DELETE FROM removes the matching rows for Python and Spark; time travel still shows them") { w =>
    val before = w.history.get("version").asLong()
    w.sql("DELETE FROM $t WHERE score >= 3")
    val kept = all.filterNot(Set("b0-3", "b0-4", "b0-5", "b1-3"))
    assert(w.urls() == kept)
    assert(spark.table(s"${w.catalog}.web").count() == kept.size)
    val last = w.history
    assert(last.get("version").asLong() == before + 1)
    assert(last.get("op").asText() == "delete")
    assert(last.get("summary").get("rows").asLong() == 4)
    assert(last.get("summary").get("fragments").asLong() == 2)
    assert(w.urls("main", before.toString) == all)
    val old = spark.sql(s"SELECT url FROM ${w.catalog}.web VERSION AS OF $before").collect().map(_.getString(0))
    assert(old.sorted.toSeq == all)
  }

  backends("a second DELETE extends the fragment's vector; one matching nothing commits nothing") { w =>
    w.sql("DELETE FROM $t WHERE url = 'b0-1'")
    w.sql("DELETE FROM $t WHERE url IN ('b0-2', 'b0-4') OR score > 100")
    assert(w.urls() == all.filterNot(Set("b0-1", "b0-2", "b0-4")))
    val v = w.history.get("version").asLong()
    w.sql("DELETE FROM $t WHERE url = 'b0-1' OR score > 100")
    assert(w.history.get("version").asLong() == v)
    val offsets = spark.sql(s"SELECT _ai_row_offset_ FROM ${w.catalog}.web WHERE url LIKE 'b0-%'")
      .collect().map(_.getLong(0)).sorted.toSeq
    assert(offsets == Seq(0L, 3L, 5L)) // physical positions, deleted rows counted
  }

  backends("DELETE FROM with a subquery, and without a WHERE") { w =>
    w.sql(s"DELETE FROM $$t WHERE url IN (SELECT url FROM ${w.catalog}.web WHERE score < 1)")
    assert(w.urls() == all.filterNot(Set("b0-0", "b1-0")))
    w.sql("DELETE FROM $t")
    assert(w.urls().isEmpty)
    assert(w.history.get("op").asText() == "delete")
  }

  backends("DELETE on a branch leaves main alone, including vectors the branch inherits") { w =>
    w.steps("delete", "b0-0") // a vector on main before the fork
    w.steps("branch", "dev")
    w.sql(s"DELETE FROM ${w.catalog}.web.branch_dev WHERE url IN ('b0-1', 'b1-1')")
    w.steps("delete", "b0-2") // main's vector of the same fragment moves on
    assert(w.urls("dev") == all.filterNot(Set("b0-0", "b0-1", "b1-1")))
    assert(w.urls() == all.filterNot(Set("b0-0", "b0-2")))
    w.sql(s"DELETE FROM ${w.catalog}.web.branch_dev WHERE url = 'b0-3'")
    assert(w.urls("dev") == all.filterNot(Set("b0-0", "b0-1", "b1-1", "b0-3")))
    assert(w.urls() == all.filterNot(Set("b0-0", "b0-2")))
  }

  backends("a keyed table: deleted keys are free again for upsert") { w =>
    spark.sql(s"DELETE FROM ${w.catalog}.kv WHERE k = 'b'").collect()
    w.steps("upsert", "b", "20")
    w.steps("upsert", "a", "10")
    val rows = json.readTree(w.steps("kv"))
    assert(rows.toString == """[["a",10.0],["b",20.0],["c",3.0]]""")
  }

  backends("a DELETE or UPDATE of a table read at a tag is refused before any job") { w =>
    w.steps("tag", "t0")
    val v = w.history.get("version").asLong()
    val tagged = intercept[OmniTableAnalysisException](w.sql(s"DELETE FROM ${w.catalog}.web.tag_t0 WHERE score > 1"))
    assert(tagged.omniErrorClass == "OMNITABLE_NOT_WRITABLE", tagged.getMessage)
    val upd = intercept[Exception](w.sql(s"UPDATE ${w.catalog}.web.tag_t0 SET score = 0 WHERE url = 'b0-1'"))
    assert(upd.getMessage.contains("OMNITABLE_NOT_WRITABLE"), upd.getMessage)
    assert(w.history.get("version").asLong() == v)
    assert(w.urls() == all)
  }

  backends("a DELETE killed inside its commit leaves nothing visible") { w =>
    val v = w.history.get("version").asLong()
    for (point <- Seq("delete.before_commit", "commit.mid_insert", "commit.before_end")) {
      withConf(OmniTableTable.FailpointConf -> s"$point=raise") {
        val e = intercept[Exception](w.sql("DELETE FROM $t WHERE score >= 2"))
        assert(
          Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).exists(
            _.getMessage.contains(s"failpoint '$point'")),
          e)
      }
      assert(w.history.get("version").asLong() == v, point)
      assert(w.urls() == all, point)
    }
  }

  backends("a concurrent Python delete of the same fragment makes the DELETE conflict") { w =>
    val e = intercept[Exception](Failpoints.hooked("delete.before_commit")(w.steps("delete", "b0-5")) {
      w.sql("DELETE FROM $t WHERE url = 'b0-1'")
    })
    val c = commitError(e)
    assert(c.omniErrorClass == WriteErrors.CommitConflict)
    assert(c.detail.contains("deleted rows of 1 of the same fragment(s)"), c.detail)
    assert(w.urls() == all.filterNot(_ == "b0-5"))
  }
}
