package io.omnitable.spark.optimizer

import io.omnitable.spark.SharedSparkSession
import org.apache.spark.omnitable.TestPythonUDFs
import org.apache.spark.sql.catalyst.expressions.{AttributeReference, GreaterThan, Literal}
import org.apache.spark.sql.catalyst.plans.logical.{ArrowEvalPython, Filter, LocalRelation, Project}
import org.apache.spark.sql.execution.{FilterExec, SparkPlan}
import org.apache.spark.sql.execution.python.ArrowEvalPythonExec
import org.apache.spark.sql.types.{DoubleType, StringType}
import org.scalatest.funsuite.AnyFunSuite

/** Where FusePythonUDFs places each UDF of a chain (plans only; PySpark suites run real UDFs). */
class FusePythonUDFsSuite extends AnyFunSuite with SharedSparkSession {

  private val Pandas = PythonEvalTypes.SQL_SCALAR_PANDAS_UDF
  private val text = AttributeReference("text", StringType)()
  private def udf(name: String) = TestPythonUDFs.udf(name, DoubleType, Seq(text), Pandas)
  private def result(name: String) = AttributeReference(name, DoubleType)()

  test("UDFs join a lower evaluation only with no Filter between; above a Filter only copies are reused") {
    val (r1, r2, r3, r4) = (result("r1"), result("r2"), result("r3"), result("r4"))
    val e1 = ArrowEvalPython(Seq(udf("f")), Seq(r1), LocalRelation(text), Pandas)
    val e2 = ArrowEvalPython(Seq(udf("g")), Seq(r2), Project(Seq(text, r1), e1), Pandas)
    val e3 = ArrowEvalPython(Seq(udf("f"), udf("h")), Seq(r3, r4), Filter(GreaterThan(r1, Literal(5.0)), e2), Pandas)
    val planned = FusePythonUDFs(spark).apply(e3)
    assert(planned.size == 1)
    val plan: SparkPlan = planned.head
    assert(plan.output.map(_.exprId) == e3.output.map(_.exprId))
    val fused = plan.collect { case f: FusedPythonEvalExec => f }
    assert(fused.size == 1)
    assert(fused.head.udfs.map(_.name) == Seq("f", "g"), "g moves down: no filter between")
    assert(fused.head.simpleString(10).contains("FusePythonUDFs: 3 Python evaluations -> 2, 1 shared"))
    val above = plan.collect { case a: ArrowEvalPythonExec => a }
    assert(above.map(_.udfs.map(_.name)) == Seq(Seq("h")), "h stays above the filter; f is reused")
    assert(above.head.exists(_.isInstanceOf[FilterExec]), "the filter still runs before h")
  }

  test("a chain with nothing to share or move is left to Spark") {
    val (r1, r2) = (result("r1"), result("r2"))
    val e1 = ArrowEvalPython(Seq(udf("f")), Seq(r1), LocalRelation(text), Pandas)
    val e2 = ArrowEvalPython(Seq(udf("g")), Seq(r2), Filter(GreaterThan(r1, Literal(5.0)), e1), Pandas)
    assert(FusePythonUDFs(spark).apply(e2).isEmpty)
  }
}
