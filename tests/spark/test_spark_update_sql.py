"""``UPDATE`` from Spark SQL (DSv2 row-level operations, jvm/.../write/ColumnChanges.scala) on
SQLite and PostgreSQL: the rows equal Python's ``Table.update`` of the same rows, one commit (op
``update``), system columns refused, a failed commit leaving
nothing, races with Python commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_tables import FAILPOINT_CONF, paused_at
from spark_tables import data_files as _parquet
from spark_tables import dml_rows as _rows
from spark_tables import dml_table as _table
from spark_tables import file_columns as _file_columns

import omnitable
from omnitable import ROW_ID

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark


def test_update_equals_python_update(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    sql, py = _table(wh), _table(wh)
    spark.sql(f"UPDATE {catalog}.{sql.name} SET quality = quality * 2 WHERE x % 5 = 1")
    before = {r[ROW_ID]: r for r in _rows(py)}
    ids = [r[ROW_ID] for r in before.values() if r["x"] % 5 == 1]
    py.update(pa.table({ROW_ID: ids, "quality": [before[i]["quality"] * 2 for i in ids]}),
              columns=["quality"])  # fmt: skip
    assert _rows(sql) == _rows(py)
    head = sql.history(1)[0]
    assert head.op == "update" and head.summary["rows"] == 3 and head.summary["fragments"] == 3
    rows = spark.sql(f"SELECT x, quality FROM {catalog}.{sql.name} ORDER BY x").collect()
    assert [(r.x, r.quality) for r in rows] == [(r["x"], r["quality"]) for r in _rows(py)]


@pytest.mark.parametrize(
    ("assignment", "written"),
    [("quality = quality * 2", {"quality"}), ("label = 'u', quality = 0", {"label", "quality"}),
     ("text = upper(text)", {"text"})],
)  # fmt: skip
def test_update_writes_only_the_assigned_columns(
    spark: Any, wh: omnitable.Warehouse, catalog: str, assignment: str, written: set[str]
) -> None:
    """The session extension's WriteOnlyAssignedColumns: the new files carry exactly the assigned
    columns (``label`` and ``quality`` share group ``meta``: one file per fragment), nothing else
    is rewritten, and the rows equal a full-row update's."""
    t = _table(wh)
    before, rows = _parquet(t), _rows(t)
    spark.sql(f"UPDATE {catalog}.{t.name} SET {assignment} WHERE x < 6")
    head = t.history(1)[0]
    files = _file_columns(t, head.version)
    assert len(files) == 2 and all(cols == written for cols in files), files  # fragments 0-3, 4-7
    assert len(_parquet(t) - before) == 2
    got = _rows(t)
    assert [r["x"] for r in got] == [r["x"] for r in rows]
    for old, new in zip(rows, got, strict=True):
        for col in ("label", "quality", "text"):
            if col not in written or old["x"] >= 6:
                assert new[col] == old[col], (col, old, new)
    assert set(head.summary["columns"]) == written


def test_update_matching_nothing_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v = t.version
    spark.sql(f"UPDATE {catalog}.{t.name} SET quality = 0 WHERE x > 100")
    assert t.version == v


@pytest.mark.parametrize(
    "assignment",
    ["_ai_unique_id_ = _ai_unique_id_ + 1000", "_ai_append_name_ = 'other'"],
)
def test_dml_on_system_columns_fails_and_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, assignment: str
) -> None:
    t = _table(wh)
    v, files = t.version, _parquet(t)
    with pytest.raises(Exception, match="a system column"):
        spark.sql(f"UPDATE {catalog}.{t.name} SET {assignment} WHERE x = 1")
    assert t.version == v and _parquet(t) == files


def test_an_update_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v, files = t.version, _parquet(t)
    spark.conf.set(FAILPOINT_CONF, "commit.mid_insert=raise")
    try:
        with pytest.raises(Exception, match="commit.mid_insert"):
            spark.sql(f"UPDATE {catalog}.{t.name} SET label = 'z' WHERE x < 6")
    finally:
        spark.conf.unset(FAILPOINT_CONF)
    assert t.version == v and wh.table(t.name).read(["label"])["label"].to_pylist() == ["a"] * 12
    assert _parquet(t) == files


@pytest.mark.parametrize("concurrent", ["update", "update_other_column", "append"])
def test_update_racing_a_python_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, concurrent: str
) -> None:
    """A Python commit landing while the SQL UPDATE of row x=1's quality waits at its commit: an
    update of the same cells (quality, same fragment) conflicts; an update of another column
    (text) of the same row and an append of a new batch land: the UPDATE's read set is what its
    scan read, the assigned and filtered columns only (WriteOnlyAssignedColumns)."""
    t = _table(wh)
    ids = [r[ROW_ID] for r in _rows(t)]
    statement = f"UPDATE {catalog}.{t.name} SET quality = -1 WHERE x = 1"
    with paused_at(spark, "update.before_commit", tmp_path, lambda: spark.sql(statement)) as out:
        other = wh.table(t.name)
        if concurrent == "update":
            other.update(pa.table({ROW_ID: [ids[0]], "quality": [9.0]}))
        elif concurrent == "update_other_column":
            other.update(pa.table({ROW_ID: [ids[1]], "text": ["new"]}))
        else:
            other.append(pa.table({"x": [100], "quality": [5.0]}), "b2")
    got = t.read(["x", "quality"]).sort_by("x").to_pydict()
    if concurrent == "append":
        assert "error" not in out, out
        assert got["quality"][:2] == [0.0, -1.0] and got["x"][-1] == 100
    elif concurrent == "update_other_column":
        assert "error" not in out, out
        assert got["quality"][:2] == [0.0, -1.0]
        assert t.read(["text"])["text"].to_pylist()[1] == "new"
    else:
        assert "OMNITABLE_COMMIT_CONFLICT" in str(out.get("error"))
        assert got["quality"][:2] == [9.0, 1.0]


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    mod=st.integers(2, 5),
    rem=st.integers(0, 4),
    factor=st.integers(-3, 3),
    deleted=st.sets(st.integers(0, 11), max_size=3),
)
def test_random_updates_equal_table_update(
    spark: Any,
    wh: omnitable.Warehouse,
    catalog: str,
    mod: int,
    rem: int,
    factor: int,
    deleted: set[int],
) -> None:
    """``UPDATE t SET quality = quality * f, label = 'u' WHERE x % m = r`` leaves exactly what
    ``Table.update`` of the same rows leaves (a pandas model of the rows decides which)."""
    sql, py = _table(wh), _table(wh)
    for t in (sql, py):
        if deleted:
            t.delete(pc.field("x").isin(sorted(deleted)))
    spark.sql(
        f"UPDATE {catalog}.{sql.name} SET quality = quality * {factor}, label = 'u' "
        f"WHERE x % {mod} = {rem}"
    )
    model = py.read([ROW_ID, "x", "quality"]).to_pandas()
    hit = model[model.x % mod == rem]
    if len(hit):
        py.update(
            pa.table({ROW_ID: hit[ROW_ID].tolist(), "quality": (hit.quality * factor).tolist(),
                      "label": ["u"] * len(hit)}),
            columns=["quality", "label"],
        )  # fmt: skip
    assert _rows(sql) == _rows(py)
    assert sql.version == py.version
