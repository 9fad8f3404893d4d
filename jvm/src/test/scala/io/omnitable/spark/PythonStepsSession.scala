package io.omnitable.spark

import org.scalatest.Suite

/**
 * A suite's [[SharedSparkSession]] plus tests/conformance/steps.py as one `serve` process
 * ([[PythonStepsProcess]]) for all of its tests.
 */
trait PythonStepsSession extends SharedSparkSession with PythonStepsProcess { self: Suite => }
