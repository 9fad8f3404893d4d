package io.omnitable.spark.optimizer

import io.omnitable.spark.read.plan.OptimizerMarks
import org.apache.spark.sql.DataFrame
import org.apache.spark.sql.functions.{col, rand}

class FuseOmniTableScansSuite extends OptimizerSuiteBase {

  private val Key = "spark.omnitable.optimizer.fuse_scans"
  private val id = "_ai_unique_id_"

  private def fourProjections(base: => DataFrame): DataFrame = {
    val parts = Seq(Seq("k"), Seq("x"), Seq("s"), Seq("text")).map(c => base.select(id, c: _*))
    parts.reduce(_.join(_, id))
  }

  test("four projections of one snapshot joined on the key read one scan, and EXPLAIN says so") {
    val df = fourProjections(opt())
    val s = scans(df)
    assert(s.size == 1)
    assert(s.head.readSchema().fieldNames.toSet == Set(id, "k", "x", "s", "text"))
    assert(explain(df).contains("optimizer=[FuseOmniTableScans: 4 reads -> 1 scan]"))
    val rewritten = FuseOmniTableScans(df.queryExecution.analyzed)
    assert(rewritten.exists(_.getTagValue(OptimizerMarks.FiredRules).contains(Seq("FuseOmniTableScans"))))
    withConf(Key -> "false")(assert(scans(fourProjections(opt())).size == 4))
    assertSameWithRule(Key)(fourProjections(opt()))
  }

  test("filters on both sides of an inner join become one filter of the fused scan") {
    def q = opt().where("k < 30").select(id, "x").join(opt().where("x > 0").select(id, "text", "late"), id)
      .where(col("late").isNull || col("late") > 0)
    assert(scans(q).size == 1)
    assertSameWithRule(Key)(q)
    def sql = {
      opt().createOrReplaceTempView("o")
      spark.sql(s"SELECT a.k, b.s FROM o a JOIN o b ON a.$id = b.$id AND a.k > b.k - 5 WHERE b.s LIKE 's1%'")
    }
    assert(scans(sql).size == 1)
    assertSameWithRule(Key)(sql)
  }

  test("semi and outer joins fuse only when every row is matched") {
    def semi = opt().select(id, "k").join(opt().where("x > 10").select(id), Seq(id), "left_semi")
    def leftPlain = opt().where("k > 50").select(id, "k").join(opt().select(id, "s"), Seq(id), "left")
    def leftFiltered = opt().select(id, "k").join(opt().where("x > 10").select(id, "s"), Seq(id), "left")
    def full = opt().select(id, "k").join(opt().select(id, "late"), Seq(id), "full")
    assert(scans(semi).size == 1)
    assert(scans(leftPlain).size == 1)
    assert(scans(full).size == 1)
    assert(scans(leftFiltered).size == 2, "a filtered outer side leaves unmatched rows: no fusion")
    Seq(() => semi, () => leftPlain, () => leftFiltered, () => full).foreach(q => assertSameWithRule(Key)(q()))
    assert(leftPlain.schema("s").nullable)
  }

  test("never fuses reads of different snapshots, restrictions or options, nor other joins") {
    val v1 = optManifest.get("v1").asText()
    val cases: Seq[(String, () => DataFrame)] = Seq(
      "versions" -> (() => opt("versionAsOf" -> v1).select(id, "k").join(opt().select(id, "x"), id)),
      "batches" -> (() => opt("batches" -> "o1,o2").select(id, "k").join(opt().select(id, "x"), id)),
      "options" -> (() => opt("batch_size" -> "64").select(id, "k").join(opt().select(id, "x"), id)),
      "non-key join" -> (() => opt().select(id, "k").join(opt().select(col(id).as("j"), col("k")), "k")),
      "key expression" ->
        (() => {
          val (a, b) = (opt().select(id, "k"), opt().select(id, "x"))
          a.join(b, a(id) === b(id) + 1)
        }),
      "anti join" -> (() => opt().select(id, "k").join(opt().select(id), Seq(id), "left_anti")),
      "non-deterministic" -> (() => opt().where(rand(7) < 0.5).select(id, "k").join(opt().select(id, "x"), id))
    )
    cases.foreach { case (name, q) =>
      assert(scans(q()).size == 2, s"$name must not fuse")
      assert(!explain(q()).contains("FuseOmniTableScans"), name)
    }
    cases.filterNot(_._1 == "non-deterministic").foreach { case (_, q) => assertSameWithRule(Key)(q()) }
  }

