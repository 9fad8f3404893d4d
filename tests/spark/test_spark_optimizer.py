"""OmniTable's Catalyst rules seen from PySpark: FusePythonUDFs (plan shape, bytes sent to Python,
equal results with the rule on and off, back-off cases) and the optimizer settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import omnitable
from omnitable.exec.scan_metrics import plan_metric_total

pytestmark = pytest.mark.spark

FUSE = "spark.omnitable.optimizer.fuse_python_udfs"


def _udfs() -> dict[str, Any]:
    from pyspark.sql.functions import pandas_udf, udf

    @pandas_udf("double")  # type: ignore[call-overload]
    def length(s: pd.Series) -> pd.Series:
        return s.str.len().astype(float)

    @pandas_udf("double")  # type: ignore[call-overload]
    def vowels(s: pd.Series) -> pd.Series:
        return s.str.count("[aeiou]").astype(float)

    @pandas_udf("double")  # type: ignore[call-overload]
    def words(s: pd.Series) -> pd.Series:
        return s.str.count(r"\S+").astype(float)

    @pandas_udf("string")  # type: ignore[call-overload]
    def first(s: pd.Series) -> pd.Series:
        return s.str.slice(0, 3)

    @udf("int")
    def plain_len(s):  # type: ignore[no-untyped-def]  # no hints: pyspark would read them as Arrow types
        return None if s is None else len(s)

    return {"length": length, "vowels": vowels, "words": words, "first": first, "plain": plain_len}


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[omnitable.Table]:
    wh = omnitable.connect(tmp_path_factory.mktemp("opt") / "wh")
    rng = np.random.default_rng(11)
    n = 3000
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz     "))
    text = ["".join(rng.choice(letters, int(k))) for k in rng.integers(0, 80, n)]
    t = wh.create_table("docs", {"n": "bigint", "text": "string"}, groups={"wide": ["text"]})
    t.append(pa.table({"n": range(n), "text": text}), "b1", target_fragment_rows=1000)
    yield t
    wh.close()


def _read(spark: Any, t: omnitable.Table) -> Any:
    return spark.read.format("omnitable").option("warehouse", t.warehouse.uri).load(t.name)


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _same_with_rule(spark: Any, query: Callable[[], Any], key: str = FUSE) -> None:
    spark.conf.set(key, "true")
    try:
        on = _rows(query())
        spark.conf.set(key, "false")
        off = _rows(query())
    finally:
        spark.conf.unset(key)
    assert on == off


def _guarded_udfs() -> dict[str, Any]:
    """`valid` (a filter UDF) and `parse` variants that raise on any row `valid` rejects: a query
    that filters on `valid` before calling `parse` fails if `parse` ever sees a rejected row."""
    from pyspark.sql.functions import pandas_udf, udf

    @pandas_udf("boolean")  # type: ignore[call-overload]
    def valid(s: pd.Series) -> pd.Series:
        return s.str.len() > 20

    @pandas_udf("double")  # type: ignore[call-overload]
    def parse(s: pd.Series) -> pd.Series:
        if (s.str.len() <= 20).any():
            raise ValueError("parse called on a row the filter removed")
        return s.str.len().astype(float)

    @udf("double")
    def parse_plain(s):  # type: ignore[no-untyped-def]
        if len(s) <= 20:
            raise ValueError("parse_plain called on a row the filter removed")
        return float(len(s))

    return {"valid": valid, "parse": parse, "parse_plain": parse_plain}


def test_udfs_never_run_on_rows_a_filter_removed(spark: Any, docs: Any) -> None:
    from pyspark.sql.functions import col

    u, g = _udfs(), _guarded_udfs()
    long_rows = _read(spark, docs).where("length(text) > 20").count()

    def issue() -> Any:  # the query of issue 10, item 14
        return (
            _read(spark, docs)
            .withColumn("ok", g["valid"]("text"))
            .filter("ok")
            .withColumn("n", g["parse"]("text"))
        )

    def on_computed() -> Any:  # a filter on a computed value guards the next UDF
        return (
            _read(spark, docs)
            .withColumn("a", u["length"]("text"))
            .filter("a > 20")
            .withColumn("b", u["vowels"]("text"))
            .filter(col("b") >= 0)
            .withColumn("n", g["parse"]("text"))
        )

    def plain() -> Any:
        return (
            _read(spark, docs)
            .withColumn("a", u["plain"]("text"))
            .filter("a > 20")
            .withColumn("n", g["parse_plain"]("text"))
        )

    for query in (issue, on_computed, plain):
        assert len(query().collect()) == long_rows
        _same_with_rule(spark, query)
    assert "FusePythonUDFs: 2 Python evaluations -> 2, 1 shared" in _plan(issue())


def test_a_filter_udf_is_evaluated_once(spark: Any, docs: Any) -> None:
    u = _udfs()

    def query() -> Any:  # Spark evaluates `length` for the filter, then again for the column
        return _read(spark, docs).withColumn("a", u["length"]("text")).filter("a > 5")

    plan = _plan(query())
    assert "FusePythonUDFs: 2 Python evaluations -> 1, 1 shared" in plan
    assert "ArrowEvalPython" not in plan
    _same_with_rule(spark, query)
    fused = plan_metric_total(query(), "pythonDataSent")
    spark.conf.set(FUSE, "false")
    try:
        assert "FusedPythonEval" not in _plan(query())
        separate = plan_metric_total(query(), "pythonDataSent")
    finally:
        spark.conf.unset(FUSE)
    assert 0 < fused < separate


def test_stacked_udfs_reuse_the_filter_udfs_below(spark: Any, docs: Any) -> None:
    u = _udfs()

    def query() -> Any:
        return (
            _read(spark, docs)
            .withColumn("a", u["length"]("text"))
            .filter("a > 5")
            .withColumn("b", u["vowels"]("text"))
            .filter("b > 2")
            .withColumn("c", u["words"]("text"))
            .withColumn("d", u["first"]("text"))
        )

    plan = _plan(query())
    # length and vowels (evaluated below the filter) are reused; words and first stay above it
    assert "FusePythonUDFs: 2 Python evaluations -> 2, 2 shared" in plan
    above = [line for line in plan.splitlines() if "ArrowEvalPython" in line]
    assert len(above) == 1 and "words(" in above[0] and "length(" not in above[0]
    _same_with_rule(spark, query)
    fused = plan_metric_total(query(), "pythonDataReceived")
    spark.conf.set(FUSE, "false")
    try:
        assert "FusedPythonEval" not in _plan(query())
        separate = plan_metric_total(query(), "pythonDataReceived")
    finally:
        spark.conf.unset(FUSE)
    assert 0 < fused < separate
    spark.conf.set("spark.sql.adaptive.enabled", "true")
    try:  # planned by a strategy, so adaptive execution plans it the same way
        assert "FusedPythonEval" in _plan(query())
        _same_with_rule(spark, query)
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", "false")


def test_never_fuses_non_deterministic_udfs(spark: Any, docs: Any) -> None:
    u = _udfs()
    noisy = u["vowels"].asNondeterministic()

    def query() -> Any:
        return _read(spark, docs).withColumn("b", noisy("text")).filter("b > 2")

    assert "FusedPythonEval" not in _plan(query())
    assert len(query().collect()) > 0


def test_filters_on_raw_columns_still_share_and_the_setting_stops_fusion(
    spark: Any, docs: Any
) -> None:
    from pyspark.sql.functions import col

    u = _udfs()

    def guarded() -> Any:  # the filter also reads `text`
        return (
            _read(spark, docs)
            .withColumn("a", u["length"]("text"))
            .filter((col("a") > 5) | col("text").startswith("x"))
            .withColumn("b", u["vowels"]("text"))
        )

    assert "FusePythonUDFs: 2 Python evaluations -> 2, 1 shared" in _plan(guarded())
    _same_with_rule(spark, guarded)
    spark.conf.set(FUSE, "false")
    try:
        assert "FusedPythonEval" not in _plan(guarded())
    finally:
        spark.conf.unset(FUSE)


def test_different_eval_types_are_not_fused_together(spark: Any, docs: Any) -> None:
    u = _udfs()

    def query() -> Any:
        return (
            _read(spark, docs)
            .withColumn("a", u["plain"]("text"))
            .filter("a > 5")
            .withColumn("b", u["vowels"]("text"))
        )

    plan = _plan(query())
    # the two evaluations of plain_len (filter, then projection) fuse; vowels (pandas) stays apart
    assert "ArrowEvalPython [vowels(" in plan
    fused = [line for line in plan.splitlines() if "FusedPythonEval" in line]
    assert len(fused) == 1 and "plain_len" in fused[0] and "vowels" not in fused[0]
    _same_with_rule(spark, query)


def test_random_chains_give_the_same_rows(spark: Any, docs: Any) -> None:
    from pyspark.sql.functions import col

    u = _udfs()
    numeric = ["length", "vowels", "words"]
    rng = np.random.default_rng(5)
    for _ in range(4):
        picks = [numeric[i] for i in rng.integers(0, len(numeric), 3)]
        cuts = [float(v) for v in rng.integers(0, 20, 3)]

        def query(picks: list[str] = picks, cuts: list[float] = cuts) -> Any:
            df = _read(spark, docs)
            for k, (name, cut) in enumerate(zip(picks, cuts, strict=True)):
                df = df.withColumn(f"f{k}", u[name]("text"))
                if k % 2 == 0:
                    df = df.filter(col(f"f{k}") >= cut)
            return df.select("n", *[f"f{k}" for k in range(3)])

        _same_with_rule(spark, query)


def test_scan_rules_can_be_turned_off_from_python(spark: Any, docs: Any, tmp_path: Path) -> None:
    df = _read(spark, docs)
    joined = df.select("_ai_unique_id_", "n").join(
        df.select("_ai_unique_id_", "text"), "_ai_unique_id_"
    )
    assert "FuseOmniTableScans: 2 reads -> 1 scan" in _plan(joined)
    _same_with_rule(spark, lambda: joined, key="spark.omnitable.optimizer.fuse_scans")
    filtered = df.where("n < 30").select("text")
    assert "LateMaterializeFilteredColumns: on" in _plan(filtered)
    _same_with_rule(spark, lambda: filtered, key="spark.omnitable.optimizer.late_materialization")


def test_identical_scans_share_exchanges_and_cached_data(spark: Any, docs: Any) -> None:
    from pyspark.sql import functions as sf

    def self_join(base: Any) -> Any:
        agg = base.groupBy("n").agg(sf.sum("n").alias("s"), sf.max("text").alias("t"))
        return agg.join(agg.select("n", sf.col("s").alias("s2"), sf.col("t").alias("t2")), "n")

    for base in (_read(spark, docs), _read(spark, docs).where("n < 30")):
        df = self_join(base)
        assert "ReusedExchange" in _plan(df)
        assert df.count() == base.count()
    cached = _read(spark, docs).select("n", "text")
    cached.cache()
    try:
        later = _read(spark, docs).select("n", "text").where("n > 3")
        assert "InMemoryTableScan" in _plan(later)
        assert later.count() == len(docs.read(["n"])) - 4
    finally:
        cached.unpersist()
