package io.omnitable.spark.procedures

import java.io.{File, IOException}
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import scala.util.control.NonFatal

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.omnitable.spark.catalog.Failpoints
import io.omnitable.spark.errors.GovernanceErrors

/**
 * OmniTable's Python engine on the driver, for the procedures whose logic is specified once, in
 * Python (the governance jobs): `python -m omnitable.cli.procedure` with the warehouse in
 * `OMNITABLE_WAREHOUSE` (the Spark catalog's own `warehouse`: at most an `env:NAME` password,
 * which the child resolves from the driver's environment; nothing on argv), one JSON request on
 * stdin, one JSON answer on stdout (python/omnitable/cli/procedure.py says which).
 *
 * `conf` reads a Spark setting (session, then static). The Python executable is the first of
 * `spark.omnitable.python`, `spark.pyspark.driver.python`, `spark.pyspark.python`, the driver's
 * `PYSPARK_DRIVER_PYTHON`, `PYSPARK_PYTHON`, else `python3`. The session's
 * `spark.omnitable.test.failpoint` becomes the child's `OMNITABLE_FAILPOINTS` (tests only).
 */
final class PythonEngine(conf: String => Option[String], env: String => Option[String] = sys.env.get) {

  val python: String = Seq("spark.omnitable.python", "spark.pyspark.driver.python", "spark.pyspark.python")
    .view.flatMap(conf).find(_.trim.nonEmpty)
    .orElse(Seq("PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON").view.flatMap(env).find(_.trim.nonEmpty))
    .getOrElse("python3")

  /** The answer of the engine to `request` on `warehouse`; failures become OmniTable errors of `procedure`. */
  def call(procedure: String, warehouse: String, request: JsonNode): JsonNode = {
    val log = Files.createTempFile("omnitable-procedure", ".log").toFile
    try {
      val process = start(procedure, warehouse, log)
      val out =
        try {
          val stdin = process.getOutputStream
          try stdin.write(PythonEngine.Json.writeValueAsBytes(request))
          catch { case _: IOException => () } // it ended early: its stderr says why
          finally
            try stdin.close()
            catch { case _: IOException => () }
          new String(process.getInputStream.readAllBytes(), StandardCharsets.UTF_8)
        } catch {
          case e: InterruptedException =>
            process.destroy(); throw e
          case NonFatal(e) =>
            process.destroy(); throw e
        }
      val rc = process.waitFor()
      answer(procedure, rc, out, tail(log))
    } finally log.delete()
  }

  private def start(procedure: String, warehouse: String, log: File): Process = {
    val builder = new ProcessBuilder(python, "-m", PythonEngine.Module)
      .redirectError(ProcessBuilder.Redirect.to(log))
    builder.environment().put(PythonEngine.WarehouseEnv, warehouse)
    conf(Failpoints.SessionConf).foreach(spec => builder.environment().put("OMNITABLE_FAILPOINTS", spec))
    try builder.start()
    catch {
      case e: IOException =>
        throw GovernanceErrors.engineUnavailable(procedure, python, s"cannot be started (${e.getMessage})", e)
    }
  }

  private def answer(procedure: String, rc: Int, out: String, log: String): JsonNode = {
    if (log.contains("No module named 'omnitable") || log.contains("No module named omnitable")) {
      throw GovernanceErrors.engineUnavailable(
        procedure,
        python,
        "has no omnitable package (or one without omnitable.cli.procedure)")
    }
    val parsed =
      try Option(PythonEngine.Json.readTree(out)).filter(_.isObject)
      catch { case NonFatal(_) => None }
    val node = parsed.getOrElse(throw GovernanceErrors.engineCrashed(procedure, python, rc, log))
    Option(node.get("error")).foreach { e =>
      val message = e.path("message").asText()
      throw (e.path("kind").asText() match {
        case "validation" => GovernanceErrors.invalidArguments(procedure, message)
        case "not_found" => GovernanceErrors.notFound(procedure, message)
        case kind => GovernanceErrors.failed(procedure, kind, e.path("type").asText(), message)
      })
    }
    node
  }

  /** The last lines of the engine's stderr. */
  private def tail(log: File): String = {
    val text = new String(Files.readAllBytes(log.toPath), StandardCharsets.UTF_8)
    text.linesIterator.toSeq.takeRight(PythonEngine.LogLines).mkString("\n")
  }
}

object PythonEngine {
  val Module = "omnitable.cli.procedure"
  val WarehouseEnv = "OMNITABLE_WAREHOUSE"
  private val LogLines = 20
  private[procedures] val Json = new ObjectMapper()
}
