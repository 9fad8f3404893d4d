"""Scoped snapshots (issue 19): a snapshot loaded for some batches and columns answers exactly
like the full snapshot, and a one-batch plan runs a number of SQL statements that does not
depend on the table's size."""

from __future__ import annotations

import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

import omnitable
from omnitable.catalog import provider_count
from omnitable.catalog import snapshot as snapshot_module
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.exceptions import NotFoundError, ValidationError
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.names import APPEND_NAME, ROW_ID

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import metadata as bench  # noqa: E402
from tests.spark.fixtures.make_warehouses import _add_ref, _append_on_branch  # noqa: E402

BATCHES = ["a", "b", "c", "d"]
OP = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(BATCHES), st.integers(1, 30)),
    st.tuples(st.just("replace"), st.sampled_from(BATCHES), st.integers(1, 30)),
    st.tuples(st.just("add_columns"), st.sampled_from(BATCHES), st.integers(0, 1)),
    st.tuples(st.just("branch"), st.sampled_from(BATCHES), st.integers(1, 10)),
    st.tuples(st.just("update"), st.sampled_from(BATCHES), st.integers(0, 2)),
    st.tuples(st.just("delete"), st.sampled_from(BATCHES), st.integers(1, 20)),
)


def _rows(n: int, seed: int) -> pa.Table:
    xs = [seed * 100 + i if i % 7 else None for i in range(n)]
    return pa.table(
        {
            "x": pa.array(xs, pa.int64()),
            "y": pa.array([float(i) / 3 for i in range(n)]),
            "s": pa.array([f"s{seed}-{i}" for i in range(n)]),
        }
    )


def _apply(t: omnitable.Table, ops: list[tuple[str, str, int]]) -> list[dict[str, Any]]:
    """Runs ``ops``; returns the snapshots to compare (head, each version, the branch)."""
    refs: list[dict[str, Any]] = [{}]
    for k, (op, name, n) in enumerate(ops):
        have = {b.name for b in t.batches()}
        if op == "append" and name not in have:
            t.append(_rows(n, k), name, target_fragment_rows=8)
        elif op == "replace":
            t.append(_rows(n, k), name, mode="replace", target_fragment_rows=8)
        elif op == "add_columns" and t.count() > n:
            ids = t.read([ROW_ID])[ROW_ID].to_pylist()[n::2]
            data = pa.table({ROW_ID: pa.array(ids, pa.int64()), f"z{k}": [1.5] * len(ids)})
            t.add_columns(data, group=f"gz{k}")
        elif op == "update" and t.count() > n:  # an overlay of x over some fragments' files
            ids = t.read([ROW_ID])[ROW_ID].to_pylist()[n::3]
            t.update(pa.table({ROW_ID: pa.array(ids, pa.int64()), "x": [k] * len(ids)}), ["x"])
        elif op == "delete" and have:  # rows i < n of every append: whole first fragments
            t.delete(pc.field("y") < n / 3)
        elif op == "branch" and not any("branch" in r for r in refs):
            _add_ref(t, "dev", "branch", t.version, "main", t.version)
            _append_on_branch(t, _rows(n, k), f"dev-{name}", "dev")
            refs.append({"branch": "dev"})
        refs.append({"version": t.version})
    return refs


def _providers(snap: Snapshot, fragment_id: str, ids: list[int]) -> dict[int, Any]:
    return {
        cid: None if f is None else (f.file_id, f.added_version, f.columns[cid])
        for cid, f in snap.resolve(fragment_id, ids).items()
    }


def _resolved_files(snap: Snapshot, fragment_ids: list[str], ids: list[int]) -> int:
    """The files providing ``ids`` in these fragments, as :meth:`Snapshot.resolve` picks them."""
    return sum(
        len({f.file_id for f in snap.resolve(fid, ids).values() if f is not None})
        for fid in fragment_ids
    )


