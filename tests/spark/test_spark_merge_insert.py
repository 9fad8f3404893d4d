"""``MERGE INTO … WHEN NOT MATCHED [BY TARGET] [AND c] THEN INSERT (cols) VALUES (…)`` from Spark
SQL on SQLite and PostgreSQL (session extension ResolveOmniTableMerge; jvm/.../write/
ColumnChanges.scala hands the inserted rows to a FragmentWriter of a new batch): the inserted rows
become one new batch named as INSERT INTO names it (``spark.omnitable.write.appendName``) with
generated ids, committed with the matched updates and deletes in one version (op ``upsert``); a
MERGE that only inserts is an append. The classic upsert equals a model of the rows and Python's
``Table.upsert`` of the same data; a missing batch name, a batch name taken before or during the
MERGE, and a commit killed midway commit nothing and leave no file. One warehouse per backend for
the module (``shared_warehouse``), a table of its own name for each test (``_table``)."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_tables import FAILPOINT_CONF, paused_at, raising_at
from sqlalchemy import text

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

NAME_CONF = "spark.omnitable.write.appendName"
_names = itertools.count()
_views = itertools.count()

UPSERT = (
    "WHEN MATCHED THEN UPDATE SET quality = s.quality "
    "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality)"
)


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    name = f"omi_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    spark.conf.set(NAME_CONF, "merged/1")
    yield name
    spark.conf.unset(FAILPOINT_CONF)
    spark.conf.unset(NAME_CONF)


ROWS = 12


def _table(wh: omnitable.Warehouse, key: str | None = None) -> omnitable.Table:
    t = wh.create_table(
        f"mi{next(_names)}",
        {"x": "bigint", "label": "string", "quality": "double", "text": "string"},
        groups={"meta": ["label", "quality"], "payload": ["text"]},
        key=key,
    )
    data = pa.table({"x": list(range(ROWS)), "label": ["a"] * ROWS,
                     "quality": [float(i) for i in range(ROWS)],
                     "text": [f"t{i}" for i in range(ROWS)]})  # fmt: skip
    if key is None:
        t.append(data, "b1", target_fragment_rows=4)
    else:
        t.upsert(data, append_name="b1")
    return t


def _rows(t: omnitable.Table) -> list[dict[str, Any]]:
    return t.read([ROW_ID, "x", "label", "quality", "text"]).sort_by("x").to_pylist()


def _values(t: omnitable.Table) -> dict[int, tuple[Any, ...]]:
    """x → (label, quality, text) of the live rows."""
    return {r["x"]: (r["label"], r["quality"], r["text"]) for r in _rows(t)}


def _parquet(t: omnitable.Table) -> set[str]:
    return {str(p) for p in Path(t.location.path).rglob("*.parquet")}


def _source(spark: Any, xs: list[int], quality: list[float]) -> str:
    name = f"isrc_{next(_views)}"
    spark.createDataFrame(list(zip(xs, quality, strict=True)), "x bigint, quality double") \
        .createOrReplaceTempView(name)  # fmt: skip
    return name


def _merge(catalog: str, t: omnitable.Table, src: str, clauses: str) -> str:
    return f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.x = s.x {clauses}"


def _model(
    before: dict[int, tuple[Any, ...]], xs: list[int], quality: list[float]
) -> dict[int, tuple[Any, ...]]:
    """The classic upsert on a dict of rows: matched rows take the new quality, new keys are
    inserted with NULL label and text."""
    out = dict(before)
    for x, q in zip(xs, quality, strict=True):
        out[x] = (before[x][0], q, before[x][2]) if x in before else (None, q, None)
    return out


def test_classic_upsert_is_one_commit_with_a_new_named_batch(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    before, v = _values(t), t.version
    max_id = max(r[ROW_ID] for r in _rows(t))
    xs, qs = [1, 6, 100, 101, 102], [10.0, 60.0, 1.5, 2.5, 3.5]
    spark.sql(_merge(catalog, t, _source(spark, xs, qs), UPSERT))
    assert _values(t) == _model(before, xs, qs)
    assert t.version == v + 1
    head = t.history(1)[0]
    assert head.op == "upsert"
    assert head.summary["batch"] == "merged/1"
    assert head.summary["inserted"] == 3 and head.summary["merged"] == 2
    assert head.summary["columns"] == ["quality"]
    batches = {b.name: b.rows for b in t.batches()}
    assert batches == {"b1": ROWS, "merged/1": 3}
    rows = _rows(t)
    ids = [r[ROW_ID] for r in rows]
    assert len(set(ids)) == len(ids)
    assert all(r[ROW_ID] > max_id for r in rows if r["x"] >= 100)
    names = t.read([ROW_ID, "x", "_ai_append_name_"]).to_pylist()
    assert {r["x"] for r in names if r["_ai_append_name_"] == "merged/1"} == {100, 101, 102}
    # a later Python append gets ids beyond the MERGE's: next_row_id moved past the reservation
    t.append(pa.table({"x": [200]}), "b3")
    new_id = {r["x"]: r[ROW_ID] for r in _rows(wh.table(t.name))}[200]
    assert new_id > max(ids)


def test_classic_upsert_equals_python_upsert(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """The MERGE on a plain table leaves the values ``Table.upsert`` (last write wins) leaves on a
    table keyed by x, from the same rows."""
    sql, py = _table(wh), _table(wh, key="x")
    xs, qs = [0, 5, 11, 50, 51], [-1.0, -5.0, -11.0, 0.5, 0.25]
    spark.sql(_merge(catalog, sql, _source(spark, xs, qs), UPSERT))
    result = py.upsert(pa.table({"x": xs, "quality": qs}), append_name="merged/1")
    assert result.version is not None
    assert _values(sql) == _values(py)
    assert sql.history(1)[0].op == py.history(1)[0].op == "upsert"
    assert {b.name: b.rows for b in sql.batches()} == {b.name: b.rows for b in py.batches()}


def test_insert_update_and_delete_clauses_in_one_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    before, v = _values(t), t.version
    xs, qs = [1, 2, 3, 40, 41, 42], [-1.0, 2.0, 3.0, 4.0, -4.0, 4.5]
    spark.sql(_merge(
        catalog, t, _source(spark, xs, qs),
        "WHEN MATCHED AND s.quality < 0 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET label = 'u' "
        "WHEN NOT MATCHED AND s.quality < 0 THEN INSERT (x, text) VALUES (s.x, 'neg') "
        "WHEN NOT MATCHED AND s.x > 41 THEN INSERT (x, quality, label) VALUES (s.x, s.quality, 'big')",
    ))  # fmt: skip
    want = dict(before)
    del want[1]
    want[2] = ("u", 2.0, "t2")
    want[3] = ("u", 3.0, "t3")
    want[41] = (None, None, "neg")
    want[42] = ("big", 4.5, None)
    assert _values(t) == want  # 40 matches no INSERT condition
    assert t.version == v + 1
    head = t.history(1)[0]
    assert head.op == "upsert"
    assert (head.summary["inserted"], head.summary["merged"], head.summary["deleted"]) == (2, 2, 1)


def test_a_merge_inserting_only_unmatched_rows_commits_an_append(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A MERGE with WHEN MATCHED clauses whose source matches no row commits only the batch."""
    t = _table(wh)
    before, v = _values(t), t.version
    spark.sql(_merge(catalog, t, _source(spark, [70, 71], [7.0, 7.5]), UPSERT))
    assert _values(t) == _model(before, [70, 71], [7.0, 7.5])
    head = t.history(1)[0]
    assert t.version == v + 1 and head.op == "append" and head.summary["batch"] == "merged/1"


