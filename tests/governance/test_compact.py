"""Compaction and folding (governance/compact.py, rewrite.py) on SQLite and PostgreSQL: what a
rewritten batch reads back, what the commit records, and how it races every other writer
(both orders, through in-process failpoint hooks), a crash in each phase included."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from sqlalchemy import text

import omnitable
from omnitable._failpoints import hooked
from omnitable.catalog.lease import lease_key
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.governance.compact import CompactJob
from omnitable.governance.job import MaintenanceResult, run_job
from omnitable.governance.jobs import make_job
from omnitable.vocabulary.names import ROW_ID

pytestmark = pytest.mark.shared_warehouse  # one warehouse per backend; each test its own table

SMALL = {"write.target_fragment_rows": 4}  # upserts write fragments of 4 rows
TARGET = {"compact": {"target_fragment_rows": 100}}


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return "c_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]


def _table(wh: omnitable.Warehouse, name: str, batches: int = 3, rows: int = 10) -> omnitable.Table:
    t = wh.create_table(name, {"x": "bigint", "s": "string"})
    for b in range(batches):
        xs = list(range(b * 100, b * 100 + rows))
        t.append(pa.table({"x": xs, "s": [f"s{x}" for x in xs]}), f"b{b}", target_fragment_rows=4)
    return t


def _state(t: omnitable.Table, version: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Every batch's rows (all columns, ids included) in the table's read order."""
    rows = t.read(version=version).to_pylist()
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["_ai_append_name_"], []).append(r)
    return out


def _fragments(t: omnitable.Table, batch: str) -> int:
    return len(t.snapshot().fragments_of([batch]))


def _files(t: omnitable.Table) -> set[str]:
    sel = pafs.FileSelector(t.location.child_path("data"), recursive=True, allow_not_found=True)
    return {i.path for i in t.location.fs.get_file_info(sel) if i.type == pafs.FileType.File}


def _compact(t: omnitable.Table, **options: Any) -> MaintenanceResult:
    (result,) = t.maintain(["compact"], options={"compact": options} if options else None)
    return result


# -- what a compaction reads back --------------------------------------------------------------


