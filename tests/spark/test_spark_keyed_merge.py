"""``MERGE INTO`` a keyed table (``create_table(key=[...])``) from Spark SQL on SQLite and
PostgreSQL (session extension: optimizer/KeyedMerge.scala; write: FragmentWriter writes each
inserted fragment's ``_key_index.arrow``, OmniTableDeltaBatchWrite commits through
KeyChecks.commitWith): a MERGE whose ON clause is the key equality is Python's ``Table.upsert``
(last write wins) — same values, op ``upsert`` with ``inserted`` / ``merged``, new keys found by
``Table.lookup``, index files equal to Python's. Duplicate inserted keys, a NULL key and
the forms a keyed table does not take fail with nothing committed; a racing Python upsert of the
same new key conflicts, of other keys lands next to it; a commit killed midway leaves nothing."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_tables import (
    APPEND_NAME_CONF,
    bind_catalog,
    keyed_table,
    paused_at,
    raising_at,
    reset_write_settings,
)

import omnitable
from omnitable import ROW_ID
from omnitable.format.fs import resolve_location
from omnitable.format.keyindex import INDEX_FILE, write_key_index
from omnitable.vocabulary.keys import key_hashes

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

_views = itertools.count()
UPSERT = (
    "WHEN MATCHED THEN UPDATE SET quality = s.quality "
    "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality)"
)


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    name = bind_catalog(spark, wh)
    spark.conf.set(APPEND_NAME_CONF, "merged/1")
    yield name
    reset_write_settings(spark)


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    """A table keyed by x holding x 0..11 (label 'a', quality x, text t<x>)."""
    return keyed_table(wh)


def _values(t: omnitable.Table) -> dict[int, tuple[Any, ...]]:
    """x → (label, quality, text) of the live rows (x unique: a keyed table)."""
    rows = t.read([ROW_ID, "x", "label", "quality", "text"]).to_pylist()
    out = {r["x"]: (r["label"], r["quality"], r["text"]) for r in rows}
    assert len(out) == len(rows)
    return out


def _source(spark: Any, xs: Sequence[int | None], quality: list[float]) -> str:
    name = f"ksrc_{next(_views)}"
    spark.createDataFrame(list(zip(xs, quality, strict=True)), "x bigint, quality double") \
        .createOrReplaceTempView(name)  # fmt: skip
    return name


def _merge(catalog: str, t: omnitable.Table, src: str, clauses: str, on: str = "t.x = s.x") -> str:
    return f"MERGE INTO {catalog}.{t.name} t USING {src} s ON {on} {clauses}"


def _model(
    before: dict[int, tuple[Any, ...]], xs: list[int], quality: list[float]
) -> dict[int, tuple[Any, ...]]:
    """The upsert on a dict of rows: matched rows take the new quality, new keys come in with
    NULL label and text."""
    out = dict(before)
    for x, q in zip(xs, quality, strict=True):
        out[x] = (before[x][0], q, before[x][2]) if x in before else (None, q, None)
    return out


def _files(t: omnitable.Table, suffix: str) -> set[str]:
    return {str(p) for p in Path(t.location.path).rglob(f"*{suffix}")}


def _live_index_files(t: omnitable.Table) -> set[str]:
    snap = t.snapshot()
    return {str(Path(t.location.path) / f.path / INDEX_FILE) for f in snap.fragments}


def _assert_index_like_python(t: omnitable.Table, batch: str, tmp_path: Path) -> None:
    """Every fragment of ``batch`` has the index file Python writes for its keys: the same schema,
    metadata (hash scheme) and entries (Arrow Java and C++ lay the IPC bytes out differently;
    KeyIndexSuite compares files the same way)."""
    snap = t.snapshot()
    physical = next(c.physical_name for c in snap.columns if c.name == "x")
    fragments = [f for f in snap.fragments if f.batch_name == batch]
    assert fragments
    scratch = resolve_location(str(tmp_path / "py_index"))
    for frag in fragments:
        base = next(f for f in snap.files_by_fragment[frag.fragment_id] if f.group_name == "base")
        keys = pq.read_table(Path(t.location.path) / base.path, columns=[physical]).column(0)
        h1, h2 = key_hashes([keys])
        python = _arrow(Path(write_key_index(scratch, frag.path, h1, h2)))
        jvm = _arrow(Path(t.location.path) / frag.path / INDEX_FILE)
        assert jvm.num_rows == frag.row_count and jvm.equals(python, check_metadata=True), frag.path


def _arrow(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as f:
        return pa.ipc.open_file(f).read_all()


def test_keyed_merge_equals_python_upsert(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    merged, py = _table(wh), _table(wh)
    before, v = _values(merged), merged.version
    xs, qs = [1, 6, 100, 101, 102], [10.0, 60.0, 1.5, 2.5, 3.5]
    spark.sql(_merge(catalog, merged, _source(spark, xs, qs), UPSERT))
    py.upsert(pa.table({"x": xs, "quality": qs}), append_name="merged/1")
    assert _values(merged) == _values(py) == _model(before, xs, qs)
    assert merged.version == v + 1
    head = merged.history(1)[0]
    assert head.op == "upsert" and head.summary["batch"] == "merged/1"
    assert (head.summary["inserted"], head.summary["merged"]) == (3, 2)
    found = merged.lookup([100, 101, 102, 6], ["x", "quality"]).to_pylist()
    assert found == [{"x": 100, "quality": 1.5}, {"x": 101, "quality": 2.5},
                     {"x": 102, "quality": 3.5}, {"x": 6, "quality": 60.0}]  # fmt: skip
    _assert_index_like_python(merged, "merged/1", tmp_path)
    # the next Python upsert probes the index the MERGE wrote: 101 is found, not inserted again
    wh.table(merged.name).upsert(pa.table({"x": [101], "quality": [9.0]}), append_name="again")
    assert _values(merged)[101] == (None, 9.0, None)


def test_insert_only_keyed_merge_writes_the_index(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Only WHEN NOT MATCHED: the keys no row holds come in as one batch (op ``upsert``), the
    matched ones are left as they are; every new fragment has its index."""
    t = _table(wh)
    before = _values(t)
    spark.conf.set("spark.omnitable.write.target_fragment_rows", "2")
    spark.sql(
        _merge(catalog, t, _source(spark, [3, 40, 41, 42, 43, 44], [-3.0, 4.0, 4.1, 4.2, 4.3, 4.4]),
               "WHEN NOT MATCHED THEN INSERT *")
    )  # fmt: skip
    spark.conf.unset("spark.omnitable.write.target_fragment_rows")
    assert _values(t) == _model(before, [40, 41, 42, 43, 44], [4.0, 4.1, 4.2, 4.3, 4.4])
    head = t.history(1)[0]
    assert head.op == "upsert" and head.summary["inserted"] == 5
    assert [r["x"] for r in t.lookup([44, 3, 40], ["x"]).to_pylist()] == [44, 3, 40]
    _assert_index_like_python(t, "merged/1", tmp_path)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(keys=st.lists(st.integers(0, 24), unique=True, max_size=8), deleted=st.integers(0, 6))
