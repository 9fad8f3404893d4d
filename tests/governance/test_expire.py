"""Expiring versions (``ExpireJob`` through ``run_job``) on SQLite and PostgreSQL catalogs:
every ref's reachable versions read back identical, expired ones fail naming the horizon, files
a rollback copy shares survive, bytes freed are reported, and an expiry racing each kind of write
(both orders) never loses what the other one reaches."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import CommitConflict, NotFoundError, ValidationError
from omnitable.governance.expire import ExpireJob
from omnitable.governance.job import run_job
from omnitable.governance.jobs import JOBS


def _rows(t: omnitable.Table, **at: object) -> list[int]:
    return sorted(t.read(["x"], **at).column("x").to_pylist())  # type: ignore[arg-type]


def _x(*values: int) -> pa.Table:
    return pa.table({"x": pa.array(values, pa.int64())})


def _exists(t: omnitable.Table, rel: str) -> bool:
    info = t.location.fs.get_file_info(t.location.child_path(rel))
    return info.type != pafs.FileType.NotFound


def _paths(t: omnitable.Table, batch: str, **at: object) -> dict[str, int]:
    snap = t.snapshot(**at)  # type: ignore[arg-type]
    frags = [f.fragment_id for f in snap.fragments if f.batch_name == batch]
    return {f.path: f.size_bytes for fid in frags for f in snap.files_by_fragment[fid]}


@pytest.fixture
def table(wh: omnitable.Warehouse) -> omnitable.Table:
    """v1 a, v2 b, tag old@v1 (1 s), v3 b replaced, tag pinned@v3, v4 a replaced, branch dev@v4
    (v5 c on dev), v6 delete x=6, v7 d."""
    t = wh.create_table("t", {"x": "bigint"})
    t.append(_x(1, 2, 3), "a")
    t.append(_x(4, 5), "b")
    t.create_tag("old", 1, max_age=1)
    t.append(_x(6), "b", mode="replace")
    t.create_tag("pinned", 3)
    t.append(_x(7, 8), "a", mode="replace")
    t.create_branch("dev").append(_x(9), "c")
    t.delete(pc.field("x") == 6)
    t.append(_x(10), "d")
    assert t.version == 7
    return t


def test_expiry_keeps_every_ref_and_fails_expired_versions(table: omnitable.Table) -> None:
    t, dev = table, table.branch("dev")
    reachable = {v: _rows(t, version=v) for v in (3, 4, 6, 7)}
    dev_rows, v5 = _rows(dev), _rows(dev, version=5)
    b_files = _paths(t, "b", version=2)
    a_files = _paths(t, "a", version=1)
    time.sleep(1.1)  # tag "old" (max_age 1 s) has expired
    result = run_job(t._ctx, ExpireJob(retain_last=2))
    assert result.outcome == "committed"
    assert result.summary["horizons"] == {"main": 6}
    assert result.summary["kept_versions"] == [3, 4]  # tag pinned, dev's fork point
    assert result.summary["deleted_tags"] == ["old"]
    assert result.plan.summary["kept_by_tags"] == ["pinned"]
    assert {v: _rows(t, version=v) for v in (3, 4, 6, 7)} == reachable
    assert _rows(t, tag="pinned") == reachable[3]
    assert (_rows(dev), _rows(dev, version=5)) == (dev_rows, v5)
    for v in (0, 1, 2):
        with pytest.raises(NotFoundError, match=f"version {v} .*expired.*horizon, version 6"):
            t.read(version=v)
    with pytest.raises(NotFoundError, match="expired"):
        t.batches(version=2)
    with pytest.raises(NotFoundError, match="tag 'old'"):
        t.read(tag="old")
    # b's first files (visible at v2 only) are gone from disk; a's stay (tag pinned sees them)
    assert b_files and not any(_exists(t, p) for p in b_files)
    assert all(_exists(t, p) for p in a_files)
    assert result.summary["bytes_freed"] == sum(b_files.values())
    assert result.summary["files_deleted"] == len(b_files)
    history = t.history()
    assert [h.version for h in history] == [8, 7, 6, 4, 3, 2, 1, 0]  # expired ones listed
    assert [h.version for h in history if h.expired] == [2, 1, 0]  # 3 and 4 are kept
    assert [h.version for h in dev.history() if h.expired] == [2, 1, 0]  # main's, through dev
    assert history[0].op == "expire" and history[0].summary["horizons"] == {"main": 6}


def test_expired_versions_refuse_refs_and_rollbacks(table: omnitable.Table) -> None:
    run_job(table._ctx, ExpireJob(retain_last=2))
    for make in (
        lambda: table.create_tag("late", 2),
        lambda: table.create_branch("late", 2),
        lambda: table.rollback(2),
    ):
        with pytest.raises(NotFoundError, match="expired"):
            make()
    table.create_tag("again", 3)  # a kept version is still a version
    assert _rows(table, tag="again") == _rows(table, tag="pinned")


def test_a_second_expiry_purges_what_a_deleted_tag_held(table: omnitable.Table) -> None:
    run_job(table._ctx, ExpireJob(retain_last=2))
    dev, v4 = _rows(table.branch("dev")), _rows(table, version=4)
    table.delete_tag("pinned")
    if "old" in [t.name for t in table.tags()]:  # its 1 s may have run out (a loaded machine):
        table.delete_tag("old")  # then the first expiry removed it already
    a_files = _paths(table, "a", version=3)
    again = run_job(table._ctx, ExpireJob(retain_last=2))
    assert again.summary["kept_versions"] == [4]
    assert again.summary["bytes_freed"] > 0
    assert not any(_exists(table, p) for p in a_files)  # a's first files were seen by v3 only
    with pytest.raises(NotFoundError, match="expired"):
        table.read(version=3)
    assert _rows(table.branch("dev")) == dev
    assert _rows(table, version=4) == v4  # dev's fork point


def test_files_shared_by_a_rollback_copy_survive(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("r", {"x": "bigint"})
    t.append(_x(1, 2, 3), "a")
    first = _paths(t, "a")
    t.append(_x(4), "a", mode="replace")
    replaced = _paths(t, "a")
    t.rollback(1)  # copies v1's rows (same paths) as new rows
    t.append(_x(5), "b")
    result = run_job(t._ctx, ExpireJob(retain_last=1))
    assert result.summary["horizons"] == {"main": 4}
    assert result.summary["purged_rows"]["files"] == len(first) + len(replaced)
    assert all(_exists(t, p) for p in first)
    assert not any(_exists(t, p) for p in replaced)
    assert result.summary["bytes_freed"] == sum(replaced.values())
    assert _rows(t) == [1, 2, 3, 5]


def test_dry_run_and_nothing_to_do(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("d", {"x": "bigint"})
    t.append(_x(1), "a")
    t.append(_x(2), "a", mode="replace")
    dry = run_job(t._ctx, ExpireJob(retain_last=1), dry_run=True)
    assert dry.outcome == "dry_run" and dry.plan.summary["horizons"] == {"main": 2}
    assert {"purge": "files", "rows": 1} in dry.plan.actions
    assert _rows(t, version=1) == [1] and t.version == 2
    assert run_job(t._ctx, ExpireJob(older_than=3600)).outcome == "nothing_to_do"
    assert JOBS["expire"](older_than=0).name == "expire"
    both = run_job(t._ctx, ExpireJob(older_than=0, retain_last=2))
    assert both.summary["horizons"] == {"main": 1}  # both must hold: v0 only
    with pytest.raises(ValidationError, match="older_than and/or retain_last"):
        ExpireJob()
    with pytest.raises(ValidationError, match="retain_last"):
        ExpireJob(retain_last=0)


def test_a_process_killed_mid_commit_changes_nothing(
    table: omnitable.Table, catalog_spec: tuple[str, str | None]
) -> None:
    """The expiring process exits abruptly inside its commit transaction (after its deletes):
    the database rolls it back; every version still reads, every file is there."""
    before = {v: _rows(table, version=v) for v in range(0, 8) if v != 5}
    files = _paths(table, "b", version=2)
    script = textwrap.dedent(f"""
        import omnitable
        from omnitable.governance.expire import ExpireJob
        from omnitable.governance.job import run_job
        wh = omnitable.connect({catalog_spec[0]!r}, root={catalog_spec[1]!r})
        run_job(wh.table("t")._ctx, ExpireJob(retain_last=2))
    """)
    env = {**os.environ, "OMNITABLE_FAILPOINTS": "expire.mid_commit=exit"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 77, proc.stderr
    assert {v: _rows(table, version=v) for v in before} == before
    assert all(_exists(table, p) for p in files)
    assert (table.version, table.history()[0].op) == (7, "append")


def test_killed_mid_commit_changes_nothing(table: omnitable.Table) -> None:
    before = {v: _rows(table, version=v) for v in range(0, 8) if v != 5}
    b_files = _paths(table, "b", version=2)

    def die() -> None:
        raise RuntimeError("killed")

    with hooked("expire.mid_commit", die), pytest.raises(RuntimeError, match="killed"):
        run_job(table._ctx, ExpireJob(retain_last=2))
    assert {v: _rows(table, version=v) for v in before} == before
    assert all(_exists(table, p) for p in b_files)
    assert table.version == 7
    assert run_job(table._ctx, ExpireJob(retain_last=2)).outcome == "committed"


# -- races: Prepare, then another write, then Commit; and a write paused while expiry runs ----

WRITES: dict[str, Callable[[omnitable.Table], object]] = {
    "append": lambda t: t.append(_x(11), "e"),
    "delete": lambda t: t.delete(pc.field("x") == 7),
    "replace": lambda t: t.append(_x(12), "d", mode="replace"),
    "rollback": lambda t: t.rollback(2),  # copies v2's rows: their files are shared
    "tag": lambda t: t.create_tag("late", 2),  # versions the plan expires
    "branch": lambda t: t.create_branch("late", 2),
}
POINTS = {"append": "append.before_commit", "delete": "delete.before_commit",
          "replace": "append.before_commit"}  # fmt: skip


def _readable(t: omnitable.Table) -> dict[str, list[int]]:
    out = {f"v{v}": _rows(t, version=v) for v in (3, 4, 6, 7)}
    out["dev"] = _rows(t.branch("dev"))
    return out


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_between_prepare_and_commit(table: omnitable.Table, write: str) -> None:
    job = ExpireJob(retain_last=3)  # main keeps 4, 6, 7 (horizon 4)
    plan = job.prepare(table._ctx)
    assert plan.summary["horizons"] == {"main": 4}
    before = _readable(table)
    WRITES[write](table)
    head = _rows(table)
    late = {"late": _rows(table, tag="late")} if write == "tag" else {}
    if write == "branch":
        late = {"late": _rows(table.branch("late"))}
    result = job.commit(table._ctx, plan, job.execute(table._ctx, plan))
    assert result.outcome == "committed"
    assert _rows(table) == head
    assert {k: v for k, v in _readable(table).items()} == before
    purged = result.summary["purged_rows"].get("files", 0)
    if write in ("tag", "branch"):  # the new ref sees b's first files (v2): kept
        assert (purged, result.summary["files_deleted"]) == (0, 0)
    elif write == "rollback":  # b's first rows go, but the rollback's copies share their files
        assert (purged, result.summary["files_deleted"]) == (1, 0)
    else:
        assert (purged, result.summary["files_deleted"]) == (1, 1)
    if write == "tag":
        assert _rows(table, tag="late") == late["late"]
        assert 2 in result.summary["kept_versions"]
    if write == "branch":
        assert _rows(table.branch("late")) == late["late"]


@pytest.mark.parametrize("write", sorted(POINTS))
def test_expiry_while_a_write_is_paused(table: omnitable.Table, write: str) -> None:
    """The write has read its snapshot (and written its files) when the expiry runs in full;
    it then commits and loses nothing."""
    ran: list[object] = []
    expected = {"append": [*_rows(table), 11], "delete": [x for x in _rows(table) if x != 7],
                "replace": [x for x in _rows(table) if x != 10] + [12]}  # fmt: skip

    def expire() -> None:
        ran.append(run_job(table._ctx, ExpireJob(retain_last=1)))

    with hooked(POINTS[write], expire):
        WRITES[write](table)
    assert ran and ran[0].outcome == "committed"  # type: ignore[attr-defined]
    assert _rows(table) == sorted(expected[write])
    assert _rows(table, tag="pinned") == [1, 2, 3, 6]


def test_a_rollback_paused_while_its_target_expires(table: omnitable.Table) -> None:
    def expire() -> None:
        run_job(table._ctx, ExpireJob(retain_last=1))

    head = _rows(table)
    with hooked("rollback.before_commit", expire), pytest.raises((CommitConflict, NotFoundError)):
        table.rollback(2)
    assert _rows(table) == head
    with pytest.raises(NotFoundError, match="expired"):
        table.rollback(2)


def test_a_tag_or_branch_after_the_expiry_is_refused(table: omnitable.Table) -> None:
    run_job(table._ctx, ExpireJob(retain_last=1))
    for write in ("tag", "branch"):
        with pytest.raises(NotFoundError, match="horizon, version 7"):
            WRITES[write](table)


TEXT_LEN = omnitable.sql_feature("text_len", "length(text)", "int", "1")


@pytest.mark.spark
@pytest.mark.parametrize("order", ["expire-prepared-first", "backfill-paused-first"])
def test_expiry_racing_a_backfill(wh: omnitable.Warehouse, spark: Any, order: str) -> None:
    """Old versions (a batch replaced) expire while a backfill of the head runs; the backfill's
    column lands whole and the purged batch's files are gone."""
    t = wh.create_table("bf", {"text": "string"})
    t.append(pa.table({"text": ["x", "yy"]}), "a")
    old = _paths(t, "a")
    t.append(pa.table({"text": ["zzz", "wwww"]}), "a", mode="replace")
    t.register(TEXT_LEN)
    job = ExpireJob(retain_last=1)
    if order == "expire-prepared-first":
        plan = job.prepare(t._ctx)
        t.backfill("text_len").run(spark)
        result = job.commit(t._ctx, plan, job.execute(t._ctx, plan))
    else:
        ran = []
        with hooked("backfill.before_commit", lambda: ran.append(run_job(t._ctx, job))):
            t.backfill("text_len").run(spark)
        result = ran[0]
    assert result.outcome == "committed"
    got = t.read(["text", "text_len"]).sort_by("text").to_pylist()
    assert got == [{"text": "wwww", "text_len": 4}, {"text": "zzz", "text_len": 3}]
    assert not any(_exists(t, p) for p in old)
    with pytest.raises(NotFoundError, match="expired"):
        t.read(version=1)