def _check_scope(
    t: omnitable.Table, ref: dict[str, Any], batches: list[str] | None, names: list[str] | None
) -> None:
    full = t.snapshot(**ref)
    if "branch" not in ref:  # the counts stored on batch rows match their visible fragments
        counted: dict[str, list[int]] = {b.name: [0, 0] for b in full.batches}
        for f in full.fragments:
            counted[f.batch_name][0] += full.live_rows(f)
            counted[f.batch_name][1] += 1
        got = [(b.name, b.rows, b.fragments) for b in t.batches(**ref)]
        assert got == [(b.name, *counted[b.name]) for b in full.batches]
    known = [b.name for b in full.batches]
    batches = None if batches is None else [b for b in batches if b in known] or known[:1]
    where = pc.field("x") > 150
    scoped = t.snapshot(**ref, scope=SnapshotScope.of(batches, names, where))
    assert scoped.fragments == full.fragments_of(batches)
    wanted = {*(names or full.column_names()), "x"}
    ids = [c.column_id for c in full.columns if c.name in wanted]
    for frag in scoped.fragments:
        assert _providers(scoped, frag.fragment_id, ids) == _providers(full, frag.fragment_id, ids)
    frag_ids = [f.fragment_id for f in scoped.fragments]
    counted = scoped.count_providers(frag_ids, ids)
    assert counted == full.count_providers(frag_ids, ids) == _resolved_files(full, frag_ids, ids)
    if batches is None:
        _check_catalog_count(t, ref, full, names, ids)
    for w in (None, where):
        expected, _ = FragmentReader(t.location, full).read(names, w, batches)
        got, _ = FragmentReader(t.location, scoped).read(names, w, batches)
        assert got.equals(expected)
        assert t.read(names, w, batches=batches, **ref).equals(expected)


def _check_catalog_count(
    t: omnitable.Table, ref: dict[str, Any], full: Snapshot, names: Any, ids: list[int]
) -> None:
    """The catalog counts providers as the loaded snapshot does: of every live fragment, of
    some of them, of none; and a plan of every batch without a filter reports that count."""
    live = [f.fragment_id for f in full.live_fragments(None)]
    unfiled = t.snapshot(**ref, with_files=False)
    catalog = t._ctx.catalog
    for subset in (live, live[1::2], []):
        assert catalog.count_providers(unfiled, subset, ids) == full.count_providers(subset, ids)
    expected = FragmentReader(t.location, full).plan(names)
    got = t.plan(names, **ref)
    assert (got.files, got.fragments) == (expected.files, expected.fragments)


@settings(max_examples=16, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    ops=st.lists(OP, min_size=1, max_size=7),
    picks=st.lists(
        st.tuples(
            st.one_of(st.none(), st.lists(st.sampled_from(BATCHES), min_size=1, max_size=2)),
            st.one_of(
                st.none(),
                st.lists(
                    st.sampled_from(["x", "y", "s", ROW_ID, APPEND_NAME]),
                    min_size=1,
                    max_size=3,
                    unique=True,
                ),
            ),
            st.integers(0, 20),
        ),
        min_size=1,
        max_size=4,
    ),
    listed=st.sampled_from([snapshot_module.MAX_LISTED_FRAGMENTS, 0, 1]),
    loaded=st.sampled_from(["sql", "carriers", "special"]),
)
def test_scoped_snapshot_answers_like_the_full_one(
    ops: list[tuple[str, str, int]],
    picks: list[tuple[Any, Any, int]],
    listed: int,
    loaded: str,
) -> None:
    """``listed``: up to how many fragments the files statement names them (0: always by a
    sub-select of the batches; 1: a catalog count's fragments go one per statement).
    ``loaded``: whether the catalog counts in SQL or falls back to loading the files, as it
    does past too many column-set lists or special fragments."""
    limits = {"carriers": "MAX_CARRIER_LISTS", "special": "MAX_SPECIAL_FRAGMENTS"}
    defaults = (
        snapshot_module.MAX_LISTED_FRAGMENTS,
        getattr(provider_count, limits.get(loaded, "MAX_CARRIER_LISTS")),
    )
    snapshot_module.MAX_LISTED_FRAGMENTS = listed
    if loaded in limits:
        setattr(provider_count, limits[loaded], 0)
    try:
        _scoped_like_full(ops, picks)
    finally:
        snapshot_module.MAX_LISTED_FRAGMENTS = defaults[0]
        if loaded in limits:
            setattr(provider_count, limits[loaded], defaults[1])


