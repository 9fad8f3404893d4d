"""``CALL system.backfill`` and ``system.retry_errors`` taking ``features`` and ``batches`` as
arrays (``array('a', 'b')``, named or positional) as well as comma-separated strings
(docs/spark.md, "Procedures"): the same plan, values and states either way, on SQLite and
PostgreSQL; an array of another element type, an empty array or an empty or blank name is refused
(``OMNITABLE_INVALID_PROCEDURE_ARGUMENT``) with nothing committed."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import omnitable

pytestmark = pytest.mark.spark

FEATURES = [
    ("n_len", "LENGTH(url) + n", "bigint", "1"),
    ("label", "concat(url, '-', n)", "string", "1"),
]


def _table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"url": "string", "n": "int"})
    t.append(pa.table({"url": ["a", "bb", "ccc"], "n": [1, 2, 3]}), "b1")
    t.append(pa.table({"url": ["dddd", "e"], "n": [5, None]}), "b2")
    t.append(pa.table({"url": ["ff"], "n": [6]}), "b3")
    for f, expr, typ, version in FEATURES:
        t.register(omnitable.sql_feature(f, expr, typ, version))
    return t


def _call(spark: Any, sql: str) -> list[tuple[Any, ...]]:
    return sorted((r["feature"], r["fragments"], r["rows"]) for r in spark.sql(sql).collect())


def _after(t: omnitable.Table) -> tuple[dict[tuple[str, str], str], list[dict[str, Any]]]:
    """The states grid and the derived values by row."""
    grid = t.status()
    states: dict[tuple[str, str], str] = {
        (b, c): grid.state(b, c) for b in grid.batches for c in grid.columns
    }
    return states, t.read(["url", "n_len", "label"]).sort_by("url").to_pylist()


@pytest.mark.parametrize("procedure", ["backfill", "retry_errors"])
def test_arrays_plan_as_the_comma_separated_strings(
    spark: Any, wh: omnitable.Warehouse, catalog: str, procedure: str
) -> None:
    """Named arrays, positional arrays and the strings backfill the same fragments with the
    same values; only the batches given are computed."""
    strings, named, positional = (_table(wh, n) for n in ("strs", "named", "pos"))
    by_string = _call(spark, f"CALL {catalog}.system.{procedure}(table => 'strs', "
                             "features => 'n_len, label', batches => 'b1,b2')")  # fmt: skip
    by_named = _call(spark, f"CALL {catalog}.system.{procedure}(table => 'named', "
                            "features => array('n_len', 'label'), batches => array('b1', 'b2'))")  # fmt: skip
    by_position = _call(
        spark,
        f"CALL {catalog}.system.{procedure}('pos', array('n_len', ' label'), 'main', array('b1', 'b2'))",
    )
    assert by_string == by_named == by_position == [("label@1", 2, 5), ("n_len@1", 2, 5)]
    got = _after(named)
    assert got == _after(strings) == _after(positional)
    assert got[0][("b3", "n_len")] == "missing" and got[0][("b2", "label")] == "done"
    # NULL batches (the default) with an array of features: every batch
    assert _call(spark, f"CALL {catalog}.system.{procedure}('named', array('n_len'))") == [
        ("n_len@1", 1, 1)
    ]


@pytest.mark.parametrize(
    ("argument", "detail"),
    [
        ("features => array(1, 2)", "argument 'features' is an array of INT"),
        (
            "features => array('n_len'), batches => array(true)",
            "argument 'batches' is an array of BOOLEAN",
        ),
        ("features => array()", "argument 'features' is array(): give feature names"),
        ("features => array('n_len', '')", "give feature names separated by commas, or an array"),
        ("features => array('n_len'), batches => array('b1', ' ')", "give append names"),
    ],
    ids=["ints", "booleans", "empty", "empty_name", "blank_batch"],
)
def test_a_bad_array_is_refused(
    spark: Any, wh: omnitable.Warehouse, catalog: str, argument: str, detail: str
) -> None:
    t = _table(wh, "web")
    versions = len(t.history())
    for procedure in ("backfill", "retry_errors"):
        with pytest.raises(Exception, match="OMNITABLE_INVALID_PROCEDURE_ARGUMENT") as info:
            spark.sql(f"CALL {catalog}.system.{procedure}(table => 'web', {argument})").collect()
        assert detail in str(info.value)
        assert f"system.{procedure}" in str(info.value)
    assert len(wh.table("web").history()) == versions  # nothing committed