  test("a version named by tag-free options still fuses with the same version named by number") {
    val v1 = optManifest.get("v1").asText()
    def q = opt("versionAsOf" -> v1).select(id, "k").join(opt("versionAsOf" -> v1).select(id, "late"), id)
    assert(scans(q).size == 1)
    assert(q.count() == optManifest.get("rows_v1").asLong())
    assertSameWithRule(Key)(q)
  }

  test("random projections, filters and join types give the same rows with the rule on and off") {
    val rng = new scala.util.Random(20261129)
    val columns = Seq("k", "x", "s", "text", "late", "_ai_append_name_")
    val filters = Seq("k < 40", "x > 0", "s LIKE 's1%'", "late IS NULL", "length(text) > 150", "k % 3 = 1")
    val types = Seq("inner", "left", "left_semi", "full", "right")
    (1 to 8).foreach { _ =>
      def side() = {
        val cols = rng.shuffle(columns).take(1 + rng.nextInt(3))
        val base = if (rng.nextBoolean()) opt().where(filters(rng.nextInt(filters.size))) else opt()
        base.select(id, cols: _*)
      }
      val (a, b, how) = (side(), side(), types(rng.nextInt(types.size)))
      val b2 = b.select(b.columns.map(c => if (c == id) col(c) else col(c).as(s"r_$c")): _*)
      assertSameWithRule(Key)(a.join(b2, Seq(id), how))
    }
  }

  test("the rules fire and keep results with adaptive query execution too") {
    withConf("spark.sql.adaptive.enabled" -> "true") {
      assert(explain(fourProjections(opt())).contains("FuseOmniTableScans: 4 reads -> 1 scan"))
      assertSameWithRule(Key)(fourProjections(opt()).where("k < 50"))
      def late = opt().where("k < 1").select("text", "s")
      assert(explain(late).contains("LateMaterializeFilteredColumns: on"))
      assertSameWithRule("spark.omnitable.optimizer.late_materialization")(late)
    }
  }

  test("a UNION ALL of per-column reads of one snapshot reads one scan") {
    import org.apache.spark.sql.functions.lit
    def long(base: => DataFrame) = Seq("k" -> "k < 50", "x" -> "x IS NOT NULL", "late" -> "").map { case (c, f) =>
      val b = if (f.isEmpty) base else base.where(f)
      b.select(col(id), lit(c).as("feature"), col(c).cast("double").as("value"), col("_ai_row_offset_"))
    }.reduce(_.unionAll(_))
    val df = long(opt())
    assert(scans(df).size == 1)
    assert(explain(df).contains("FuseOmniTableScans: 3 reads -> 1 scan"))
    assertSameWithRule(Key)(long(opt()))
    assertSameWithRule(Key)(long(opt()).where("value > 0").groupBy("feature").count())
    val v1 = optManifest.get("v1").asText()
    def mixed = opt().select(id, "k").unionAll(opt("versionAsOf" -> v1).select(id, "k"))
    assert(scans(mixed).size == 2)
    def random = opt().where(rand(1) < 0.5).select(id).unionAll(opt().select(id))
    assert(scans(random).size == 2)
  }

  test("a UNION ALL branch's expressions and filters run only on that branch's rows (ANSI)") {
    import org.apache.spark.sql.functions.lit
    def q = opt().where("k <> 0").select(col(id), (lit(100) / col("k")).as("v"))
      .unionAll(opt().where("k <> 0 AND 100 / k > 5").select(col(id), (lit(1) / col("k")).as("v")))
      .unionAll(opt().where("k = 0").select(col(id), lit(0.0).as("v")))
    withConf("spark.sql.ansi.enabled" -> "true") {
      assert(scans(q).size == 1)
      assert(explain(q).contains("FuseOmniTableScans: 3 reads -> 1 scan"))
      val zeros = opt().where("k = 0").count()
      assert(zeros > 0, "the table must hold rows with k = 0")
      assert(q.where("v = 0.0").count() == zeros)
      assertSameWithRule(Key)(q)
    }
  }
}
