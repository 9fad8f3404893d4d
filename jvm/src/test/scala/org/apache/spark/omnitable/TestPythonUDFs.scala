package org.apache.spark.omnitable

import java.util.Collections

import org.apache.spark.api.python.SimplePythonFunction
import org.apache.spark.sql.catalyst.expressions.{Expression, PythonUDF}
import org.apache.spark.sql.types.DataType

/** Python UDF expressions for planner tests (Spark's Python function class is `private[spark]`). */
object TestPythonUDFs {

  /** A deterministic Python UDF `name(children)`; never executed (plans only). */
  def udf(name: String, dataType: DataType, children: Seq[Expression], evalType: Int): PythonUDF = {
    val func = new SimplePythonFunction(
      Array.emptyByteArray,
      Collections.emptyMap[String, String](),
      Collections.emptyList[String](),
      "python3",
      "3",
      Collections.emptyList(),
      null)
    PythonUDF(name, func, dataType, children, evalType, udfDeterministic = true)
  }
}