@pytest.mark.parametrize("supplied", [False, True])
def test_an_insert_only_merge_is_an_append(
    spark: Any, wh: omnitable.Warehouse, catalog: str, supplied: bool
) -> None:
    """Only NOT MATCHED clauses: the source rows no target row matches, each with the first clause
    whose condition holds, appended as one batch (supplied ids: checked as an append's)."""
    t = _table(wh)
    before, v = _values(t), t.version
    src = _source(spark, [3, 30, 31, 32], [3.0, -30.0, 31.0, 32.0])
    ids = f", {ROW_ID}" if supplied else ""
    id_values = ", s.x + 1000000" if supplied else ""
    spark.sql(_merge(
        catalog, t, src,
        f"WHEN NOT MATCHED AND s.quality < 0 THEN INSERT (x, label{ids}) VALUES (s.x, 'neg'{id_values}) "
        f"WHEN NOT MATCHED BY TARGET THEN INSERT (x, quality{ids}) VALUES (s.x, s.quality{id_values})",
    ))  # fmt: skip
    want = dict(before)
    want[30] = ("neg", None, None)
    want[31] = (None, 31.0, None)
    want[32] = (None, 32.0, None)
    assert _values(t) == want
    head = t.history(1)[0]
    assert t.version == v + 1 and head.op == "append" and head.summary["batch"] == "merged/1"
    got = {r["x"]: r[ROW_ID] for r in _rows(t)}
    if supplied:
        assert [got[x] for x in (30, 31, 32)] == [1000030, 1000031, 1000032]
    else:
        assert len(set(got.values())) == len(got)