def test_random_keyed_merges_equal_the_model_and_python_upsert(
    spark: Any, wh: omnitable.Warehouse, catalog: str, keys: list[int], deleted: int
) -> None:
    """A MERGE of random keys (some live, some deleted before, some new) leaves the model's rows
    and those ``Table.upsert`` leaves on a twin; every key of the result is found by lookup."""
    t, py = _table(wh), _table(wh)
    for table in (t, py):
        if deleted:
            table.delete(pa.compute.field("x") < deleted)
    before = _values(t)
    qs = [float(k) * 3 for k in keys]
    spark.sql(_merge(catalog, t, _source(spark, list(keys), qs), UPSERT))
    assert _values(t) == _model(before, keys, qs)
    if keys:
        py.upsert(pa.table({"x": pa.array(keys, pa.int64()), "quality": qs}), append_name="m")
    assert _values(t) == _values(py)
    want = sorted(_values(t))
    assert sorted(r["x"] for r in wh.table(t.name).lookup(want, ["x"]).to_pylist()) == want


@pytest.mark.parametrize(
    ("xs", "error"),
    [([1, 50, 50], "OMNITABLE_MERGE_DUPLICATE_KEYS"), ([1, None], "OMNITABLE_NULL_KEY")],
    ids=["duplicate_inserted_keys", "null_key"],
)
def test_bad_inserted_keys_commit_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, xs: list[int | None], error: str
) -> None:
    t = _table(wh)
    v, files, indexes = t.version, _files(t, ".parquet"), _files(t, INDEX_FILE)
    src = _source(spark, xs, [float(i) for i in range(len(xs))])
    with pytest.raises(Exception, match=error):
        spark.sql(_merge(catalog, t, src, UPSERT))
    fresh = wh.table(t.name)
    assert fresh.version == v and [b.name for b in fresh.batches()] == ["b1"]
    assert _files(t, ".parquet") == files and _files(t, INDEX_FILE) == indexes


@pytest.mark.parametrize(
    ("on", "clauses", "why"),
    [
        ("t.x = s.x AND s.quality > 0", UPSERT, "not exactly the key equality"),
        ("t.quality = s.quality", UPSERT, "not exactly the key equality"),
        ("t.x = s.x", "WHEN MATCHED THEN DELETE WHEN NOT MATCHED THEN INSERT *", "does not UPDATE"),
        ("t.x = s.x", "WHEN MATCHED THEN UPDATE SET x = s.x + 100", "assigning a key column"),
        ("t._ai_unique_id_ = s.x", "WHEN MATCHED THEN UPDATE SET x = 7", "assigning a key column"),
    ],
)
def test_forms_a_keyed_table_does_not_take_are_refused(
    spark: Any, wh: omnitable.Warehouse, catalog: str, on: str, clauses: str, why: str
) -> None:
    t = _table(wh)
    v = t.version
    with pytest.raises(Exception, match=f"OMNITABLE_KEYED_TABLE.*{why}.*keyed by"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), clauses, on=on))
    assert t.version == v
    with pytest.raises(Exception, match="OMNITABLE_KEYED_TABLE.*MERGE INTO"):
        spark.sql(f"INSERT INTO {catalog}.{t.name} (x) VALUES (500)")
    assert wh.table(t.name).version == v


