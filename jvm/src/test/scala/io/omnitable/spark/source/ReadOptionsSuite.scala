package io.omnitable.spark.source

import io.omnitable.spark.catalog.{SnapshotResolver, SnapshotSpec}
import io.omnitable.spark.errors.OmniTableAnalysisException
import org.scalatest.funsuite.AnyFunSuite

class ReadOptionsSuite extends AnyFunSuite {

  test("options name the table, the snapshot and the batches or fragments, in any key case") {
    val o = ReadOptions.parse(Map(
      "path" -> "web",
      "VERSIONASOF" -> "3",
      "Branch" -> "dev",
      "batches" -> " a, b ,",
      "fragments" -> "f1"))
    assert(o == ReadOptions(
      "web",
      SnapshotSpec(branch = Some("dev"), version = Some(3)),
      Some(Seq("a", "b")),
      Some(Seq("f1"))))
  }

  test("timestampAsOf takes ISO-8601 instants (UTC when no zone is given) or epoch milliseconds") {
    val at = (v: String) => ReadOptions.parse(Map("path" -> "t", "timestampAsOf" -> v)).snapshot.asOfMicros.get
    val expected = SnapshotResolver.toMicros("2026-11-29T11:24:37.500Z")
    assert(at("2026-11-29T11:24:37.500Z") == expected)
    assert(at("2026-11-29 11:24:37.5") == expected)
    assert(at("2026-11-29T12:24:37.5+01:00") == expected)
    assert(at((expected / 1000).toString) == expected)
    intercept[OmniTableAnalysisException](at("yesterday"))
  }

  test("bad values are refused with the accepted form") {
    def msg(opts: (String, String)*) =
      intercept[OmniTableAnalysisException](ReadOptions.parse(Map("path" -> "t") ++ opts)).getMessage
    assert(msg("versionAsOf" -> "x").contains("expected a version number >= 0"))
    assert(msg("batches" -> " , ").contains("comma-separated list of batch names"))
    assert(intercept[OmniTableAnalysisException](ReadOptions.parse(Map.empty)).getMessage.contains("load(\"<table>\")"))
  }
}
