package io.omnitable.spark

import java.io.{BufferedReader, BufferedWriter, File, InputStreamReader, OutputStreamWriter}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.TimeUnit

import com.fasterxml.jackson.databind.ObjectMapper

/**
 * A Python steps script (tests/conformance/steps.py, tests/spark/fixtures/dml_steps.py) as ONE
 * long-lived process per suite (`script serve`, steps.py `serve`): a call sends the command line it
 * would have run (`call("prepare", wh, root, name)`) as one JSON line on the process's stdin and
 * reads one JSON line back, so the Python imports (and Spark, for backfill steps) start once per
 * suite instead of once per step. A step that fails answers its traceback (thrown as
 * [[PythonSteps.StepFailed]]) and the process serves on; a process that died is started again on
 * the next call. Suites start it in `beforeAll` and [[close]] it in `afterAll`.
 *
 * @param scriptPath the script, relative to the repository root
 */
final class PythonSteps(scriptPath: String = "tests/conformance/steps.py") extends AutoCloseable {

  private val json = new ObjectMapper()
  private val script = new File(TestWarehouses.repoRoot, scriptPath).getPath
  private val scriptName = new File(scriptPath).getName
  private var process: Process = _
  private var requests: BufferedWriter = _
  private var answers: BufferedReader = _
  private var stderr: PythonSteps.Tail = _

  /** Starts the process (again, if it died); calls do this themselves when needed. */
  def start(): Unit = synchronized {
    if (process == null || !process.isAlive) {
      val builder = new ProcessBuilder(TestWarehouses.python, script, "serve").directory(TestWarehouses.repoRoot)
      builder.environment().put("SPARK_LOCAL_IP", "127.0.0.1")
      process = builder.start()
      requests = new BufferedWriter(new OutputStreamWriter(process.getOutputStream, UTF_8))
      answers = new BufferedReader(new InputStreamReader(process.getInputStream, UTF_8))
      stderr = new PythonSteps.Tail(process)
    }
  }

  /** Runs `steps.py args...` in the process; what it printed (trimmed). */
  def call(args: String*): String = synchronized {
    start()
    val request = json.createObjectNode()
    val list = request.putArray("args")
    args.foreach(a => list.add(a))
    val line =
      try {
        requests.write(json.writeValueAsString(request))
        requests.newLine()
        requests.flush()
        answers.readLine()
      } catch { case _: java.io.IOException => null }
    if (line == null) {
      val rc = if (process.waitFor(10, TimeUnit.SECONDS)) process.exitValue().toString else "running"
      process.destroyForcibly()
      process = null
      throw new PythonSteps.StepFailed(s"$scriptName serve ended ($rc) during ${args.mkString(" ")}:\n$stderr")
    }
    val answer = json.readTree(line)
    if (answer.has("error"))
      throw new PythonSteps.StepFailed(s"$scriptName ${args.mkString(" ")} failed:\n${answer.get("error").asText()}")
    answer.get("out").asText().trim
  }

  /** Ends the process: its stdin closes, it exits (killed if it does not within 30 s). */
  override def close(): Unit = synchronized {
    if (process != null) {
      try requests.close()
      catch { case _: java.io.IOException => () }
      if (!process.waitFor(30, TimeUnit.SECONDS)) process.destroyForcibly()
      process = null
    }
  }
}

object PythonSteps {

  final class StepFailed(message: String) extends RuntimeException(message)

  /** The last 20,000 characters of a process's stderr, drained by a daemon thread. */
  private final class Tail(process: Process) {
    private val text = new StringBuilder
    private val thread = new Thread(() => {
      val reader = new BufferedReader(new InputStreamReader(process.getErrorStream, UTF_8))
      Iterator.continually(reader.readLine()).takeWhile(_ != null).foreach { l =>
        text.synchronized {
          text.append(l).append('\n')
          if (text.length > 40000) text.delete(0, text.length - 20000)
        }
      }
    })
    thread.setDaemon(true)
    thread.start()

    override def toString: String = {
      thread.join(2000)
      text.synchronized(text.takeRight(20000).toString)
    }
  }
}
