"""Reads reuse the snapshot a catalog connection loaded for the same resolved segments
(catalog/snapshot_cache.py): a repeated read runs a few statements instead of a dozen, and a
read through the cache always equals a read of a freshly loaded snapshot, whatever happened
in between (appends, deletes, updates, renames, rollbacks, branches created, merged, deleted
and created again under the same name, tags), on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

import omnitable
from omnitable import ROW_ID
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.catalog.snapshot_cache import SnapshotCache
from omnitable.exceptions import OmniTableError
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.names import APPEND_NAME, MAIN


@contextmanager
def _statements(wh: omnitable.Warehouse) -> Iterator[list[str]]:
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    engine = wh.catalog.store.engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", count)


def _data(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"x": rng.random(n), "k": rng.integers(0, 5, n)})


def test_a_repeated_read_reuses_its_snapshot_until_the_head_moves(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("cached", _data(1, 0).schema)
    t.append(_data(100, 1), "a")
    where = pc.field("x") < 0.5
    first = t.read(columns=["x"], where=where)
    with _statements(wh) as again:
        assert t.read(columns=["x"], where=where).equals(first)
    with _statements(wh) as fresh:
        t.snapshot(scope=SnapshotScope.of(None, ["x"], where))
    assert 0 < len(again) <= 3 < len(fresh)  # the head resolved, nothing else loaded
    t.append(_data(50, 2), "b")  # a new head: a new snapshot
    assert t.read(columns=["x"]).num_rows == 150
    assert wh.table("cached").read(columns=["x"]).num_rows == 150


def test_another_connections_commit_is_seen(catalog_spec: tuple[str, str | None]) -> None:
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as reader, omnitable.connect(uri, root=root) as writer:
        writer.create_table("shared", _data(1, 0).schema).append(_data(10, 1), "a")
        t = reader.table("shared")
        assert t.read().num_rows == 10
        assert t.read().num_rows == 10  # from the cache
        writer.table("shared").append(_data(5, 2), "b")
        writer.table("shared").delete(pc.field("k") == 0)
        assert t.read().equals(writer.table("shared").read())


def test_the_cache_is_bounded_and_keeps_no_large_snapshot(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("bounded", _data(1, 0).schema)
    t.append(_data(10, 1), "a", target_fragment_rows=4)  # 3 fragments, 3 files: 6 records
    snap = t.snapshot()
    cache = SnapshotCache(max_snapshots=2, max_records=5)
    cache.put("big", snap)
    assert len(cache) == 0 and cache.get("big", snap.table) is None
    without_files = t.snapshot(with_files=False)  # 3 fragments: kept or not by them alone
    cache.put("fragments", without_files)
    assert cache.get("fragments", snap.table) is not None
    cache = SnapshotCache(max_snapshots=2, max_records=2)
    cache.put("fragments", without_files)
    assert len(cache) == 0
    cache = SnapshotCache(max_snapshots=2, max_records=14)
    for k in ("a", "b", "c"):
        cache.put(k, snap)
    assert len(cache) == 2 and cache.get("a", snap.table) is None  # least recently used
    cache = SnapshotCache(max_snapshots=3, max_records=14)
    for k in ("a", "b", "c"):
        cache.put(k, snap)
    assert len(cache) == 2 and cache.get("a", snap.table) is None  # 18 records > 14: one out
    got = cache.get("c", snap.table)
    assert got is not None and got.fragments == snap.fragments
    got.fragments.clear()  # a caller's containers are its own
    assert cache.get("c", snap.table).fragments == snap.fragments  # type: ignore[union-attr]


def _fresh(t: omnitable.Table, **ref: Any) -> pa.Table:
    """The read through a snapshot loaded now (no cache)."""
    snap = t.snapshot(**ref)
    table, _ = FragmentReader(t.location, snap).read()
    return table


_tables = itertools.count()
OPS = st.lists(
    st.sampled_from(
        [
            *("append", "delete", "update", "rename", "rollback"),
            *("branch", "branch_append", "merge", "delete_branch", "tag"),
        ]
    ),
    min_size=3,
    max_size=9,
)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, seed=st.integers(0, 2**31))
def test_reads_through_the_cache_equal_reads_of_fresh_snapshots(
    wh: omnitable.Warehouse, ops: list[str], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    name = f"c{next(_tables)}"  # the examples share the warehouse
    t = wh.create_table(name, _data(1, 0).schema)
    t.append(_data(20, seed), "b0")
    versions = [t.snapshot().version]
    tags: list[str] = []
    column = "k"
    for i, op in enumerate(ops):
        with suppress(OmniTableError):  # an op the state does not allow (a merge conflict)
            _apply(t, op, i, rng, column, versions, tags)
        if op == "rename":
            column = t.snapshot().user_columns[-1].name
        versions.append(t.snapshot().version)
        refs: list[dict[str, Any]] = [{}, *({"tag": g} for g in tags)]
        refs += [{"version": v} for v in sorted(set(versions))]
        if "br" in {b.name for b in t.branches()}:
            refs.append({"branch": "br"})
        for ref in refs:
            for _ in range(2):  # the second read comes from the cache
                got = t.read(**ref)
                assert got.sort_by(ROW_ID).equals(_fresh(t, **ref).sort_by(ROW_ID)), (op, ref)
        wh.table(name).read()  # another Table object, the same connection's cache


def _apply(
    t: omnitable.Table,
    op: str,
    i: int,
    rng: np.random.Generator,
    column: str,
    versions: list[int],
    tags: list[str],
) -> None:
    names = {b.name for b in t.branches()}
    if op == "append":
        t.append(_data(int(rng.integers(1, 20)), i).rename_columns(["x", column]), f"b{i + 1}")
    elif op == "delete":
        t.delete(pc.field("x") < float(rng.random()) / 3)
    elif op == "update":
        ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()[:3]
        if ids:
            t.update(pa.table({ROW_ID: ids, "x": [float(rng.random()) for _ in ids]}), ["x"])
    elif op == "rename":
        t.rename_column(column, f"{column}_{i}")
    elif op == "rollback":
        if len(set(versions)) > 1:
            t.rollback(sorted(set(versions))[0])
    elif op == "branch" and "br" not in names:
        t.create_branch("br")
    elif op == "branch_append" and "br" in names:
        t.branch("br").append(_data(5, i).rename_columns(["x", column]), f"br{i}")
    elif op == "merge" and "br" in names:
        t.merge("br", MAIN)
    elif op == "delete_branch" and "br" in names:
        t.delete_branch("br")  # a later "branch" creates another one of the same name
    elif op == "tag":
        tags.append(f"t{i}")
        t.create_tag(f"t{i}")


def test_reads_through_the_cache_race_a_writer(catalog_spec: tuple[str, str | None]) -> None:
    """A reader reading through its cache while another connection appends sees only whole
    versions, never an older one than it saw before, and the last one in the end."""
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as reader, omnitable.connect(uri, root=root) as writer:
        writer.create_table("raced", _data(1, 0).schema).append(_data(10, 0), "b0")
        t = reader.table("raced")
        done = threading.Event()
        failures: list[BaseException] = []

        def write() -> None:
            try:
                w = writer.table("raced")
                for i in range(1, 12):
                    w.append(_data(10, i), f"b{i}")
            except BaseException as exc:  # pragma: no cover - reported below
                failures.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=write)
        thread.start()
        seen, reads = 0, 0
        while (not done.is_set() or seen < 120) and not failures and reads < 5000:
            reads += 1
            got = t.read(columns=[APPEND_NAME])
            names = set(got.column(APPEND_NAME).to_pylist())
            k = len(names)
            assert names == {f"b{i}" for i in range(k)} and got.num_rows == 10 * k  # whole
            assert k * 10 >= seen  # never an older version
            seen = got.num_rows
        thread.join()
        assert not failures and seen == 120
