"""``MERGE INTO`` from Spark SQL (session extension ResolveOmniTableMerge, DSv2 row-level
operations, jvm/.../write/ColumnChanges.scala) on SQLite and PostgreSQL: ``WHEN MATCHED [AND c]
THEN UPDATE SET …`` and ``… THEN DELETE`` leave what Python's ``Table.update`` / ``Table.delete``
of the same rows leave, in one commit that writes only the assigned columns' files; a source row
matching a target row twice, assigned system columns and a commit killed midway commit nothing;
races with Python commits. WHEN NOT MATCHED clauses: test_spark_merge_insert.py."""

from __future__ import annotations

import itertools
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

_views = itertools.count()


def _ids(t: omnitable.Table) -> dict[int, int]:
    """x → _ai_unique_id_ of the live rows."""
    return {r["x"]: r[ROW_ID] for r in _rows(t)}


def _source(spark: Any, rows: dict[str, list[Any]], schema: str) -> str:
    """A temp view of ``rows`` (column → values, typed by the DDL ``schema``)."""
    name = f"src_{next(_views)}"
    cols = list(rows)
    data = list(zip(*(rows[c] for c in cols), strict=True))
    spark.createDataFrame(data, schema).createOrReplaceTempView(name)
    return name


def _scores(spark: Any, ids: list[int], quality: list[float]) -> str:
    return _source(spark, {ROW_ID: ids, "quality": quality}, f"{ROW_ID} bigint, quality double")


def _merge(catalog: str, t: omnitable.Table, src: str, clauses: str) -> str:
    return f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.{ROW_ID} = s.{ROW_ID} {clauses}"