def _scoped_like_full(ops: list[tuple[str, str, int]], picks: list[tuple[Any, Any, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        wh = omnitable.connect(str(Path(tmp) / "wh"))
        t = wh.create_table("t", {"x": "bigint", "y": "double", "s": "string"}, {"gy": ["y"]})
        t.append(_rows(12, 99), "seed", target_fragment_rows=8)
        refs = _apply(t, ops)
        for batches, names, r in picks:
            _check_scope(t, refs[r % len(refs)], batches, names)
        wh.close()


def test_scoped_snapshot_refuses_questions_outside_its_scope(tmp_path: Path) -> None:
    wh = omnitable.connect(str(tmp_path / "wh"))
    t = wh.create_table("t", {"x": "bigint", "y": "double", "s": "string"}, {"gy": ["y"]})
    t.append(_rows(5, 1), "a")
    t.append(_rows(5, 2), "b")
    snap = t.snapshot(scope=SnapshotScope.of(["a"], ["x"]))
    y = snap.column("y").column_id
    with pytest.raises(ValidationError, match="loaded for columns"):
        snap.resolve(snap.fragments[0].fragment_id, [y])
    with pytest.raises(ValidationError, match="loaded for batches"):
        snap.fragments_of(["b"])
    with pytest.raises(NotFoundError, match="Cannot find batch"):
        t.snapshot(scope=SnapshotScope.of(["nope"], ["x"]))
    # without a filter no statistics are loaded, and asking for them is an error, not "unknown"
    x = snap.column("x").column_id
    (file,) = snap.files_by_fragment[snap.fragments[0].fragment_id]
    with pytest.raises(ValidationError, match="loaded without them"):
        file.stats(x)
    filtered = t.snapshot(scope=SnapshotScope.of(["a"], ["x"], pc.field("x") > 0))
    (kept,) = filtered.files_by_fragment[snap.fragments[0].fragment_id]
    (full,) = [
        f for f in t.snapshot().files_by_fragment[snap.fragments[0].fragment_id] if x in f.columns
    ]
    assert kept.stats(x) == full.stats(x) and full.stats(x).min_value == "101"
    assert [(b.name, b.rows, b.fragments) for b in t.batches()] == [("a", 5, 1), ("b", 5, 1)]
    assert t.count() == 10
    wh.close()


def test_a_plan_counts_the_files_resolution_picks_when_two_files_carry_a_column(
    tmp_path: Path,
) -> None:
    """An update overlays a file of ``x`` on a fragment whose base file also carries ``x``:
    a plan of ``x`` counts the overlay alone, one of ``x`` and ``y`` both files."""
    wh = omnitable.connect(str(tmp_path / "wh"))
    t = wh.create_table("t", {"x": "bigint", "y": "double", "s": "string"}, {"gy": ["y"]})
    t.append(_rows(8, 1), "a", target_fragment_rows=4)  # 2 fragments, files base + gy each
    ids = t.read([ROW_ID])[ROW_ID].to_pylist()
    t.update(pa.table({ROW_ID: pa.array(ids[:2], pa.int64()), "x": [7, 8]}), ["x"])
    snap = t.snapshot()
    first, second = (f.fragment_id for f in snap.fragments)
    assert len(snap.files_by_fragment[first]) == 3  # base (x, s), gy (y), the overlay (x)
    x, y, s = (snap.column(n).column_id for n in ("x", "y", "s"))
    for cols, expected in (([x], 2), ([x, y], 4), ([x, s], 3), ([y], 2), ([x, y, s], 5)):
        assert snap.count_providers([first, second], cols) == expected, cols
        assert _resolved_files(snap, [first, second], cols) == expected, cols
    assert t.plan(["x", "y"]).files == 4
    assert t.read(["x"])["x"].to_pylist()[:2] == [7, 8]
    wh.close()


def test_a_full_scan_plan_counts_files_in_the_catalog_and_lists_only_overlaid_fragments(
    wh: omnitable.Warehouse,
) -> None:
    """A plan of every batch without a filter loads no file record: the catalog counts them
    (from ``files_by_set`` alone on SQLite); only fragments where an update overlays a column
    have their files listed, by name, and resolved (SQLite and PostgreSQL)."""
    t = wh.create_table("counted", {"x": "bigint", "y": "double", "s": "string"}, {"gy": ["y"]})
    for name in ("a", "b", "c"):
        t.append(_rows(12, 1), name, target_fragment_rows=4)  # 9 fragments, 18 files
    listed: list[tuple[str, Any]] = []
    counted: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if statement.startswith("SELECT fi.file_id"):
            listed.append((statement, params))
        elif "FROM files fi" in statement:
            counted.append((statement, params))

    _listening(wh, "before_cursor_execute", keep, lambda: t.plan(["x", "y"]))
    assert t.plan(["x", "y"]).files == 18 and listed == [] and len(counted) == 2
    if wh.catalog.store.is_sqlite:
        raw = wh.catalog.store.engine.raw_connection()
        try:
            for q, p in counted:
                steps = raw.cursor().execute("EXPLAIN QUERY PLAN " + q, p)
                plan = " ".join(str(r[-1]) for r in steps)
                assert "COVERING INDEX files_by_set" in plan, plan
        finally:
            raw.close()
    ids = t.read([ROW_ID])[ROW_ID].to_pylist()
    t.update(pa.table({ROW_ID: pa.array(ids[:2], pa.int64()), "x": [7, 8]}), ["x"])
    fragments = {f.fragment_id for f in t.snapshot().fragments}
    overlaid = t.snapshot().fragments[0].fragment_id
    listed.clear()
    _listening(wh, "before_cursor_execute", keep, lambda: t.plan(["x", "y"]))
    bound = [p.values() if isinstance(p, dict) else p for _, p in listed]  # by driver
    assert [fragments.intersection(values) for values in bound] == [{overlaid}]
    assert t.plan(["x", "y"]).files == 18 and t.plan(["x", "s"]).files == 10
    t.delete(pc.field("s").isin([f"s1-{i}" for i in range(4, 8)]))  # each batch's 2nd fragment
    plan = t.plan(["x", "y"])
    assert (len(plan.fragments), plan.files) == (6, 12) and t.plan(["x", "s"]).files == 7


def test_a_full_scan_lists_files_from_the_set_index_and_a_batch_by_fragment(
    tmp_path: Path,
) -> None:
    """SQLite's plans of the files statements: a full scan of some columns reads
    ``files_by_set`` alone (a covering index), a one-batch plan looks its files up by fragment
    (the set index would walk every file of those sets)."""
    wh = omnitable.connect(str(tmp_path / "wh"))
    t = wh.create_table("t", {"x": "bigint", "y": "double", "s": "string"}, {"gy": ["y"]})
    for name in ("a", "b", "c"):
        t.append(_rows(12, 1), name, target_fragment_rows=4)
    seen: list[tuple[str, Any]] = []

    def keep(conn: Any, cursor: Any, statement: str, params: Any, *args: Any) -> None:
        if statement.startswith("SELECT fi.file_id"):
            seen.append((statement, params))

    _listening(
        wh, "before_cursor_execute", keep, lambda: t.snapshot(scope=SnapshotScope.of(None, ["y"]))
    )
    _listening(
        wh, "before_cursor_execute", keep, lambda: t.snapshot(scope=SnapshotScope.of(["b"], ["y"]))
    )
    (full, one) = seen
    raw = wh.catalog.store.engine.raw_connection()
    try:
        plans = [
            " ".join(str(r[-1]) for r in raw.cursor().execute("EXPLAIN QUERY PLAN " + q, p))
            for q, p in (full, one)
        ]
    finally:
        raw.close()
    assert "COVERING INDEX files_by_set" in plans[0], plans[0]
    assert "files_by_fragment" in plans[1] and "files_by_set" not in plans[1], plans[1]
    wh.close()


def _listening(wh: omnitable.Warehouse, name: str, listener: Any, fn: Any) -> None:
    """Runs ``fn`` with ``listener`` on the catalog engine's event ``name``."""
    engine = wh.catalog.store.engine
    event.listen(engine, name, listener)
    try:
        fn()
    finally:
        event.remove(engine, name, listener)


def _statements(wh: omnitable.Warehouse, fn: Any) -> list[str]:
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    _listening(wh, "before_cursor_execute", count, fn)
    return seen


def test_one_batch_plan_runs_the_same_statements_whatever_the_size(
    wh: omnitable.Warehouse,
) -> None:
    counts: dict[str, int] = {}
    for name, n in (("small", 40), ("large", 400)):
        size = bench.Size(n, 3, 6, 10)
        t, layout = bench.create_table(wh, size, name)
        head = layout.base_version + size.batches
        bench.bulk_insert(
            wh.catalog.store, bench.synthetic_rows(size, layout), layout.table_id, head
        )
        t = wh.table(name)
        cols = [c for c in t.schema.names if c.startswith("c")][:4]
        plan = partial(t.plan, cols, batches=["batch/00000002"])
        assert [f.fragment_id for f in plan().fragments] == [f"fr{i:09d}" for i in range(20, 30)]
        counts[name] = len(_statements(wh, plan))
        assert len(t.batches()) == size.batches
    assert counts["small"] == counts["large"] > 0


def _files_columns(wh: omnitable.Warehouse, fn: Any) -> list[set[int] | None]:
    """Per statement of ``fn`` that lists files: the column ids it binds (None: every column)."""
    seen: list[set[int] | None] = []

    def spy(conn: Any, clauseelement: Any, multiparams: Any, params: Any, options: Any) -> None:
        if "FROM files fi" in str(clauseelement):
            bound = [dict(params or {})] + [dict(m) for m in multiparams or () if m]
            ids = {v for p in bound for k, v in p.items() if k.startswith("cid")}
            seen.append(ids or None)

    _listening(wh, "before_execute", spy, fn)
    return seen


def test_backfill_plans_status_and_lineage_load_only_their_columns_files(
    wh: omnitable.Warehouse,
) -> None:
    cols = {f"c{i}": "bigint" for i in range(8)}
    t = wh.create_table("wide", cols, {f"g{i}": [f"c{i}"] for i in range(8)})
    t.append(pa.table({c: list(range(6)) for c in cols}), "a", target_fragment_rows=3)
    t.register(omnitable.sql_feature("f", "c1 + 1", "bigint", "1", inputs=["c1"]))
    ids = {c.name: c.column_id for c in t.snapshot(with_files=False).columns}
    wanted = {ids["c1"], ids["f"]}
    for call in (
        lambda: t.backfill("f"),
        lambda: t.backfill("f", batches=["a"]),
        t.status,
        lambda: t.lineage("f"),
    ):
        listed = _files_columns(wh, call)
        assert listed and all(s is not None and s <= wanted for s in listed), listed
    assert t.backfill("f").explain()  # the scoped plan still plans the work
