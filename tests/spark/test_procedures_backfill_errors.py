"""``CALL <catalog>.system.backfill(...)`` with values that do not convert to the feature's type
(docs/spark.md, "Backfilling SQL features"; docs/errors.md): the JVM records them in the table's
error table as Python's backfill does (the same error rows, commit summary, lineage error counts,
``Table.errors()``, ``status()`` and ``.errors`` metadata table) and commits the good values; too
many failures refuse the step with Python's ``ErrorRatioExceeded`` message; a backfill killed at
its commit leaves no visible error row; a racing Python backfill of the same feature conflicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import omt_metadata_features as feats
import pyarrow as pa
import pytest
from test_procedures_backfill import (
    FAILPOINT_CONF,
    _backfill,
    _error,
    _facts,
    _paused,
    _release,
    _states,
)

import omnitable

pytestmark = pytest.mark.spark

DATA = pa.table(
    {
        "url": ["1", "x'", "3", None, "q\"'\n"],
        "n": [1, 2, 3, 4, 5],
        "r": [0.5, 1e-7, 2.0, 1e300, None],
    }
)
MORE = pa.table({"url": ["7", "nope"], "n": [None, 6], "r": [7.25, 8.0]})
FEATURES = [
    ("num", "concat(url, '')", "int", "1"),  # 'x'', 'q"'\n', 'nope' are no int
    ("small", "n * r", "decimal(3,1)", "1"),  # 1e300 * 4 overflows
    ("ok", "n + 1", "bigint", "1"),  # never fails
]
PROPS = {"backfill.max_error_ratio": 0.6}
# what an error row says, without ids, file ids, run ids and times
ROW = ["_ai_unique_id_", "batch", "row_offset", "feature", "feature_version", "kind"]
ROW += ["exception_type", "message", "traceback", "input_digest"]


def _table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"url": "string", "n": "int", "r": "double"}, properties=PROPS)
    t.append(DATA, "b1")
    t.append(MORE, "b2")
    for f, expr, typ, version in FEATURES:
        t.register(omnitable.sql_feature(f, expr, typ, version))
    return t


def _errors(spark: Any, t: omnitable.Table, **kw: Any) -> list[tuple[Any, ...]]:
    rows = t.errors(spark=spark, **kw).collect()
    assert all(r["file_id"] and r["run_id"] and r["recorded_at"] for r in rows)
    return sorted(tuple(r[c] for c in ROW) for r in rows)


def _sql_errors(spark: Any, catalog: str, table: str) -> list[tuple[Any, ...]]:
    rows = spark.sql(f"SELECT * FROM {catalog}.{table}.errors").collect()
    return sorted(tuple(r[c] for c in ROW) for r in rows)


def _values(t: omnitable.Table) -> dict[str, list[Any]]:
    data = t.read().sort_by("_ai_unique_id_")
    return {c: data.column(c).to_pylist() for c in ("num", "small", "ok")}


def _grid(t: omnitable.Table) -> dict[tuple[str, str], tuple[str, int]]:
    g = t.status()
    return {(b, c): (g.state(b, c), g.errors.get((b, c), 0)) for b in g.batches for c in g.columns}


def test_error_rows_and_commits_equal_pythons(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py, jvm = _table(wh, "py"), _table(wh, "web")
    py.backfill(["num", "small", "ok"]).run(spark)
    got = _backfill(spark, catalog, "num,small,ok")
    assert sorted(g[:3] for g in got) == [("num@1", 2, 7), ("ok@1", 2, 7), ("small@1", 2, 7)]
    assert _values(jvm) == _values(py)
    assert _values(jvm)["num"] == [1, None, 3, None, None, 7, None]
    assert _facts(wh, "web") == _facts(wh, "py")  # summaries with "errors", lineage error_count
    errors = _errors(spark, jvm)
    assert errors == _errors(spark, py)
    assert _sql_errors(spark, catalog, "web") == _sql_errors(spark, catalog, "py") == errors
    by_feature = {(e[3], e[2], e[1]) for e in errors}
    assert by_feature == {("num", 1, "b1"), ("num", 4, "b1"), ("num", 1, "b2"), ("small", 3, "b1")}
    messages = {e[7] for e in errors}
    assert "Feature num@1: value \"x'\" of (concat(url, '')) cannot be converted to int" in messages
    assert "Feature num@1: value 'q\"\\'\\n' of (concat(url, '')) cannot be converted to int" in (
        messages
    )
    assert _grid(jvm) == _grid(py)
    assert _grid(jvm)[("b1", "num")] == ("done", 2)
    assert jvm.runs()[0]["status"] == "succeeded"


def test_too_many_failures_refuse_the_step_with_pythons_message(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    py, jvm = _table(wh, "py"), _table(wh, "web")
    for t in (py, jvm):
        t.register(omnitable.sql_feature("bad", "concat('x', url)", "int", "1"))
    with pytest.raises(omnitable.ErrorRatioExceeded) as info:
        py.backfill(["bad"]).run(spark)
    files = set(tmp_path.rglob("*.parquet"))
    msg = _error(spark, f"CALL {catalog}.system.backfill('web', 'bad')")
    assert "OMNITABLE_ERROR_RATIO_EXCEEDED" in msg and str(info.value) in msg
    assert "6 of 7 records failed (85.71%), above max_error_ratio=60.00%" in msg
    assert len(jvm.history()) == len(py.history())  # nothing committed
    assert jvm.runs()[0]["status"] == py.runs()[0]["status"] == "aborted"
    assert set(tmp_path.rglob("*.parquet")) - files <= {
        p for p in tmp_path.rglob("*.parquet") if "/errors/" in str(p)
    }  # no data file left
    assert _errors(spark, jvm) == _errors(spark, py) == []


def test_killed_at_the_commit_leaves_no_visible_error_row(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh, "web")
    for point in ("backfill.before_commit", "commit.mid_insert", "commit.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        assert point in _error(spark, f"CALL {catalog}.system.backfill('web', 'num')")
    spark.conf.unset(FAILPOINT_CONF)
    assert _errors(spark, t) == [] and _sql_errors(spark, catalog, "web") == []
    assert len(_errors(spark, t, include_resolved=True)) == 3 * 3  # recorded, never visible
    assert {s for (_, c), s in _states(t).items() if c == "num"} == {"missing"}
    _backfill(spark, catalog, "num")
    assert len(_errors(spark, t)) == 3 and _grid(t)[("b2", "num")] == ("done", 1)


def test_a_racing_python_backfill_of_the_same_feature_conflicts(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = _table(wh, "web")
    result = race(
        "backfill.before_commit",
        lambda: wh.table("web").backfill(["num"]).run(spark),
        lambda: _backfill(spark, catalog, "num"),
    )
    assert "wrote column(s) num" in str(result["error"])
    visible = _errors(spark, t)
    assert len(visible) == 3 and len(_errors(spark, t, include_resolved=True)) == 6
    assert {r[7] for r in _errors(spark, t, include_resolved=True)} == {r[7] for r in visible}


def test_a_jvm_backfill_with_errors_against_a_python_append_and_backfill(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh, "web")
    gate = tmp_path / "gate"
    gate.mkdir()
    # an append lands while the JVM is at its commit, its error rows written: both land
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.backfill('web', 'num')")
    t.append(pa.table({"url": ["zz", "5"], "n": [9, 8], "r": [1.0, 2.0]}), "b3")
    _release(gate, thread)
    assert [tuple(r)[:3] for r in out["rows"]] == [("num@1", 2, 7)]
    assert len(_errors(spark, t)) == 3 and _grid(t)[("b3", "num")] == ("missing", 0)

    # Python backfills the same feature meanwhile: the JVM's commit conflicts, its rows stay hidden
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.backfill('web', 'num')")
    wh.table("web").backfill(["num"]).run(spark)
    _release(gate, thread)
    assert "wrote column(s) num in 1 of the same fragment(s)" in str(out["error"])
    assert len(_errors(spark, t)) == 4 and _grid(t)[("b3", "num")] == ("done", 1)
    assert len(_errors(spark, t, include_resolved=True)) == 5  # the JVM's b3 row: hidden


def _retry(spark: Any, catalog: str, features: str, table: str = "web") -> list[tuple[Any, ...]]:
    rows = spark.sql(f"CALL {catalog}.system.retry_errors('{table}', '{features}')").collect()
    return [(r["feature"], r["fragments"], r["rows"], r["version"]) for r in rows]


def test_retry_errors_equals_pythons_retry(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py, jvm = _table(wh, "py"), _table(wh, "web")
    for t in (py, jvm):
        t.append(pa.table({"url": ["8", "9"], "n": [1, 2], "r": [1.0, 2.0]}), "b3")
        t.backfill(["num", "ok"]).run(spark)
    py.backfill(["num"], retry_errors=True).run(spark)
    got = _retry(spark, catalog, "num")  # b1 and b2 have failed records, b3 none
    assert [g[:3] for g in got] == [("num@1", 2, 7)]
    assert got[0][3] == max(c[0] for c in _facts(wh, "web")["commits"])
    assert _retry(spark, catalog, "ok") == []  # nothing failed: nothing to do
    assert _facts(wh, "web") == _facts(wh, "py")
    assert _values(jvm) == _values(py)
    assert _errors(spark, jvm) == _errors(spark, py) and len(_errors(spark, jvm)) == 3
    resolved = _errors(spark, jvm, include_resolved=True)
    assert resolved == _errors(spark, py, include_resolved=True) and len(resolved) == 6
    assert _grid(jvm) == _grid(py) and _grid(jvm)[("b1", "num")] == ("done", 2)
    # a feature never computed is computed (retry_errors also does what is missing)
    assert [g[:3] for g in _retry(spark, catalog, "small")] == [("small@1", 3, 9)]


def test_retry_errors_refuses_a_pandas_feature_naming_the_python_api(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("words", {"text": "string"})
    t.append(pa.table({"text": ["a", "b"]}), "b1")
    t.register(feats.shout)
    msg = _error(spark, f"CALL {catalog}.system.retry_errors('words', 'shout')")
    assert "OMNITABLE_PROCEDURE_NEEDS_PYTHON" in msg and "shout@1" in msg
    assert "Table.backfill(features, retry_errors=True)" in msg
    assert len(t.history()) == 3  # nothing committed


def test_a_retry_racing_python_or_killed_at_its_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh, "web")
    _backfill(spark, catalog, "num")
    before = _errors(spark, t)
    for point in ("backfill.before_commit", "commit.mid_insert", "commit.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        assert point in _error(spark, f"CALL {catalog}.system.retry_errors('web', 'num')")
    spark.conf.unset(FAILPOINT_CONF)
    assert _errors(spark, t) == before and len(before) == 3  # the old rows stay the visible ones

    gate = tmp_path / "gate"
    gate.mkdir()
    # an append lands while the retry is at its commit: both land
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.retry_errors('web', 'num')")
    t.append(pa.table({"url": ["1"], "n": [1], "r": [1.0]}), "b3")
    _release(gate, thread)
    assert [tuple(r)[:3] for r in out["rows"]] == [("num@1", 2, 7)]
    assert _errors(spark, t) == before and _grid(t)[("b3", "num")] == ("missing", 0)
    # Python retries the same records meanwhile: the JVM's retry conflicts
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.retry_errors('web', 'num')")
    wh.table("web").backfill(["num"], retry_errors=True).run(spark)
    _release(gate, thread)
    msg = str(out["error"]).splitlines()[1]
    assert "OMNITABLE_COMMIT_CONFLICT" in msg and "Cannot commit backfill" in msg, msg
    assert len(_errors(spark, t, include_resolved=True)) == 3 * 3 + 3 + 3 + 3 + 3
    assert _errors(spark, t) == before and _grid(t)[("b3", "num")] == ("done", 0)