def test_an_insert_only_merge_of_existing_ids_fails(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v, files = t.version, _parquet(t)
    taken = _rows(t)[0][ROW_ID]
    with pytest.raises(Exception, match="OMNITABLE_INVALID_ROW_IDS"):
        spark.sql(_merge(
            catalog, t, _source(spark, [50], [1.0]),
            f"WHEN NOT MATCHED THEN INSERT (x, {ROW_ID}) VALUES (s.x, {taken})",
        ))  # fmt: skip
    assert t.version == v and _parquet(t) == files


@pytest.mark.parametrize("clauses", [UPSERT, "WHEN NOT MATCHED THEN INSERT (x) VALUES (s.x)"])
def test_no_batch_name_fails_and_commits_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, clauses: str
) -> None:
    t = _table(wh)
    v, files, rows = t.version, _parquet(t), _rows(t)
    spark.conf.unset(NAME_CONF)
    with pytest.raises(Exception, match="OMNITABLE_MISSING_APPEND_NAME"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), clauses))
    assert t.version == v and _parquet(t) == files and _rows(t) == rows


def test_a_batch_name_already_taken_fails_and_leaves_no_file(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    spark.conf.set(NAME_CONF, "b1")
    v, files = t.version, _parquet(t)
    with pytest.raises(Exception, match="OMNITABLE_BATCH_EXISTS"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), UPSERT))
    assert t.version == v and _parquet(t) == files


@pytest.mark.parametrize(
    ("clauses", "error"),
    [
        ("WHEN NOT MATCHED THEN INSERT (x, _ai_append_name_) VALUES (s.x, 'n')",
         "_ai_append_name_ is set by OmniTable"),
        (f"WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT (x, {ROW_ID}) VALUES (s.x, 5)",
         "OMNITABLE_UNSUPPORTED_DML"),
    ],
)  # fmt: skip
def test_inserts_of_system_columns_are_refused(
    spark: Any, wh: omnitable.Warehouse, catalog: str, clauses: str, error: str
) -> None:
    t = _table(wh)
    v, files = t.version, _parquet(t)
    with pytest.raises(Exception, match=error):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), clauses))
    assert t.version == v and _parquet(t) == files