def test_compaction_reads_back_equal(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    t.delete(pc.field("x").isin([3, 104]))
    first = t.read(columns=[ROW_ID], batches=["b1"]).column(0)[5].as_py()
    t.update(pa.table({ROW_ID: [first], "s": ["updated"]}))
    before, old, count = _state(t), t.version, t.count()
    assert [_fragments(t, b) for b in ("b0", "b1", "b2")] == [3, 3, 3]

    result = _compact(t)

    assert (result.outcome, result.version) == ("committed", old + 1)
    assert _state(t) == before and t.count() == count == 28
    assert [_fragments(t, b) for b in ("b0", "b1", "b2")] == [1, 1, 1]
    assert not t.snapshot().deletions  # folded: no vector left
    commit = t.history(limit=1)[0]
    assert commit.op == "compact"
    assert {k: commit.summary[k] for k in ("fragments_before", "fragments_after", "files_before",
            "files_after", "rows", "deleted_rows_dropped")} == {
        "fragments_before": 9, "fragments_after": 3, "files_before": 10, "files_after": 3,
        "rows": 28, "deleted_rows_dropped": 2}  # fmt: skip
    assert commit.summary["bytes_written"] > 0
    assert _state(t, version=old) == before  # time travel still reads the old files
    assert t.read(where=pc.field("s") == "updated").column("x").to_pylist() == [106]


def test_a_second_compaction_has_nothing_to_do(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    _compact(t)
    version = t.version
    assert _compact(t).outcome == "nothing_to_do" and t.version == version


def test_dry_run_prints_the_plan_and_changes_nothing(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=2)
    version, files = t.version, _files(t)
    (result,) = t.maintain(["compact"], dry_run=True)
    assert result.outcome == "dry_run" and t.version == version and _files(t) == files
    text = result.plan.describe()
    assert f"compact {name}@main v{version}" in text and '"batch": "b0"' in text
    assert result.plan.summary["fragments"] == 6 and result.plan.summary["target_fragments"] == 2


def test_options_and_unknown_jobs(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=1)
    with pytest.raises(ValidationError, match="known jobs: compact, .*fold"):
        t.maintain(["defrag"])
    with pytest.raises(ValidationError, match="Invalid options"):
        t.maintain(["compact"], options={"compact": {"speed": 3}})
    with pytest.raises(ValidationError, match="min_fragments must be at least 2"):
        t.maintain(["compact"], options={"compact": {"min_fragments": 1}})
    # a target of 8 rows: 10 rows in 3 fragments become 2 fragments
    _compact(t, target_fragment_rows=8)
    assert _fragments(t, "b0") == 2
    assert _compact(t, min_fragments=3).outcome == "nothing_to_do"


def test_only_batches_that_would_shrink_are_compacted(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=1, rows=4)  # one fragment
    t.append(pa.table({"x": list(range(20)), "s": ["y"] * 20}), "big", target_fragment_rows=4)
    plan = t.maintain(["compact"], dry_run=True)[0].plan
    assert [a["batch"] for a in plan.actions] == ["big"]


def test_fold_drops_deleted_rows_and_overlays(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=2)
    assert t.maintain(["fold"])[0].outcome == "nothing_to_do"
    t.delete(pc.field("x") == 101)  # 1 of 10 rows of b1: 10 %
    ids = t.read(columns=[ROW_ID], batches=["b0"]).column(0).to_pylist()
    t.update(pa.table({ROW_ID: [ids[0]], "s": ["new"]}))  # an overlay file in b0
    before = _state(t)
    (result,) = t.maintain(["fold"])
    assert result.outcome == "committed" and t.history(limit=1)[0].op == "fold"
    assert [a["batch"] for a in result.plan.actions] == ["b0", "b1"]
    assert _state(t) == before and not t.snapshot().deletions
    snap = t.snapshot()
    assert all(len(snap.files_by_fragment[f.fragment_id]) == 1 for f in snap.fragments)


def test_retired_columns_survive_a_compaction(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=1)
    ids = t.read(columns=[ROW_ID]).column(0)
    t.add_columns(pa.table({ROW_ID: ids, "note": [f"n{i}" for i in range(10)]}), group="notes")
    t.retire("note")
    _compact(t)
    assert _fragments(t, "b0") == 1
    t.restore("note")
    assert t.read(columns=["note"]).column(0).to_pylist() == [f"n{i}" for i in range(10)]


def test_keyed_table_lookup_after_compaction(wh: omnitable.Warehouse, name: str) -> None:
    t = wh.create_table(name, {"key": "string", "v": "bigint"}, key="key", properties=SMALL)
    t.upsert(pa.table({"key": [f"k{i}" for i in range(10)], "v": list(range(10))}), append_name="b")
    t.delete(pc.field("key") == "k3")
    _compact(t, target_fragment_rows=100)
    assert _fragments(t, "b") == 1
    got = t.lookup(["k1", "k3", "k9"], ["v"])
    assert got.column("v").to_pylist() == [1, 9]
    t.upsert(pa.table({"key": ["k2", "k3"], "v": [20, 30]}))  # k2 merged, k3 inserted again
    assert sorted(t.read(columns=["key"]).column(0).to_pylist()) == [f"k{i}" for i in range(10)]
    assert t.lookup(["k2", "k3"], ["v"]).column("v").to_pylist() == [20, 30]


def test_a_compacted_batch_keeps_its_place(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=2)
    t.append(pa.table({"x": [7], "s": ["last"]}), "b_last")  # one fragment: not compacted
    _compact(t)
    assert [b.name for b in t.batches()] == ["b0", "b1", "b_last"]


# -- races -------------------------------------------------------------------------------------


def _first_id(t: omnitable.Table, batch: str = "b0") -> int:
    return int(t.read(columns=[ROW_ID], batches=[batch]).column(0)[0].as_py())


OTHERS: dict[str, tuple[str, Callable[[omnitable.Table], object]]] = {
    "append": ("append.before_commit", lambda t: t.append(pa.table({"x": [9], "s": ["n"]}), "new")),
    "add_columns": ("add_columns.before_commit", lambda t: t.add_columns(
        pa.table({ROW_ID: t.read(columns=[ROW_ID]).column(0), "note": ["n"] * t.count()}),
        group="notes")),
    "delete": ("delete.before_commit", lambda t: t.delete(pc.field("x") == 2)),
    "update": ("update.before_commit", lambda t: t.update(
        pa.table({ROW_ID: [_first_id(t)], "s": ["updated"]}))),
    "retire": ("columns.before_commit", lambda t: t.retire("s")),
    "rename": ("columns.before_commit", lambda t: t.rename_column("s", "s2")),
    "register": ("register.before_commit", lambda t: t.register(
        omnitable.sql_feature("up", "upper(s)", "string", "1"))),
    # another compaction that does not hold the lease (a one-shot maintain or a service would
    # be refused it: tests/governance/test_maintain_lease.py); the conflict rule still holds
    "compact": ("governance.before_commit", lambda t: run_job(t._ctx, make_job("compact"))),
}  # fmt: skip


def _check_other(kind: str, t: omnitable.Table) -> None:
    """What the other writer did is visible after both committed."""
    if kind == "append":
        assert [b.name for b in t.batches()][-1] == "new" or "new" in {b.name for b in t.batches()}
    elif kind == "add_columns":
        assert set(t.read(columns=["note"]).column(0).to_pylist()) == {"n"}
    elif kind == "delete":
        assert 2 not in t.read(columns=["x"]).column(0).to_pylist()  # never resurrected
    elif kind == "update":
        assert t.read(where=pc.field("x") == 0).column("s").to_pylist() == ["updated"]
    elif kind == "rename":
        assert t.read(where=pc.field("x") == 1).column("s2").to_pylist() == ["s1"]
    elif kind == "register":
        assert [f.name for f in t.features()] == ["up"]
    elif kind == "retire":
        assert t.retired() == ["s"]
        t.restore("s")
        assert t.read(where=pc.field("x") == 1).column("s").to_pylist() == ["s1"]


@pytest.mark.parametrize("kind", sorted(OTHERS))
def test_compaction_paused_while_another_writer_commits(
    kind: str, wh: omnitable.Warehouse, name: str
) -> None:
    """The other writer commits between the compaction's Execute and its Commit: the compaction
    conflicts when it touched the batch (and prepares again on the new head), else lands
    alongside; nothing the other writer did is lost."""
    t = _table(wh, name, batches=2)
    other = wh.table(name)
    _, run = OTHERS[kind]
    ran: list[int] = []

    def writer() -> None:
        run(other)
        ran.append(other.version)

    with hooked("governance.before_commit", writer):
        (result,) = t.maintain(["compact"])
    assert ran, "the other writer never ran"
    if kind == "compact":  # the other compaction did the work: nothing left to do
        assert result.outcome == "nothing_to_do"
    else:
        assert result.outcome == "committed" and result.version == t.version
    assert [_fragments(t, b) for b in ("b0", "b1")] == [1, 1]
    _check_other(kind, t)
    ops = [h.op for h in t.history()]
    assert ops.count("compact") == 1


REVERSE: dict[str, tuple[str, Callable[[omnitable.Table], object]]] = {
    k: v for k, v in OTHERS.items() if k != "compact"
}


@pytest.mark.parametrize("kind", sorted(REVERSE))
def test_another_writer_paused_while_the_compaction_commits(
    kind: str, wh: omnitable.Warehouse, name: str
) -> None:
    """The compaction commits between the other writer's snapshot and its commit: a writer that
    planned on the old fragments conflicts (a delete re-plans itself and lands); appends and
    retires land alongside."""
    t = _table(wh, name, batches=2)
    compactor = wh.table(name)
    point, run = REVERSE[kind]
    with hooked(point, lambda: compactor.maintain(["compact"])):
        if kind in ("add_columns", "update"):
            with pytest.raises(CommitConflict, match="fragment\\(s\\) were removed"):
                run(t)
            run(t)  # the retry plans on the new fragments
        else:
            run(t)
    assert [_fragments(t, b) for b in ("b0", "b1")] == [1, 1]
    assert [h.op for h in t.history()].count("compact") == 1
    _check_other(kind, t)


def test_upserts_race_a_compaction_both_ways(wh: omnitable.Warehouse, name: str) -> None:
    t = wh.create_table(name, {"key": "string", "v": "bigint"}, key="key", properties=SMALL)
    t.upsert(pa.table({"key": [f"k{i}" for i in range(10)], "v": list(range(10))}), append_name="b")
    other = wh.table(name)
    with hooked("upsert.before_commit", lambda: other.maintain(["compact"], options=TARGET)):
        t.upsert(pa.table({"key": ["k1", "n1"], "v": [10, 11]}))  # re-plans on the new fragments
    assert _fragments(t, "b") == 1
    t.upsert(pa.table({"key": [f"m{i}" for i in range(10)], "v": list(range(10))}), append_name="m")
    ran: list[object] = []

    def upsert() -> None:
        ran.append(other.upsert(pa.table({"key": ["k2", "n2", "m2"], "v": [20, 21, 22]})))

    with hooked("governance.before_commit", upsert):
        t.maintain(["compact"], options=TARGET)  # conflicts, prepares again, commits
    assert ran and _fragments(t, "m") == 1
    got = t.lookup(["k1", "n1", "k2", "n2", "m2", "k3"], ["v"]).column("v").to_pylist()
    assert got == [10, 11, 20, 21, 22, 3]
    keys = t.read(columns=["key"]).column(0).to_pylist()
    assert len(keys) == len(set(keys)) == 22


def test_a_failure_in_execute_leaves_no_file(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=2)
    files, version = _files(t), t.version

    def fail() -> None:
        raise RuntimeError("disk full")

    with hooked("governance.after_file", fail), pytest.raises(RuntimeError, match="disk full"):
        t.maintain(["compact"])
    assert _files(t) == files and t.version == version
    # a failed commit removes what Execute wrote too
    with hooked("governance.before_commit", fail), pytest.raises(RuntimeError):
        t.maintain(["compact"])
    assert _files(t) == files and t.version == version


CHILD = """
import sys, omnitable
wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
wh.table(sys.argv[3]).maintain(["compact"])
print("committed", flush=True)
"""


def test_killed_mid_commit_leaves_nothing_visible(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], name: str
) -> None:
    t = _table(wh, name, batches=2)
    before, version = _state(t), t.version
    uri, root = catalog_spec
    env = dict(os.environ, OMNITABLE_FAILPOINTS="commit.mid_insert=exit",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", CHILD, uri, root or "", name], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 77, proc.stderr[-3000:]
    assert t.version == version and _state(t) == before
    assert [_fragments(t, b) for b in ("b0", "b1")] == [3, 3]
    # the killed run's lease stays until it expires (forced here), then the job runs again
    left = _compact(t)
    assert left.outcome == "leased" and left.summary["holder"].startswith("maintain:")
    key = lease_key(t.record.table_id, "compact")
    with wh.catalog.store.write() as conn:
        doc = json.loads(wh.catalog.store.get_meta(key) or "{}")
        conn.execute(text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
                     {"k": key, "v": json.dumps({**doc, "expires": 0})})  # fmt: skip
    assert _compact(t).outcome == "committed" and _state(t) == before


@pytest.mark.parametrize("kind", ["delete", "update"])
def test_the_commit_refuses_fragments_changed_since_its_plan(
    kind: str, wh: omnitable.Warehouse, name: str
) -> None:
    """The worst incident of a rewrite: validated against the wrong snapshot, it would resurrect
    a row deleted after its plan (or lose an update). Its commit must conflict instead."""
    t = _table(wh, name, batches=1)
    job = CompactJob()
    plan = job.prepare(t._ctx)
    executed = job.execute(t._ctx, plan)
    OTHERS[kind][1](wh.table(name))
    with pytest.raises(CommitConflict, match="changed fragment .* that it rewrote"):
        job.commit(t._ctx, plan, executed)
    assert _fragments(t, "b0") == 3
    _check_other(kind, t)


def test_compaction_on_a_branch_leaves_main_alone(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, batches=2)
    t.create_branch("exp")
    exp = t.branch("exp")
    exp.delete(pc.field("x") == 1)
    main_before, exp_before = _state(t), _state(exp)
    (result,) = exp.maintain(["compact"])
    assert result.outcome == "committed" and result.plan.branch == "exp"
    assert _state(exp) == exp_before and _state(t) == main_before
    assert len(exp.snapshot().fragments_of(["b0"])) == 1 and _fragments(t, "b0") == 3
    t.delete(pc.field("x") == 2)  # main still writes to its own fragments
    assert 2 not in t.read(columns=["x"]).column(0).to_pylist()
    assert 2 in exp.read(columns=["x"]).column(0).to_pylist()