def test_merge_update_equals_python_update(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    sql, py = _table(wh), _table(wh)
    ids = _ids(sql)
    src = _scores(spark, [ids[1], ids[6], ids[7]], [10.0, 60.0, 70.0])
    spark.sql(_merge(catalog, sql, src, "WHEN MATCHED THEN UPDATE SET quality = s.quality"))
    pids = _ids(py)
    py.update(pa.table({ROW_ID: [pids[1], pids[6], pids[7]], "quality": [10.0, 60.0, 70.0]}),
              columns=["quality"])  # fmt: skip
    strip = [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(sql)]
    assert strip == [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(py)]
    head = sql.history(1)[0]
    assert head.op == "update" and head.summary["rows"] == 3 and head.summary["fragments"] == 2
    assert head.summary["columns"] == ["quality"]
    assert sql.version == py.version
    files = _file_columns(sql, head.version)
    assert len(files) == 2 and all(cols == {"quality"} for cols in files), files


@pytest.mark.parametrize(
    ("assignment", "written"),
    [("quality = s.quality", {"quality"}), ("label = 'u', quality = t.quality + s.quality",
                                            {"label", "quality"}),
     ("text = concat(t.text, '!')", {"text"})],
)  # fmt: skip
def test_merge_writes_only_the_assigned_columns(
    spark: Any, wh: omnitable.Warehouse, catalog: str, assignment: str, written: set[str]
) -> None:
    """WriteOnlyAssignedColumns reads MergeRows: the new files carry exactly the assigned columns
    (one file per touched fragment and group), the other columns keep their values."""
    t = _table(wh)
    before, rows, ids = _parquet(t), _rows(t), _ids(t)
    src = _scores(spark, [ids[x] for x in range(6)], [100.0] * 6)
    spark.sql(_merge(catalog, t, src, f"WHEN MATCHED THEN UPDATE SET {assignment}"))
    head = t.history(1)[0]
    files = _file_columns(t, head.version)
    assert len(files) == 2 and all(cols == written for cols in files), files  # fragments 0-3, 4-7
    assert len(_parquet(t) - before) == 2
    got = _rows(t)
    for old, new in zip(rows, got, strict=True):
        for col in ("label", "quality", "text"):
            if col not in written or old["x"] >= 6:
                assert new[col] == old[col], (col, old, new)
    assert [r["text"] for r in got if r["x"] < 6] == (
        [f"t{x}!" for x in range(6)] if "text" in written else [f"t{x}" for x in range(6)]
    )
    assert set(head.summary["columns"]) == written


def test_merge_without_the_column_only_rule_writes_every_column(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """With WriteOnlyAssignedColumns excluded, the MERGE rewrites every user column of the touched
    fragments (Spark's whole rows): the same rows, not column-only."""
    t = _table(wh)
    rows, ids = _rows(t), _ids(t)
    src = _scores(spark, [ids[1], ids[2]], [-1.0, -2.0])
    rule = "io.omnitable.spark.optimizer.WriteOnlyAssignedColumns"
    spark.conf.set("spark.sql.optimizer.excludedRules", rule)
    try:
        spark.sql(_merge(catalog, t, src, "WHEN MATCHED THEN UPDATE SET quality = s.quality"))
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")
    files = _file_columns(t, t.version)
    assert files and set().union(*files) == {"x", "label", "quality", "text"}, files
    expected = [{**r, "quality": {1: -1.0, 2: -2.0}.get(r["x"], r["quality"])} for r in rows]
    assert _rows(t) == expected


def test_merge_update_and_delete_in_one_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """Clauses updating some rows and deleting others of the same fragment (rows 0-3) commit
    once: deletion vectors and the rewritten quality files in one version."""
    t = _table(wh)
    ids, v = _ids(t), t.version
    src = _scores(spark, [ids[x] for x in (0, 1, 2, 5)], [-1.0, -1.0, -2.0, -5.0])
    spark.sql(_merge(
        catalog, t, src,
        "WHEN MATCHED AND s.quality < -1.5 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET quality = s.quality",
    ))  # fmt: skip
    assert t.version == v + 1
    head = t.history(1)[0]
    assert head.op == "update" and head.summary["rows"] == 2 and head.summary["deleted"] == 2
    got = {r["x"]: r["quality"] for r in _rows(t)}
    assert 2 not in got and 5 not in got and len(got) == 10
    assert got[0] == -1.0 and got[1] == -1.0 and got[3] == 3.0
    assert all(cols == {"quality"} for cols in _file_columns(t, head.version))


def test_merge_delete_only(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    sql, py = _table(wh), _table(wh)
    ids = _ids(sql)
    src = _scores(spark, [ids[x] for x in (3, 4, 9)], [0.0, 0.0, 0.0])
    spark.sql(_merge(catalog, sql, src, "WHEN MATCHED AND t.x <> 4 THEN DELETE"))
    py.delete(pc.field("x").isin([3, 9]))
    assert [r["x"] for r in _rows(sql)] == [r["x"] for r in _rows(py)]
    head = sql.history(1)[0]
    assert head.op == "delete" and head.summary["rows"] == 2


def test_a_delete_only_merge_racing_an_update_of_another_column_lands(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """A MERGE that only deletes reads the joined and filtered columns only (its read set, as a
    DELETE's): a Python update of ``text`` landing while it waits at its commit does not conflict
    (the statement's condition reads ``quality``, which nothing changed)."""
    t = _table(wh)
    ids = _ids(t)
    src = _scores(spark, [ids[1], ids[2]], [0.0, 0.0])
    statement = _merge(catalog, t, src, "WHEN MATCHED AND t.quality > 1.5 THEN DELETE")
    with paused_at(spark, "delete.before_commit", tmp_path, lambda: spark.sql(statement)) as out:
        wh.table(t.name).update(pa.table({ROW_ID: [ids[1]], "text": ["new"]}))
    assert "error" not in out, out
    got = {r["x"]: r["text"] for r in _rows(t)}
    assert 2 not in got and got[1] == "new" and len(got) == 11


def test_merge_matching_nothing_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v = t.version
    src = _scores(spark, [-5, -6], [1.0, 2.0])
    spark.sql(_merge(catalog, t, src, "WHEN MATCHED THEN UPDATE SET quality = s.quality"))
    assert t.version == v


def test_a_source_row_matching_twice_fails_and_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """Spark's MERGE cardinality check still fires on the rewritten plan: two source rows for one
    target row fail the statement; nothing is committed and no written file stays."""
    t = _table(wh)
    v, files, ids = t.version, _parquet(t), _ids(t)
    src = _scores(spark, [ids[1], ids[1], ids[2]], [1.0, 2.0, 3.0])
    with pytest.raises(Exception, match="MERGE_CARDINALITY_VIOLATION"):
        spark.sql(_merge(catalog, t, src, "WHEN MATCHED THEN UPDATE SET quality = s.quality"))
    assert t.version == v and _parquet(t) == files


@pytest.mark.parametrize(
    "assignment",
    [f"{ROW_ID} = t.{ROW_ID} + 1000", "_ai_append_name_ = 'other'"],
)
def test_merge_assigning_system_columns_fails_and_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, assignment: str
) -> None:
    t = _table(wh)
    v, files, ids = t.version, _parquet(t), _ids(t)
    src = _scores(spark, [ids[1]], [1.0])
    with pytest.raises(Exception, match="OMNITABLE_INVALID_UPDATE.*a system column"):
        spark.sql(_merge(catalog, t, src, f"WHEN MATCHED THEN UPDATE SET {assignment}"))
    assert t.version == v and _parquet(t) == files


def test_a_merge_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v, files, rows, ids = t.version, _parquet(t), _rows(t), _ids(t)
    src = _scores(spark, [ids[x] for x in (1, 2, 6)], [-1.0, -2.0, -6.0])
    spark.conf.set(FAILPOINT_CONF, "commit.mid_insert=raise")
    try:
        with pytest.raises(Exception, match="commit.mid_insert"):
            spark.sql(_merge(
                catalog, t, src,
                "WHEN MATCHED AND s.quality < -1.5 THEN DELETE "
                "WHEN MATCHED THEN UPDATE SET quality = s.quality",
            ))  # fmt: skip
    finally:
        spark.conf.unset(FAILPOINT_CONF)
    assert t.version == v and _rows(wh.table(t.name)) == rows
    assert _parquet(t) == files


@pytest.mark.parametrize("concurrent", ["update", "delete", "append", "update_other_column"])
def test_merge_racing_a_python_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, concurrent: str
) -> None:
    """A Python commit landing while the MERGE (updates quality of x=1, deletes x=2) waits at its
    commit: an update of the same cells conflicts, so does a delete of a matched row (a new
    deletion vector of the fragment the MERGE deletes in); an append of a new batch and an update
    of another column (text) land next to it: the MERGE's read set is the columns its scan read
    (the assigned and joined ones only, WriteOnlyAssignedColumns)."""
    t = _table(wh)
    ids = _ids(t)
    src = _scores(spark, [ids[1], ids[2]], [-1.0, -2.0])
    statement = _merge(
        catalog, t, src,
        "WHEN MATCHED AND s.quality < -1.5 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET quality = s.quality",
    )  # fmt: skip
    with paused_at(spark, "update.before_commit", tmp_path, lambda: spark.sql(statement)) as out:
        other = wh.table(t.name)
        if concurrent == "update":
            other.update(pa.table({ROW_ID: [ids[1]], "quality": [9.0]}))
        elif concurrent == "delete":
            other.delete(pc.field("x") == 1)
        elif concurrent == "update_other_column":
            other.update(pa.table({ROW_ID: [ids[1]], "text": ["new"]}))
        else:
            other.append(pa.table({"x": [100], "quality": [5.0]}), "b2")
    got = {r["x"]: r["quality"] for r in _rows(t)}
    if concurrent == "append":
        assert "error" not in out, out
        assert got[1] == -1.0 and 2 not in got and got[100] == 5.0
    elif concurrent == "update_other_column":
        assert "error" not in out, out
        assert got[1] == -1.0 and 2 not in got
        assert {r["x"]: r["text"] for r in _rows(t)}[1] == "new"
    else:
        assert "OMNITABLE_COMMIT_CONFLICT" in str(out.get("error"))
        assert 2 in got  # the MERGE's delete did not land either
        assert got.get(1) == (9.0 if concurrent == "update" else None)


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    matched=st.sets(st.integers(0, 13), max_size=8),
    factor=st.integers(-3, 3),
    cut=st.integers(-1, 12),
    deleted=st.sets(st.integers(0, 11), max_size=3),
)
def test_random_merges_equal_table_update_and_delete(
    spark: Any,
    wh: omnitable.Warehouse,
    catalog: str,
    matched: set[int],
    factor: int,
    cut: int,
    deleted: set[int],
) -> None:
    """``MERGE … WHEN MATCHED AND t.x < cut THEN DELETE WHEN MATCHED THEN UPDATE SET quality =
    t.quality * f, label = s.label`` on a random subset of rows (x 12, 13 match nothing) leaves
    exactly what ``Table.delete`` and ``Table.update`` of the same rows leave (a pandas model of
    the rows decides which)."""
    sql, py = _table(wh), _table(wh)
    for t in (sql, py):
        if deleted:
            t.delete(pc.field("x").isin(sorted(deleted)))
    live = _ids(sql)
    xs = sorted(matched)
    src = _source(
        spark,
        {ROW_ID: [live.get(x, -1 - x) for x in xs], "label": [f"l{x}" for x in xs]},
        f"{ROW_ID} bigint, label string",
    )
    spark.sql(_merge(
        catalog, sql, src,
        f"WHEN MATCHED AND t.x < {cut} THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET quality = t.quality * {factor}, label = s.label",
    ))  # fmt: skip
    model = py.read([ROW_ID, "x", "quality"]).to_pandas()
    hit = model[model.x.isin(xs)]
    gone, kept = hit[hit.x < cut], hit[hit.x >= cut]
    if len(kept):
        py.update(
            pa.table({ROW_ID: kept[ROW_ID].tolist(), "quality": (kept.quality * factor).tolist(),
                      "label": [f"l{x}" for x in kept.x]}),
            columns=["quality", "label"],
        )  # fmt: skip
    if len(gone):
        py.delete(pc.field("x").isin(gone.x.tolist()))
    assert _rows(sql) == _rows(py)