def test_a_merge_inserting_into_a_keyed_table_is_refused_unless_keyed(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A keyed table takes only MERGEs on its key that update and insert
    (tests/spark/test_spark_keyed_merge.py); one that also deletes is refused."""
    t = _table(wh, key="x")
    v = t.version
    with pytest.raises(Exception, match="OMNITABLE_KEYED_TABLE"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]),
                         "WHEN MATCHED AND s.quality < 0 THEN DELETE " + UPSERT))  # fmt: skip
    assert t.version == v


def test_an_upsert_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v, files, rows = t.version, _parquet(t), _rows(t)
    with raising_at(spark, "commit.mid_insert"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), UPSERT))
    fresh = wh.table(t.name)
    assert fresh.version == v and _rows(fresh) == rows
    assert [b.name for b in fresh.batches()] == ["b1"]
    assert _parquet(t) == files


@pytest.mark.parametrize("concurrent", ["same_name", "other_name"])
def test_an_upsert_racing_a_python_append(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, concurrent: str
) -> None:
    """A Python append landing while the MERGE waits at its commit: one of the same batch name
    wins (commit.py `_check_batches`: the MERGE fails with "a concurrent commit created it
    first", nothing of it committed, its files removed); one of another name lands next to it."""
    t = _table(wh)
    before = _values(t)
    src = _source(spark, [1, 77], [1.0, 7.0])
    statement = lambda: spark.sql(_merge(catalog, t, src, UPSERT))  # noqa: E731
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        name = "merged/1" if concurrent == "same_name" else "py"
        wh.table(t.name).append(pa.table({"x": [500], "quality": [5.0]}), name)
    got = _values(wh.table(t.name))
    if concurrent == "same_name":
        assert "a concurrent commit created it first" in str(out.get("error")), out
        assert got == {**before, 500: (None, 5.0, None)}
        snap = wh.table(t.name).snapshot()  # every file on disk is a committed one
        assert len(_parquet(t)) == sum(len(fs) for fs in snap.files_by_fragment.values())
    else:
        assert "error" not in out, out
        assert got == {**_model(before, [1, 77], [1.0, 7.0]), 500: (None, 5.0, None)}


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    keys=st.lists(st.integers(0, 20), unique=True, max_size=8),
    base=st.integers(0, 10),
)
def test_random_upserts_equal_the_model_and_python_upsert(
    spark: Any, wh: omnitable.Warehouse, catalog: str, keys: list[int], base: int
) -> None:
    """The classic upsert of random keys (some of the table's x 0..11, some new) on a table with
    ``base`` rows deleted leaves exactly the model's rows, and the rows ``Table.upsert`` of the same
    data leaves on a table keyed by x; a MERGE changing nothing commits nothing."""
    t, py = _table(wh), _table(wh, key="x")
    if base:
        for table in (t, py):
            table.delete(pc.field("x") < base)
    before, v = _values(t), t.version
    qs = [float(k) * 3 for k in keys]
    spark.sql(_merge(catalog, t, _source(spark, keys, qs), UPSERT))
    assert _values(t) == _model(before, keys, qs)
    if keys:
        py.upsert(
            pa.table({"x": pa.array(keys, pa.int64()), "quality": qs}), append_name="merged/1"
        )
    assert _values(t) == _values(py)
    inserted = [k for k in keys if k not in before]
    assert t.version == (v + 1 if keys else v)
    if inserted:
        assert {b.name: b.rows for b in t.batches()}["merged/1"] == len(inserted)


def test_update_set_star_and_insert_star_assign_the_source_columns(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """``UPDATE SET *`` / ``INSERT *`` assign the table's user columns the source has by name (x,
    quality; its extra column is ignored, the system columns are never assigned): column-only,
    the matched rows' new files carry only x and quality."""
    t = _table(wh)
    before, v = _values(t), t.version
    existing = set(t.snapshot().files_by_fragment)  # the fragments of b1
    name = f"isrc_{next(_views)}"
    spark.createDataFrame(
        [(2, 20.0, "no"), (9, 90.0, "no"), (60, 6.5, "no")],
        "x bigint, quality double, extra string",
    ).createOrReplaceTempView(name)
    spark.sql(
        _merge(catalog, t, name, "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    )
    assert _values(t) == _model(before, [2, 9, 60], [20.0, 90.0, 6.5])
    head = t.history(1)[0]
    assert t.version == v + 1 and head.op == "upsert"
    assert sorted(head.summary["columns"]) == ["quality", "x"]
    snap = t.snapshot()
    names = {c.column_id: c.name for c in snap.columns}
    rewritten = [
        {names[c] for c in f.columns}
        for fragment, fs in snap.files_by_fragment.items()
        for f in fs
        if f.added_version == head.version and fragment in existing
    ]
    assert rewritten and all(cols <= {ROW_ID, "x", "quality"} for cols in rewritten), rewritten


def test_an_insert_star_only_merge_appends_the_source_columns(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    before = _values(t)
    spark.sql(
        _merge(catalog, t, _source(spark, [4, 44], [4.0, 44.0]), "WHEN NOT MATCHED THEN INSERT *")
    )
    assert _values(t) == {**before, 44: (None, 44.0, None)}
    assert t.history(1)[0].op == "append"


def test_not_matched_by_source_clauses_update_and_delete_in_the_same_commit(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """WHEN NOT MATCHED BY SOURCE clauses (conditions and values read the target) update and
    delete the target rows no source row matches, with the matched updates and the inserted
    batch in one commit; the rewritten files carry only the assigned columns."""
    t = _table(wh)
    before, v = _values(t), t.version
    spark.sql(_merge(
        catalog, t, _source(spark, [1, 2, 90], [10.0, 20.0, 9.0]),
        "WHEN MATCHED THEN UPDATE SET quality = s.quality "
        "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality) "
        "WHEN NOT MATCHED BY SOURCE AND t.x > 8 THEN DELETE "
        "WHEN NOT MATCHED BY SOURCE AND t.x < 5 THEN UPDATE SET label = 'gone', quality = t.quality + 100",
    ))  # fmt: skip
    want = {x: row for x, row in before.items() if x <= 8}
    want[1] = ("a", 10.0, "t1")
    want[2] = ("a", 20.0, "t2")
    for x in (0, 3, 4):
        want[x] = ("gone", before[x][1] + 100, before[x][2])
    want[90] = (None, 9.0, None)
    assert _values(t) == want
    head = t.history(1)[0]
    assert t.version == v + 1 and head.op == "upsert"
    assert (head.summary["inserted"], head.summary["merged"], head.summary["deleted"]) == (1, 5, 3)
    assert sorted(head.summary["columns"]) == ["label", "quality"]


def test_a_not_matched_by_source_delete_only_merge(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    before = _values(t)
    spark.sql(_merge(
        catalog, t, _source(spark, [3, 4], [0.0, 0.0]),
        "WHEN NOT MATCHED BY SOURCE AND t.quality > 5 THEN DELETE",
    ))  # fmt: skip
    assert _values(t) == {x: r for x, r in before.items() if x <= 5 or x in (3, 4)}
    assert t.history(1)[0].op == "delete"


@pytest.mark.parametrize("mixed", [False, True], ids=["insert_only", "with_update"])
def test_insert_values_run_only_on_the_rows_spark_inserts(
    spark: Any, wh: omnitable.Warehouse, catalog: str, mixed: bool
) -> None:
    """Guard: an INSERT value that fails (ANSI DIVIDE_BY_ZERO) on a matched source row (x = 5)
    and on an unmatched row its clause's condition excludes (x = 300) is never evaluated on them,
    as in Spark's own MERGE; the insert-only rewrite into an append keeps that."""
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    t = _table(wh)
    before = _values(t)
    src = _source(spark, [5, 200, 300], [0.5, 2.0, 3.0])
    update = "WHEN MATCHED THEN UPDATE SET quality = s.quality " if mixed else ""
    spark.sql(
        _merge(
            catalog, t, src,
            update + "WHEN NOT MATCHED AND s.x <> 300 THEN INSERT (x, quality) "
            "VALUES (s.x, CAST(1000 DIV ((s.x - 5) * (s.x - 300)) AS DOUBLE))",
        )
    )  # fmt: skip
    expected = {**before, 200: (None, 0.0, None)}  # 1000 DIV -19500 truncates to 0
    if mixed:
        expected[5] = (before[5][0], 0.5, before[5][2])
    assert _values(wh.table(t.name)) == expected
    # the same value on a row the clause does insert fails the statement, as Spark would
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        spark.sql(
            _merge(
                catalog, t, _source(spark, [300], [3.0]),
                "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, CAST(1 DIV (s.x - 300) AS DOUBLE))",
            )
        )  # fmt: skip


def _run_of(t: omnitable.Table, run_id: str | None) -> dict[str, Any]:
    (run,) = [r for r in t.runs() if r["run_id"] == run_id]
    return run


@pytest.mark.parametrize("matched", [True, False], ids=["upsert", "inserts_only"])
def test_the_inserted_batch_records_its_run_as_insert_into_does(
    spark: Any, wh: omnitable.Warehouse, catalog: str, matched: bool
) -> None:
    """The new batch's ingest run is recorded in the MERGE's commit transaction, already
    succeeded, and the commit names it (op ``upsert``; ``append`` when no target row matched):
    the same shape as the run of an ``INSERT INTO`` (plan, metrics, host and pid)."""
    t = _table(wh)
    xs = [1, 6, 100, 101] if matched else [100, 101]
    spark.sql(_merge(catalog, t, _source(spark, xs, [0.5] * len(xs)), UPSERT))
    merge = wh.table(t.name).history(1)[0]
    assert merge.op == ("upsert" if matched else "append")
    run = _run_of(t, merge.run_id)
    spark.conf.set(NAME_CONF, "inserted/1")
    spark.sql(f"INSERT INTO {catalog}.{t.name} (x) VALUES (900)").collect()
    insert = wh.table(t.name).history(1)[0]
    ins = _run_of(t, insert.run_id)
    assert merge.run_id is not None and merge.run_id.startswith("ingest-")
    assert merge.run_id != insert.run_id
    shape = {
        k: v for k, v in ins.items() if k not in ("run_id", "plan", "metrics") and "_at" not in k
    }
    assert {k: v for k, v in run.items() if k in shape} == shape  # kind, status, host, pid, ...
    assert run["status"] == "succeeded" and run["message"] is None
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert run["plan"] == {**ins["plan"], "batch": "merged/1", "partitions": partitions}
    assert run["metrics"] == {"rows": 2, "version": merge.version}
    assert ins["metrics"] == {"rows": 1, "version": insert.version}
    assert run["started_at"] <= run["finished_at"]
    listed = spark.sql(f"SELECT run_id, status FROM {catalog}.{t.name}.runs").collect()
    assert (merge.run_id, "succeeded") in [tuple(r) for r in listed]


def test_inserted_rows_are_written_by_every_task_that_receives_them(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A source spread over 3 partitions, 40 new rows: the write's tasks each write the
    inserted rows they receive (not one task for all), so the batch has several fragments; each
    task numbers its rows from ``base + (partition << 33)`` as an append's does (ids unique and
    contiguous per task, fragment sequence numbers from ``partition << 24`` in id order), and
    the table's next id moves past the reservation."""
    t = _table(wh)
    base = int(wh.table(t.name).record.next_row_id)
    xs = [1, 2, *range(100, 140)]
    name = f"isrc_{next(_views)}"
    spark.createDataFrame([(x, float(x)) for x in xs], "x bigint, quality double").repartition(3) \
        .createOrReplaceTempView(name)  # fmt: skip
    assert spark.table(name).rdd.getNumPartitions() == 3
    spark.sql(_merge(catalog, t, name, UPSERT))
    fresh = wh.table(t.name)
    got = _values(fresh)
    assert {x: got[x][1] for x in xs} == {x: float(x) for x in xs}
    snap = fresh.snapshot()
    (batch,) = [b for b in snap.batches if b.name == "merged/1"]
    frags = [f for f in snap.fragments if f.batch_id == batch.batch_id]
    assert len(frags) > 1 and sum(f.row_count for f in frags) == 40
    with wh.catalog.store.read() as conn:
        found = conn.execute(
            text("SELECT fragment_id, seq FROM fragments WHERE batch_id = :b"),
            {"b": batch.batch_id},
        )
        seqs: dict[str, int] = {r[0]: int(r[1]) for r in found}
    ids = {r["x"]: r[ROW_ID] for r in _rows(fresh)}
    new = sorted(ids[x] for x in range(100, 140))
    assert len(set(new)) == 40 and all(i >= base for i in new)
    blocks: dict[int, list[int]] = {}
    for i in new:
        blocks.setdefault((i - base) >> 33, []).append(i)
    assert len(blocks) > 1  # more than one task wrote inserted rows
    for k, block in blocks.items():
        assert block == list(range(base + (k << 33), base + (k << 33) + len(block)))
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert int(fresh.record.next_row_id) == base + (partitions << 33)
    # fragments are numbered per task in id order: task k's from k << 24
    assert sorted({seqs[f.fragment_id] >> 24 for f in frags}) == sorted(blocks)
    per_fragment = f"SELECT _ai_fragment_, min({ROW_ID}) FROM {catalog}.{t.name} GROUP BY 1"
    first_ids = dict(spark.sql(per_fragment).collect())
    in_seq = sorted(frags, key=lambda f: seqs[f.fragment_id])
    assert [first_ids[f.fragment_id] for f in in_seq] == sorted(
        first_ids[f.fragment_id] for f in frags
    )


@pytest.mark.parametrize("point", ["merge.before_commit", "commit.mid_insert", "commit.before_end"])
def test_an_upsert_killed_at_a_commit_failpoint_leaves_no_run_batch_or_fragment(
    spark: Any, wh: omnitable.Warehouse, catalog: str, point: str
) -> None:
    t = _table(wh)
    v, files, rows, runs = t.version, _parquet(t), _rows(t), t.runs()
    fragments = {f.fragment_id for f in t.snapshot().fragments}
    with raising_at(spark, point):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77, 78], [1.0, 7.0, 8.0]), UPSERT))
    fresh = wh.table(t.name)
    assert fresh.version == v and _rows(fresh) == rows
    assert [b.name for b in fresh.batches()] == ["b1"]
    assert {f.fragment_id for f in fresh.snapshot().fragments} == fragments
    assert fresh.runs() == runs
    assert _parquet(t) == files
