package io.omnitable.spark.source

import io.omnitable.spark.{SharedSparkSession, TestWarehouses}
import io.omnitable.spark.SparkTestUtils.assertSameRows
import org.apache.spark.sql.{AnalysisException, DataFrame, DataFrameReader}
import org.apache.spark.sql.types._
import org.scalatest.funsuite.AnyFunSuite

class OmniTableDataSourceSuite extends AnyFunSuite with SharedSparkSession {

  private def omni: DataFrameReader = spark.read.format("omnitable").option("warehouse", TestWarehouses.warehouse)
  private def expected(name: String): DataFrame = spark.read.parquet(TestWarehouses.expected(name))

  test("every type, NULLs and nested values read as the Python reader returns them") {
    val df = omni.load("types")
    assert(df.schema("_ai_unique_id_") == StructField("_ai_unique_id_", LongType, nullable = false))
    assert(df.schema("_ai_append_name_") == StructField("_ai_append_name_", StringType, nullable = false))
    assert(df.schema("amount").dataType == DecimalType(12, 3))
    assert(df.schema("ts").dataType == TimestampType && df.schema("ts_ntz").dataType == TimestampNTZType)
    assert(df.schema("doc").dataType.isInstanceOf[StructType] && df.schema("attrs").dataType.isInstanceOf[MapType])
    assertSameRows(df, expected("types"))
  }

  test("small decode batches and nested projections still match") {
    val df = omni.option("batch_size", "97").load("types").select("_ai_unique_id_", "doc.meta.score", "points", "tags")
    assertSameRows(df, expected("types").select("_ai_unique_id_", "doc.meta.score", "points", "tags"))
  }

  test("files with different row-group sizes are zipped row by row") {
    assertSameRows(omni.load("misaligned"), expected("misaligned"))
    assertSameRows(omni.option("batch_size", "128").load("misaligned"), expected("misaligned"))
  }

  test("a column no file of a fragment carries reads as NULL") {
    val df = omni.load("misaligned")
    val withF = TestWarehouses.version("misaligned", "with_f")
    assert(df.where("f IS NOT NULL").count() == withF)
    assert(df.where("f IS NULL").count() == 20000 - withF)
    assert(df.where("f IS NOT NULL AND f <> _ai_unique_id_ * 2.0").count() == 0)
  }

  test("fragments split into row ranges read the same rows") {
    assertSameRows(omni.option("max_rows_per_partition", "777").load("misaligned"), expected("misaligned"))
    assert(omni.option("max_rows_per_partition", "777").load("misaligned").rdd.getNumPartitions > 20)
  }

  test("an empty batch (one fragment of 0 rows) reads as no rows") {
    assert(omni.option("batches", "empty").load("types").count() == 0)
    assert(omni.option("batches", "empty,b3").load("types").count() == 900)
  }

  test("the batches option keeps only those batches") {
    val df = omni.option("batches", "b1, b3").load("types")
    assertSameRows(df, expected("types").where("_ai_append_name_ IN ('b1', 'b3')"))
  }

  test("versionAsOf, tag and branch select snapshots") {
    val v = (k: String) => TestWarehouses.version("refs", k).toString
    assertSameRows(omni.option("versionAsOf", v("v1")).load("refs"), expected("refs_v1"))
    assertSameRows(omni.option("versionAsOf", v("v2")).load("refs"), expected("refs_v2"))
    assertSameRows(omni.option("versionAsOf", v("v3")).load("refs"), expected("refs_v3"))
    assertSameRows(omni.option("tag", "t1").load("refs"), expected("refs_t1"))
    assertSameRows(omni.option("branch", "dev").load("refs"), expected("refs_dev"))
    assertSameRows(omni.load("refs"), expected("refs_head"))
    // the schema follows the snapshot: column y was added at v3
    assert(!omni.option("versionAsOf", v("v2")).load("refs").columns.contains("y"))
    assert(omni.option("versionAsOf", v("v3")).load("refs").columns.contains("y"))
  }

  test("the warehouse falls back to the session setting") {
    spark.conf.set("spark.omnitable.warehouse", TestWarehouses.warehouse)
    try assert(spark.read.format("omnitable").load("refs").count() == 230)
    finally spark.conf.unset("spark.omnitable.warehouse")
  }

  private def failure(f: => Any): String = intercept[AnalysisException](f).getMessage

  test("unknown tables, refs, versions and batches fail with clear analysis errors") {
    assert(failure(omni.load("nope")).contains("Cannot find table 'nope'"))
    assert(failure(omni.load("nope")).contains("misaligned, pruning, refs, types"))
    assert(failure(omni.option("branch", "nope").load("refs")).contains("Cannot find branch 'nope'"))
    assert(failure(omni.option(
      "tag",
      "nope").load("refs")).contains("Cannot find tag 'nope' of table 'refs' (tags: t1)"))
    assert(failure(omni.option("versionAsOf", "99").load("refs")).contains("Cannot read version 99 of table 'refs'"))
    assert(failure(omni.option("versionAsOf", "-1").load("refs")).contains("expected a version number"))
    assert(failure(omni.option("batches", "zz").load("types")).contains("Cannot read batches 'zz'"))
    assert(failure(omni.option("tag", "t1").option("branch", "dev").load("refs")).contains("select a snapshot"))
    val dev = TestWarehouses.version("refs", "vdev")
    assert(failure(omni.option("versionAsOf", dev.toString).option("branch", "main").load("refs"))
      .contains(s"version $dev of table 'refs' on branch 'main'"))
  }

  test("a missing warehouse or catalog is reported, not guessed") {
    spark.conf.unset("spark.omnitable.warehouse")
    assert(failure(spark.read.format("omnitable").load("refs")).contains("no 'warehouse' option"))
    val empty = java.nio.file.Files.createTempDirectory("no-catalog").toString
    assert(failure(spark.read.format("omnitable").option("warehouse", empty).load("refs"))
      .contains("there is no catalog file"))
  }

  test("a user-supplied schema is refused") {
    val e = intercept[Exception](spark.read.format("omnitable").schema("x int")
      .option("warehouse", TestWarehouses.warehouse).load("refs").collect())
    assert(e.getMessage.toLowerCase.contains("schema"))
  }
}
