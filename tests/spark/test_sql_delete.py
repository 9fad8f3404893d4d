"""DELETE FROM from Spark SQL, committed by the JVM (docs/spark.md, "Row-level DML"): the rows
it deletes vanish for Python reads, Spark reads, counts and status, time travel before it still
shows them, and it deletes exactly the rows Table.delete deletes for the same predicate."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse."""
    name = f"omd_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def _web(wh: omnitable.Warehouse, name: str = "web") -> omnitable.Table:
    t = wh.create_table(name, {"url": "string", "score": "double"})
    for batch, n in (("b0", 6), ("b1", 4)):
        urls = [f"{batch}-{i}" for i in range(n)]
        t.append(pa.table({"url": urls, "score": [float(i) for i in range(n)]}), batch)
    return t


def _urls(t: omnitable.Table, version: int | None = None) -> list[str]:
    return sorted(t.read(columns=["url"], version=version)["url"].to_pylist())


def test_deleted_rows_vanish_for_python_spark_counts_and_status(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    t.register(omnitable.sql_feature("double_score", "score * 2", "double", "1"))
    before = t.version
    spark.sql(f"DELETE FROM {catalog}.web WHERE _ai_append_name_ = 'b1' OR score >= 4")
    kept = [f"b0-{i}" for i in range(4)]
    assert _urls(t) == kept
    spark_urls = spark.sql(f"SELECT url FROM {catalog}.web").toPandas()["url"]
    assert sorted(spark_urls) == kept
    assert t.count() == 4
    assert {b.name: b.rows for b in t.batches()} == {"b0": 4, "b1": 0}
    grid = t.status()
    assert grid.state("b1", "double_score") == "done"  # nothing left to compute
    assert grid.state("b0", "double_score") == "missing"
    last = t.history()[0]
    assert (last.version, last.op) == (before + 1, "delete")
    assert last.summary["rows"] == 6 and last.summary["fragments"] == 2
    assert len(_urls(t, version=before)) == 10
    old = spark.sql(f"SELECT url FROM {catalog}.web VERSION AS OF {before}").count()
    assert old == 10


def test_sql_delete_then_python_delete_of_the_same_fragment(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    spark.sql(f"DELETE FROM {catalog}.web WHERE url = 'b0-1'")
    assert t.delete(pc.field("url") == "b0-2").rows == 1
    spark.sql(f"DELETE FROM {catalog}.web WHERE url = 'b0-3'")
    assert _urls(t) == sorted({f"b0-{i}" for i in (0, 4, 5)} | {f"b1-{i}" for i in range(4)})
    offsets = spark.sql(
        f"SELECT _ai_row_offset_ FROM {catalog}.web WHERE _ai_append_name_ = 'b0'"
    ).toPandas()["_ai_row_offset_"]
    assert sorted(offsets) == [0, 4, 5]


# -- property: DELETE FROM t WHERE p leaves what Table.delete(p) leaves ---------------------

Pred = tuple[str, pc.Expression, Callable[[dict[str, Any]], bool | None]]


def _atom(draw: Any) -> Pred:
    kind = draw(st.sampled_from(["a_gt", "a_eq", "a_null", "s_eq", "s_null", "b_le"]))
    k = draw(st.integers(-2, 4))
    if kind == "a_gt":
        return (f"a > {k}", pc.field("a") > k, lambda r: None if r["a"] is None else r["a"] > k)
    if kind == "a_eq":
        return (f"a = {k}", pc.field("a") == k, lambda r: None if r["a"] is None else r["a"] == k)
    if kind == "a_null":
        return ("a IS NULL", pc.field("a").is_null(), lambda r: r["a"] is None)
    if kind == "s_null":
        return ("s IS NULL", pc.field("s").is_null(), lambda r: r["s"] is None)
    v = draw(st.sampled_from(["x", "y", "z"]))
    if kind == "s_eq":
        return (f"s = '{v}'", pc.field("s") == v, lambda r: None if r["s"] is None else r["s"] == v)
    f = k / 2
    return (f"b <= {f}", pc.field("b") <= f, lambda r: r["b"] <= f)


def _and(x: bool | None, y: bool | None) -> bool | None:
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def _or(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


@st.composite
def predicates(draw: Any, depth: int = 2) -> Pred:
    op = draw(st.sampled_from(["atom", "and", "or", "not"] if depth else ["atom"]))
    if op == "atom":
        return _atom(draw)
    s1, e1, f1 = draw(predicates(depth - 1))
    if op == "not":
        return (f"NOT ({s1})", ~e1, lambda r: None if f1(r) is None else not f1(r))
    s2, e2, f2 = draw(predicates(depth - 1))
    if op == "and":
        return (f"({s1}) AND ({s2})", e1 & e2, lambda r: _and(f1(r), f2(r)))
    return (f"({s1}) OR ({s2})", e1 | e2, lambda r: _or(f1(r), f2(r)))


rows = st.lists(
    st.fixed_dictionaries(
        {
            "a": st.none() | st.integers(-2, 4),
            "s": st.none() | st.sampled_from(["x", "y", "z"]),
            "b": st.integers(-4, 8).map(lambda v: v / 2),
        }
    ),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=rows, split=st.integers(0, 12), pred=predicates())
def test_sql_delete_equals_table_delete(
    spark: Any, wh: omnitable.Warehouse, catalog: str, data: list[dict[str, Any]], split: int,
    pred: Pred,
) -> None:  # fmt: skip
    sql, expr, model = pred
    name = f"p_{uuid.uuid4().hex[:8]}"
    schema = {"k": "bigint", "a": "bigint", "s": "string", "b": "double"}
    tables = [wh.create_table(f"{name}_{i}", schema) for i in (0, 1)]
    arrow = pa.schema(
        [("k", pa.int64()), ("a", pa.int64()), ("s", pa.string()), ("b", pa.float64())]
    )
    full = pa.Table.from_pylist([{"k": i, **r} for i, r in enumerate(data)], schema=arrow)
    cut = min(split, len(data))
    for t in tables:  # two batches: two fragments when both hold rows
        for batch, part in (("first", full.slice(0, cut)), ("second", full.slice(cut))):
            if part.num_rows:
                t.append(part, batch)
    spark.sql(f"DELETE FROM {catalog}.{name}_0 WHERE {sql}")
    tables[1].delete(expr)
    expected = sorted(i for i, r in enumerate(data) if model(r) is not True)
    for t in tables:
        assert sorted(t.read(columns=["k"])["k"].to_pylist()) == expected, sql
    spark_keys = spark.sql(f"SELECT k FROM {catalog}.{name}_0").toPandas()["k"]
    assert sorted(int(k) for k in spark_keys) == expected
