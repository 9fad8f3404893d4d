package io.omnitable.spark

import org.scalatest.{BeforeAndAfterAll, Suite}

/**
 * One Python `serve` process of a steps script ([[PythonSteps]]) for all of a suite's tests:
 * started in `beforeAll`, closed in `afterAll`. `stepsFile`: the script, relative to the repo.
 */
trait PythonStepsProcess extends BeforeAndAfterAll { self: Suite =>

  protected def stepsFile: String = "tests/conformance/steps.py"

  /** The script's commands, in one Python process for the whole suite. */
  protected lazy val steps = new PythonSteps(stepsFile)

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    steps.start()
  }

  override protected def afterAll(): Unit =
    try steps.close()
    finally super.afterAll()

  /** Runs command `args` and returns its answer; a failed step fails the test. */
  protected def python(args: String*): String =
    try steps.call(args: _*)
    catch { case e: PythonSteps.StepFailed => fail(e.getMessage) }
}