@pytest.mark.spark
def test_the_jvm_reader_refuses_expired_versions(
    wh: omnitable.Warehouse,
    table: omnitable.Table,
    spark: Any,
) -> None:
    """``VERSION AS OF`` / ``versionAsOf`` of an expired version fail naming the horizon in
    Spark too (the JVM would otherwise read the partial state the purge left); kept versions,
    tags and heads read the same rows as in Python, and a rollback CALL to it is refused."""
    from tests.spark.spark_tables import bind_catalog

    time.sleep(1.1)  # tag "old" expires: version 1 is no longer pinned
    run_job(table._ctx, ExpireJob(retain_last=2))
    cat = bind_catalog(spark, wh)
    name = f"{cat}.default.t"
    for v in (3, 4, 6, 7):
        got = spark.sql(f"SELECT x FROM {name} VERSION AS OF {v}").collect()
        assert sorted(r.x for r in got) == _rows(table, version=v)
    assert sorted(
        r.x for r in spark.sql(f"SELECT x FROM {name} VERSION AS OF 'pinned'").collect()
    ) == _rows(table, tag="pinned")
    with pytest.raises(
        Exception, match=r"OMNITABLE_VERSION_EXPIRED.*version 1 .*horizon, version 6"
    ):
        spark.sql(f"SELECT x FROM {name} VERSION AS OF 1").collect()
    reader = spark.read.format("omnitable").option("warehouse", wh.uri)
    with pytest.raises(Exception, match="OMNITABLE_VERSION_EXPIRED"):
        reader.option("versionAsOf", 2).load("t").collect()
    with pytest.raises(Exception, match="OMNITABLE_VERSION_EXPIRED"):
        spark.sql(f"CALL {cat}.system.rollback('default.t', 2)").collect()
    with pytest.raises(Exception, match="OMNITABLE_VERSION_EXPIRED|expired"):
        spark.sql(
            f"CALL {cat}.system.create_tag(table => 'default.t', tag => 'late', version => 2)"
        ).collect()


def test_a_catalog_count_of_a_version_expired_since_its_snapshot_fails(
    wh: omnitable.Warehouse,
) -> None:
    """A full-scan plan counts its files in a later transaction than its snapshot's: a version
    expired in between fails naming the horizon instead of counting what the purge left."""
    t = wh.create_table("counted", {"x": "bigint"})
    for name in ("a", "b", "c"):
        t.append(_x(1, 2), name)
    snap = t.snapshot(version=1, with_files=False)
    x = [snap.column("x").column_id]
    live = [f.fragment_id for f in snap.fragments]
    assert wh.catalog.count_providers(snap, live, x) == 1 == t.plan(["x"], version=1).files
    assert run_job(t._ctx, ExpireJob(retain_last=1)).outcome == "committed"
    with pytest.raises(NotFoundError, match="version 1 .*expired"):
        wh.catalog.count_providers(snap, live, x)
    head = t.snapshot(with_files=False)
    assert wh.catalog.count_providers(head, [f.fragment_id for f in head.fragments], x) == 3
