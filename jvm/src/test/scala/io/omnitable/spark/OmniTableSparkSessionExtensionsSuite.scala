package io.omnitable.spark

import io.omnitable.spark.conf.{OmniTableVersion, SparkVersionCheck}
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

  test("the Spark version is checked when OmniTable loads: another line fails fast naming the supported one") {
    assert(SparkVersionCheck.supported == "4.1.x")
    SparkVersionCheck.check(org.apache.spark.SPARK_VERSION)
    Seq("4.1.0", "4.1.1", "4.1.3-SNAPSHOT").foreach(SparkVersionCheck.check)
    Seq("3.5.1", "4.0.1", "4.2.0", "5.1.0", "garbage").foreach { v =>
      val e = intercept[AnalysisException](SparkVersionCheck.check(v))
      assert(e.getMessage.contains(s"Spark $v"), e.getMessage)
      assert(e.getMessage.contains("Spark 4.1.x"), e.getMessage)
      assert(e.getMessage.startsWith("[OMNITABLE_UNSUPPORTED_SPARK_VERSION] Cannot load OmniTable"), e.getMessage)
    }
  }
}
