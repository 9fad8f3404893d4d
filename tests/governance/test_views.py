"""Declaring hot column-group views (governance/views.py, catalog/views.py): records in
``omnitable_meta``, validation, fingerprints; orphan cleanup keeps the views' files. The refresh
job and the optimizer rule need Spark: tests/spark/test_spark_views.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.catalog.references import references
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.catalog.views import fingerprints
from omnitable.exceptions import ValidationError
from omnitable.governance.job import MaintenancePlan


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(
        "t", {"a": "bigint", "b": "string", "c": "double"}, groups={"g1": ["a", "b"], "g2": ["c"]}
    )
    t.append(pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [0.5, 1.5, 2.5]}), "b1")
    return t


def _fps(t: omnitable.Table, cols: frozenset[str]) -> dict[str, str]:
    snap = t._ctx.snapshot(scope=SnapshotScope(columns=cols, stats=False))
    return fingerprints(snap, {snap.column(c).column_id for c in cols})


def test_declare_list_drop_and_validation(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    info = t.create_view("hot", ["b", "a", "b"])
    assert info["columns"] == ["_ai_unique_id_", "b", "a"]
    assert info["path"].startswith("views/hot-") and info["delta_version"] is None
    assert [v["name"] for v in t.views()] == ["hot"]
    with pytest.raises(ValidationError, match="exists"):
        t.create_view("hot", ["a"])
    with pytest.raises(ValidationError, match="unknown column"):
        t.create_view("other", ["nope"])
    with pytest.raises(ValidationError, match="non-empty list"):
        t.create_view("other", [])
    with pytest.raises(ValidationError, match="view name"):
        t.create_view("bad name", ["a"])
    with pytest.raises(ValidationError, match="no such view"):
        t.drop_view("other")
    t.drop_view("hot")
    assert t.views() == []


def test_fingerprints_follow_covered_columns_and_deletes(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    hot = frozenset({"_ai_unique_id_", "a"})
    before = _fps(t, hot)
    assert len(before) == 1
    ids = t.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()
    t.update(pa.table({"_ai_unique_id_": ids[:1], "c": [9.0]}), ["c"])  # not covered
    assert _fps(t, hot) == before
    t.update(pa.table({"_ai_unique_id_": ids[:1], "a": [10]}), ["a"])  # covered
    after_update = _fps(t, hot)
    assert after_update.keys() == before.keys() and after_update != before
    t.delete(ids=ids[1:2])
    assert _fps(t, hot) != after_update
    t.append(pa.table({"a": [4], "b": ["w"], "c": [3.5]}), "b2")
    assert len(_fps(t, hot)) == 2


def test_orphan_cleanup_keeps_view_files(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ctx = t._ctx
    with ctx.catalog.store.read() as conn:
        refs = references(conn, ctx.record.table_id, ctx.location.uri)
    assert refs.covers("views/hot-0123/_delta_log/00000000000000000000.json")


def test_views_job_without_views_has_nothing_to_do(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    (res,) = t.maintain(["views"])
    assert res.outcome == "nothing_to_do" and res.summary == {"views": 0}
    with pytest.raises(ValidationError, match="not declared"):
        t.maintain(["views"], options={"views": {"views": ["nope"]}})


def test_auto_proposes_views_from_the_access_log(wh: omnitable.Warehouse) -> None:
    """A dry run of ``views`` with ``auto`` plans to declare a view per co-read set read at
    least ``min_scans`` times, most scanned first, none a declared view covers; nothing is
    recorded by the dry run (the refresh itself: tests/spark/test_spark_views.py)."""
    t = _table(wh)
    for _ in range(3):
        t.read(columns=["a", "c"])
    for _ in range(2):
        t.read(columns=["b"])
    t.read(columns=["a"])

    def plan(**options: object) -> MaintenancePlan:
        (res,) = t.maintain(["views"], dry_run=True, options={"views": {"auto": True, **options}})
        return res.plan

    p = plan(min_scans=2)
    cols = sorted(a["record"]["columns"] for a in p.actions)  # actions are in view name order
    assert cols == [["_ai_unique_id_", "a", "c"], ["_ai_unique_id_", "b"]]
    assert all(a["declare"] and a["full"] for a in p.actions)
    assert p.summary["declared"] == sorted(a["view"] for a in p.actions)
    assert all(n.startswith("hot_") for n in p.summary["declared"])
    assert [a["record"]["columns"] for a in plan(min_scans=3).actions] == [cols[0]]
    assert len(plan(min_scans=1, max_views=1).actions) == 1
    narrow = sorted(a["record"]["columns"][1:] for a in plan(min_scans=1, max_columns=1).actions)
    assert narrow == [["a"], ["b"]]  # {a, c} is too wide; {a} is left
    t.create_view("mine", ["c", "a", "b"])  # covers every set
    assert [a["view"] for a in plan(min_scans=1).actions] == ["mine"]
    assert [v["name"] for v in t.views()] == ["mine"]
    for bad in ({"min_scans": 0}, {"max_views": "2"}, {"since_s": -1}, {"views": ["mine"]}):
        with pytest.raises(ValidationError, match="views: "):
            plan(**bad)


def test_listed_view_records_are_reused_until_written_or_too_old(
    wh: omnitable.Warehouse,
) -> None:
    """``list_views(max_age_s=...)`` (what Table.read goes by) reuses the records this process
    read, until it writes view records itself or they are older than asked; a change another
    process makes (a raw catalog write here) shows once they are."""
    import json
    import time

    from sqlalchemy import text

    from omnitable.catalog.views import meta_key
    from omnitable.governance.views import list_views

    t = _table(wh)
    ctx = t._ctx
    assert list_views(ctx, max_age_s=60) == []
    t.create_view("hot", ["a"])  # this process wrote: not reused
    (rec,) = list_views(ctx, max_age_s=60)
    assert rec.name == "hot"
    doc = {"hot": {**rec.to_doc(), "delta_version": 7}}
    with ctx.catalog.store.write() as conn:  # as another process would
        conn.execute(text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
                     {"v": json.dumps(doc), "k": meta_key(ctx.record.table_id)})  # fmt: skip
    assert list_views(ctx, max_age_s=60)[0].delta_version is None  # reused
    time.sleep(0.06)
    assert list_views(ctx, max_age_s=0.05)[0].delta_version == 7  # older than asked: read again
    t.drop_view("hot")
    assert list_views(ctx, max_age_s=60) == []


def test_freshness_answers_are_kept_per_warehouse(tmp_path: Path) -> None:
    """Two copies of a warehouse share table ids, and their snapshots can have the same segments
    and version with other rows: a freshness answer for one is not taken for the other."""
    from omnitable.governance.view_reads import _fresh
    from omnitable.governance.views import list_views, warehouse_key

    with omnitable.connect(tmp_path / "a") as wa:
        t = _table(wa)
        t.create_view("hot", ["a"])
        shutil.copytree(tmp_path / "a", tmp_path / "b")
        with omnitable.connect(tmp_path / "b") as wb:
            tb = wb.table("t")
            (rec,) = list_views(t._ctx)
            scope = SnapshotScope(columns=frozenset(rec.columns), stats=False)
            snap = t._ctx.snapshot(scope=scope)
            rec = rec.refreshed(0, fingerprints(snap, set(rec.column_ids.values())),
                                snap.version, "main", files=(), schema="{}")  # fmt: skip
            ids = t.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()
            t.update(pa.table({"_ai_unique_id_": ids[:1], "c": [9.0]}), ["c"])  # not covered
            tb.delete(ids=ids[:1])  # covered: stale in the copy
            head_a, head_b = t._ctx.snapshot(scope=scope), tb._ctx.snapshot(scope=scope)
            assert tb.record.table_id == t.record.table_id
            assert (head_a.segments, head_a.version) == (head_b.segments, head_b.version)
            assert _fresh(rec, head_a, warehouse_key(t._ctx))
            assert not _fresh(rec, head_b, warehouse_key(tb._ctx))
