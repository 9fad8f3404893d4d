"""Renaming, retiring and restoring columns on SQLite and PostgreSQL (``wh``): versioned column
rows, time travel, features, bad input and a concurrent change."""

from __future__ import annotations

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.catalog.commit import ColumnChange, CommitRequest


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("t", {"x": "bigint", "s": "string", "keep": "double"})
    t.append(pa.table({"x": [1, 2, 3], "s": ["a", "b", "c"], "keep": [0.5, 1.5, 2.5]}), "b1")
    return t


def test_rename_changes_only_the_catalog_and_time_travel_keeps_the_old_name(
    wh: omnitable.Warehouse,
) -> None:
    t = _table(wh)
    v = t.rename_column("s", "label")
    assert t.schema.names == [ROW_ID, omnitable.APPEND_NAME, "x", "label", "keep"]
    assert t.read(["label"])["label"].to_pylist() == ["a", "b", "c"]
    assert t.read(["s"], version=v - 1)["s"].to_pylist() == ["a", "b", "c"]
    assert "label" not in t.snapshot(version=v - 1).column_names()
    t.append(pa.table({"x": [4], "label": ["d"]}), "b2")  # new data goes to the renamed column
    assert t.read(["label"])["label"].to_pylist() == ["a", "b", "c", "d"]
    assert t.history()[1].op == "rename_column"
    assert t.history()[1].summary == {"column": "s", "to": "label"}


def test_retire_hides_keeps_and_restore_brings_back(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v = t.retire("keep")
    assert "keep" not in t.schema.names and t.retired() == ["keep"]
    with pytest.raises(omnitable.UnknownColumnError, match="'keep'"):
        t.read(["keep"])
    assert t.read(["keep"], version=v - 1)["keep"].to_pylist() == [0.5, 1.5, 2.5]
    with pytest.raises(omnitable.AlreadyExistsError, match="a retired column has that name"):
        t.add_columns(pa.table({ROW_ID: t.read([ROW_ID])[ROW_ID], "keep": [1.0, 2.0, 3.0]}))
    with pytest.raises(omnitable.AlreadyExistsError, match="already has a column named 'keep'"):
        t.rename_column("x", "keep")
    t.append(pa.table({"x": [4]}), "b2")  # appended while retired: NULL once restored
    t.restore("keep")
    assert t.retired() == [] and t.schema.names[-1] == "keep"
    assert t.read(["keep"])["keep"].to_pylist() == [0.5, 1.5, 2.5, None]
    assert [h.op for h in t.history(3)] == ["restore", "append", "retire"]


def test_retiring_a_feature_output_retires_the_feature(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.register(
        omnitable.sql_feature("twice", "x * 2", "bigint", "1"),
        omnitable.sql_feature("lens", "length(s)", "int", "1"),
        omnitable.sql_feature("more", "twice + 1", "bigint", "1"),
    )
    with pytest.raises(omnitable.ValidationError, match="feature\\(s\\) more read it"):
        t.retire("twice")
    with pytest.raises(omnitable.ValidationError, match="feature\\(s\\) lens read it"):
        t.retire("s")
    t.retire("more")
    t.retire("twice")  # nothing reads it any more
    assert set(t.retired()) == {"twice", "more"}
    assert {f.name for f in t.features()} == {"lens"}
    assert t.status().columns == ["lens"]
    with pytest.raises(omnitable.NotFoundError, match="'twice' .*: it is retired; restore it"):
        t.backfill("twice")
    assert [[f.name for f in s.features] for s in t.backfill("lens").steps] == [["lens"]]
    with pytest.raises(omnitable.AlreadyExistsError, match="a retired column has that name"):
        t.register(omnitable.sql_feature("twice", "x * 3", "bigint", "2"))
    t.restore("twice")
    assert {f.name for f in t.features()} == {"lens", "twice"}
    with pytest.raises(omnitable.ValidationError, match="output of feature 'lens'"):
        t.rename_column("lens", "length")


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda t: t.rename_column("nope", "y"), omnitable.NotFoundError, "no such column"),
        (lambda t: t.rename_column("x", "s"), omnitable.AlreadyExistsError, "already has"),
        (lambda t: t.rename_column("x", "_ai_x"), omnitable.ValidationError, "reserved"),
        (
            lambda t: t.rename_column("x", "a b"),
            omnitable.ValidationError,
            "Cannot use column name",
        ),
        (lambda t: t.rename_column(ROW_ID, "id"), omnitable.ValidationError, "system column"),
        (lambda t: t.retire(omnitable.APPEND_NAME), omnitable.ValidationError, "system column"),
        (lambda t: t.retire("nope"), omnitable.NotFoundError, "no such column"),
        (lambda t: t.restore("x"), omnitable.ValidationError, "is not retired"),
        (lambda t: t.restore("nope"), omnitable.NotFoundError, "does not exist"),
    ],
)
def test_bad_column_changes_commit_nothing(
    wh: omnitable.Warehouse, call: object, error: type[Exception], pattern: str
) -> None:
    t = _table(wh)
    v = t.version
    with pytest.raises(error, match=pattern):
        call(t)  # type: ignore[operator]
    assert t.version == v


def test_retired_twice_and_restored_twice_say_so(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.retire("x")
    with pytest.raises(omnitable.NotFoundError, match="it is retired; restore it first"):
        t.retire("x")
    t.restore("x")
    with pytest.raises(omnitable.ValidationError, match="is not retired"):
        t.restore("x")


def test_a_change_validates_the_column_row_it_read(wh: omnitable.Warehouse) -> None:
    """A rename computed before a concurrent retire of the same column conflicts."""
    t = _table(wh)
    col = t.snapshot().column("x")
    t.retire("x")
    req = CommitRequest(
        op="rename_column",
        base_version=t.version - 1,
        column_changes=[ColumnChange(col.column_id, col.added_version, "y", "active")],
    )
    with pytest.raises(omnitable.CommitConflict, match="renamed, retired or restored"):
        wh.catalog.commit(t.record, req)
    assert t.retired() == ["x"]


def test_add_columns_of_no_rows_adds_only_the_columns(wh: omnitable.Warehouse) -> None:
    """An empty table with the id column adds the columns (NULL in every row), no file: the
    commit ALTER TABLE … ADD COLUMNS from Spark makes (was refused: "needs a _ai_unique_id_
    column", an empty table yielding no batches)."""
    t = _table(wh)
    empty = pa.table({ROW_ID: pa.array([], pa.int64()), "lang": pa.array([], pa.string())})
    v = t.add_columns(empty)
    assert t.history()[0].summary == {"columns": ["lang"], "group": "lang", "rows": 0, "files": 0}
    assert t.history()[0].version == v
    assert t.read(columns=["x", "lang"]).to_pylist() == [
        {"x": x, "lang": None} for x in t.read(columns=["x"]).column("x").to_pylist()
    ]
    assert t.schema.field("lang").type == pa.string()