@pytest.mark.parametrize("same_key", [True, False])
def test_a_keyed_merge_racing_a_python_upsert(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, same_key: bool
) -> None:
    """A Python upsert landing while the MERGE waits at its commit: inserting a key the MERGE
    inserts is Python's upsert conflict (nothing of the MERGE visible, its files removed); other
    keys land next to it."""
    t = _table(wh)
    before = _values(t)
    src = _source(spark, [2, 77], [2.5, 7.0])
    statement = lambda: spark.sql(_merge(catalog, t, src, UPSERT))  # noqa: E731
    other = 77 if same_key else 88
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        wh.table(t.name).upsert(pa.table({"x": [other], "quality": [-1.0]}), append_name="py")
    got = _values(wh.table(t.name))
    if same_key:
        assert "Cannot commit upsert into table" in str(out.get("error")), out
        assert "inserted 1 of the keys it inserts" in str(out.get("error"))
        assert got == {**before, 77: (None, -1.0, None)}
        assert _files(t, INDEX_FILE) == _live_index_files(wh.table(t.name))
    else:
        assert "error" not in out, out
        assert got == {**_model(before, [2, 77], [2.5, 7.0]), 88: (None, -1.0, None)}
        found = wh.table(t.name).lookup([77, 88], ["x"]).to_pylist()
        assert [r["x"] for r in found] == [77, 88]


def test_an_insert_only_keyed_merge_reads_only_the_key(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """An insert-only keyed MERGE reads the key alone (its never-true WHEN MATCHED clause is
    dropped before the scan is planned): a Python upsert rewriting the quality of an existing
    row while the MERGE waits at its commit lands next to it, no conflict."""
    t = _table(wh)
    before = _values(t)
    src = _source(spark, [2, 77], [2.5, 7.0])
    statement = lambda: spark.sql(_merge(catalog, t, src, "WHEN NOT MATCHED THEN INSERT *"))  # noqa: E731
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        wh.table(t.name).upsert(pa.table({"x": [2], "quality": [-2.0]}), append_name="py")
    assert "error" not in out, out
    assert _values(wh.table(t.name)) == {**before, 2: ("a", -2.0, "t2"), 77: (None, 7.0, None)}


def test_a_keyed_merge_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    v, before, files = t.version, _values(t), _files(t, ".parquet")
    with raising_at(spark, "commit.mid_insert"):
        spark.sql(_merge(catalog, t, _source(spark, [1, 77], [1.0, 7.0]), UPSERT))
    fresh = wh.table(t.name)
    assert fresh.version == v and _values(fresh) == before
    assert fresh.lookup([77]).num_rows == 0
    assert _files(t, ".parquet") == files
    assert _files(t, INDEX_FILE) == _live_index_files(fresh)


def test_an_inserted_key_sharing_the_hash_of_a_stored_key_fails_the_merge(
    spark: Any,
    wh: omnitable.Warehouse,
    catalog: str,
    colliding_key: Callable[[int, int, int], int],
) -> None:
    """A table keyed by two bigint columns (64-bit key hashes): a MERGE whose ON clause finds no
    row for an inserted key, while a live row's other key has that key's hash (built on
    purpose), fails with nothing committed: the table cannot hold both keys."""
    a1, b1, a2 = 3, 4, 5
    b2 = colliding_key(a1, b1, a2)
    schema = {"a": "bigint", "b": "bigint", "v": "double"}
    t = wh.create_table(f"kc{next(_views)}", schema, key=["a", "b"])
    t.upsert(pa.table({"a": [a1], "b": [b1], "v": [1.0]}))
    v, files, indexes = t.version, _files(t, ".parquet"), _files(t, INDEX_FILE)
    src = f"kcsrc_{next(_views)}"
    rows = [(a2, b2, 2.0), (9, 9, 3.0)]
    spark.createDataFrame(rows, "a bigint, b bigint, v double").createOrReplaceTempView(src)
    merge = (
        f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.a = s.a AND t.b = s.b "
        "WHEN MATCHED THEN UPDATE SET v = s.v "
        "WHEN NOT MATCHED THEN INSERT (a, b, v) VALUES (s.a, s.b, s.v)"
    )
    with pytest.raises(Exception, match="OMNITABLE_MERGE_KEY_COLLISION"):
        spark.sql(merge)
    fresh = wh.table(t.name)
    assert fresh.version == v and _files(t, ".parquet") == files
    assert _files(t, INDEX_FILE) == indexes
    assert fresh.read(["a", "b", "v"]).to_pylist() == [{"a": a1, "b": b1, "v": 1.0}]
    assert fresh.lookup([(a1, b1)], ["v"]).to_pylist() == [{"v": 1.0}]
