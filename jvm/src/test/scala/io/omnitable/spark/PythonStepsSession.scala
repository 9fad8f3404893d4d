package io.omnitable.spark

import org.scalatest.Suite

/**
 * A suite's [[SharedSparkSession]] plus tests/conformance/steps.py as one `serve` process
 * ([[PythonSteps]]) for all of its tests: started in `beforeAll`, closed in `afterAll`.
 */
trait PythonStepsSession extends SharedSparkSession { self: Suite =>

  /** steps.py's commands, in one Python process for the whole suite. */
  protected val steps = new PythonSteps

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    steps.start()
  }

  override protected def afterAll(): Unit =
    try steps.close()
    finally super.afterAll()

  /** Runs steps.py command `args` and returns its answer; a failed step fails the test. */
  protected def python(args: String*): String =
    try steps.call(args: _*)
    catch { case e: PythonSteps.StepFailed => fail(e.getMessage) }
}
