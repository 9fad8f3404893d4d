package io.omnitable.spark

import org.apache.spark.sql.AnalysisException
import org.scalatest.funsuite.AnyFunSuite

class OmniTableSparkSessionExtensionsSuite extends AnyFunSuite with SharedSparkSession {

  test("omnitable_version() proves the extension is loaded and returns the jar version") {
    val df = spark.sql("SELECT omnitable_version()")
    assert(df.columns.toSeq == Seq("omnitable_version()"))
    val v = df.head().getString(0)
    assert(v == OmniTableVersion.current)
    assert(v.matches("""\d+\.\d+\.\d+.*"""), s"unexpected version '$v'")
  }

  test("omnitable_version() takes no arguments") {
    val e = intercept[AnalysisException](spark.sql("SELECT omnitable_version(1)").collect())
    assert(e.getMessage.contains("Cannot call omnitable_version"))
  }
}
