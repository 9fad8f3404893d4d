package io.omnitable.spark.catalog

import java.io.File

import io.omnitable.spark.errors.WriteErrors

/**
 * Named fault-injection points of the JVM committer (test instrumentation, inert unless
 * `spark.omnitable.test.failpoint` is set), with python/omnitable/_failpoints.py's syntax:
 * `<point>=raise` fails there; `<point>=pause:DIR` creates `DIR/<point>.reached` and waits (up
 * to 120 s) for `DIR/<point>.go`, so a test can interleave another writer. Entries separated by
 * commas. Points: `append.before_commit` (driver, tasks done), `commit.before_insert`,
 * `commit.mid_insert`, `commit.before_end` (inside the transaction), `commit.after_commit`;
 * DDL ([[DdlWriter]]): `create.before_insert`, `create.before_end` (inside CREATE TABLE's
 * transaction), `add_columns.before_commit` (driver, ALTER TABLE … ADD COLUMNS validated).
 * In-process tests can also run a callback once at a point ([[Failpoints.hooked]]).
 */
final case class Failpoints(spec: Option[String]) {

  def hit(name: String): Unit = {
    Option(Failpoints.hooks.remove(name)).foreach(fn => fn())
    fromSpec(name)
  }

  private def fromSpec(name: String): Unit = spec.toSeq.flatMap(_.split(',')).map(_.trim).foreach { entry =>
    val (point, action) = entry.split("=", 2) match {
      case Array(p, a) => (p.trim, a.trim)
      case parts => (parts.head.trim, "raise")
    }
    if (point == name) {
      if (action == "raise") throw WriteErrors.failpoint(name)
      if (action.startsWith("pause:")) pause(name, new File(action.stripPrefix("pause:")))
    }
  }

  private def pause(name: String, dir: File): Unit = {
    new File(dir, s"$name.reached").createNewFile()
    val go = new File(dir, s"$name.go")
    val deadline = System.nanoTime() + 120L * 1000000000L
    while (!go.exists() && System.nanoTime() < deadline) Thread.sleep(20)
  }
}

object Failpoints {

  /** The session setting holding the spec (`OmniTableTable.FailpointConf`). */
  val SessionConf = "spark.omnitable.test.failpoint"

  private val hooks = new java.util.concurrent.ConcurrentHashMap[String, () => Unit]()

  /** Runs `fn` the first time any thread reaches point `name` while `body` runs (tests only). */
  def hooked[T](name: String)(fn: => Unit)(body: => T): T = {
    hooks.put(name, () => fn)
    try body
    finally hooks.remove(name)
  }
}
