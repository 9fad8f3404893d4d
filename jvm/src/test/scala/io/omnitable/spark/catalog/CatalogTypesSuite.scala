package io.omnitable.spark.catalog

import org.apache.spark.sql.catalyst.parser.{CatalystSqlParser, ParseException}
import org.scalatest.funsuite.AnyFunSuite

class CatalogTypesSuite extends AnyFunSuite {

  private val ddls = Seq(
    "bigint",
    "string",
    "decimal(18,3)",
    "array<float>",
    "map<string,array<int>>",
    "struct<`a b`:int,`select`:struct<x:timestamp,y:binary>>",
    "timestamp_ntz")

  test("a parsed catalog type is Spark's parse of its DDL, parsed once per distinct string") {
    ddls.foreach { d =>
      val first = CatalogTypes.parse(d)
      assert(first == CatalystSqlParser.parseDataType(d), d)
      assert(CatalogTypes.parse(d) eq first, s"$d was parsed again")
    }
  }

  test("a DDL Spark cannot parse fails every time, and is not kept") {
    (1 to 2).foreach(_ => intercept[ParseException](CatalogTypes.parse("struct<a int")))
    assert(CatalogTypes.parse("int") == CatalystSqlParser.parseDataType("int"))
  }
}
