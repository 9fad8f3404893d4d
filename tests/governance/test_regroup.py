"""The access log (format/access.py, Table.access_log) and the regroup job
(governance/regroup.py) on SQLite and PostgreSQL: what scans record, what a regroup rewrites,
what reads back (now and by time travel), and how it races other writers."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import ValidationError
from omnitable.format import access
from omnitable.format.access import ACCESS_DIR, read_access
from omnitable.governance.job import run_job
from omnitable.governance.orphans import OrphanJob
from omnitable.governance.regroup import compact_log_once

pytestmark = pytest.mark.shared_warehouse  # one warehouse per backend; each test its own table

COLS = [f"c{i}" for i in range(12)]
GROUPS = {f"g{i}": COLS[i * 2 : i * 2 + 2] for i in range(6)}  # six groups of two columns
HOT = ["c0", "c2", "c4", "c6"]  # co-read, spread over four groups


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return "r_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]


def _table(wh: omnitable.Warehouse, name: str, **props: Any) -> omnitable.Table:
    t = wh.create_table(name, dict.fromkeys(COLS, "bigint"), groups=GROUPS, properties=props)
    for b in range(2):
        base = b * 100
        t.append(pa.table({c: [base + i * 10 + j for i in range(5)] for j, c in enumerate(COLS)}),
                 f"b{b}", target_fragment_rows=2)  # fmt: skip
    return t


def _access_files(t: omnitable.Table) -> list[str]:
    sel = pafs.FileSelector(t.location.child_path(ACCESS_DIR), allow_not_found=True)
    return [i.path for i in t.location.fs.get_file_info(sel) if i.type == pafs.FileType.File]


def _groups_of(t: omnitable.Table, columns: list[str]) -> set[str]:
    """The groups of the files that provide ``columns`` at the head."""
    snap = t.snapshot()
    ids = [c.column_id for c in snap.columns if c.name in columns]
    return {f.group_name for frag in snap.fragments
            for f in snap.resolve(frag.fragment_id, ids).values() if f is not None}  # fmt: skip


def test_scans_are_recorded_and_summarized(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    for _ in range(3):
        t.read(columns=HOT)
    t.read(columns=["c1"], where=pc.field("c3") > 0)
    t.read()  # every column: not recorded
    log = t.access_log()
    assert [(e["columns"], e["count"]) for e in log] == [(HOT, 3), (["c1", "c3"], 1)]
    files = _access_files(t)
    assert 1 <= len(files) <= 4  # a burst of scans is written together (format/access.py)
    assert len(read_access(t.location)) == 4  # one line per scan
    assert t.access_log(branch="other") == []
    with pytest.raises(ValidationError, match="since must be"):
        t.access_log(since="yesterday")  # type: ignore[arg-type]
    # the orphan job never removes the log
    run_job(t._ctx, OrphanJob(min_age_s=0))
    assert _access_files(t) == files


def test_the_setting_turns_recording_off(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name, **{"read.access_log": False})
    t.read(columns=HOT)
    assert t.access_log() == [] and _access_files(t) == []


def _state(t: omnitable.Table, version: int | None = None) -> list[dict[str, Any]]:
    return t.read(version=version).to_pylist()


def test_regroup_puts_co_read_columns_in_one_file(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    t.delete(pc.field("c0") == 10)
    rid = t.read(columns=["_ai_unique_id_"]).column(0)[3].as_py()
    t.update(pa.table({"_ai_unique_id_": [rid], "c2": [-1]}))
    for _ in range(2):
        t.read(columns=HOT)
    before, old, status = _state(t), t.version, dict(t.status().cells)
    opts = {"regroup": {"min_group_columns": 1}}
    (plan,) = t.maintain(["regroup"], dry_run=True, options=opts)
    assert plan.plan.summary["columns_moved"] == 4
    assert [a["columns"] for a in plan.plan.actions if a["kind"] == "group"] == [HOT]
    (res,) = t.maintain(["regroup"], options=opts)
    assert res.outcome == "committed" and res.version == t.version
    assert _state(t) == before and dict(t.status().cells) == status
    assert len(_groups_of(t, HOT)) == 1 and _groups_of(t, ["c1"]) == {"g0"}
    assert _state(t, old) == before  # time travel reads the old files
    assert len(_access_files(t)) == 1  # the log is compacted: one file of distinct sets
    assert t.access_log()[0]["count"] == 2
    (again,) = t.maintain(["regroup"], options=opts)
    assert again.outcome == "nothing_to_do"


def test_declared_groups_and_cold_merge(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    before = _state(t)
    (res,) = t.maintain(["regroup"], options={"regroup": {"groups": {"pair": ["c1", "c11"]}}})
    assert res.outcome == "committed" and _groups_of(t, ["c1", "c11"]) == {"pair"}
    # no log: the small groups nobody co-reads merge into one (max 512 columns)
    (cold,) = t.maintain(["regroup"])
    assert cold.outcome == "committed" and _state(t) == before
    assert len(_groups_of(t, [c for c in COLS if c not in ("c1", "c11")])) == 1
    with pytest.raises(ValidationError, match="not a raw column"):
        t.maintain(["regroup"], options={"regroup": {"groups": {"x": ["nope"]}}})
    with pytest.raises(ValidationError, match="must not exceed"):
        t.maintain(["regroup"], options={"regroup": {"min_group_columns": 9,
                                                     "max_group_columns": 3}})  # fmt: skip


def _delete(t: omnitable.Table) -> None:
    t.delete(pc.field("c0") == 20)


def _update(t: omnitable.Table) -> None:
    rid = t.read(columns=["_ai_unique_id_", "c0"]).filter(pc.field("c0") == 20).column(0)
    t.update(pa.table({"_ai_unique_id_": rid, "c2": [-7]}))


@pytest.mark.parametrize("racer", [_delete, _update], ids=["delete", "update"])
def test_a_racing_write_conflicts_and_is_kept(
    wh: omnitable.Warehouse, name: str, racer: Any
) -> None:
    """A delete or update between the regroup's Execute and Commit makes it conflict; it
    prepares again on the new head and commits, and the other write is not lost."""
    t = _table(wh, name)
    t.read(columns=HOT)
    other = wh.table(name)
    with hooked("governance.before_commit", lambda: racer(other)):
        (res,) = t.maintain(["regroup"])
    assert res.outcome == "committed"
    rows = t.read(columns=["c0", "c2"]).to_pylist()
    if racer is _delete:
        assert 20 not in [r["c0"] for r in rows] and t.count() == 9
    else:
        assert {"c0": 20, "c2": -7} in rows and t.count() == 10
    assert len(_groups_of(t, HOT)) == 1
    assert [h.op for h in t.history()].count("regroup") == 1


def test_a_crash_before_commit_leaves_the_old_layout(wh: omnitable.Warehouse, name: str) -> None:
    t = _table(wh, name)
    t.read(columns=HOT)
    before, version = _state(t), t.version
    data = t.location.child_path("data")
    sel = pafs.FileSelector(data, recursive=True)
    files = {i.path for i in t.location.fs.get_file_info(sel) if i.type == pafs.FileType.File}

    def crash() -> None:
        raise RuntimeError("killed")

    with hooked("governance.before_commit", crash), pytest.raises(RuntimeError, match="killed"):
        t.maintain(["regroup"])
    assert t.version == version and _state(t) == before and len(_groups_of(t, HOT)) == 4
    after = {i.path for i in t.location.fs.get_file_info(sel) if i.type == pafs.FileType.File}
    assert after == files


def test_two_log_compactions_at_once_never_count_a_scan_twice(
    wh: omnitable.Warehouse, name: str
) -> None:
    """A compaction that starts while another one has read the log (and not yet replaced it)
    leaves the log alone (without the lease both would write the 3 scans: 6): each scan is counted once afterwards, and the lease is free."""
    t = _table(wh, name)
    for _ in range(3):
        t.read(columns=HOT)
        access.flush()  # one file per scan
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=1)
    racing: list[dict[str, Any]] = []
    with hooked(
        "access.compact.before_write",
        lambda: racing.append(compact_log_once(wh.table(name)._ctx, keep_since=since)),
    ):
        first = compact_log_once(t._ctx, keep_since=since)
    assert [(e["columns"], e["count"]) for e in t.access_log()] == [(HOT, 3)]
    assert racing == [{"skipped": racing[0]["skipped"]}] and ":" in racing[0]["skipped"]
    assert first["files_before"] == 3 and first["entries_kept"] == 1
    assert len(_access_files(t)) == 1
    again = compact_log_once(t._ctx, keep_since=since)  # the lease was released
    assert again["files_before"] == 1 and t.access_log()[0]["count"] == 3


def _append(t: omnitable.Table) -> None:
    t.append(pa.table({c: [900 + j] for j, c in enumerate(COLS)}), "b2")


def _add_column(t: omnitable.Table) -> None:
    ids = t.read(columns=["_ai_unique_id_"]).column(0)
    t.add_columns(pa.table({"_ai_unique_id_": ids, "extra": pc.multiply(ids, 2)}), group="ex")


def _compact(t: omnitable.Table) -> None:
    (res,) = t.maintain(["compact"], options={"compact": {"target_fragment_rows": 100}})
    assert res.outcome == "committed"


@pytest.mark.parametrize(
    "racer,conflicts",
    [(_append, False), (_add_column, True), (_compact, True)],
    ids=["append", "add_columns", "compact"],
)
def test_writers_racing_a_regroup_keep_their_data(
    wh: omnitable.Warehouse, name: str, racer: Any, conflicts: bool
) -> None:
    """An append, add_columns or compaction between the regroup's Execute and Commit: a new
    batch leaves the regrouped ones alone (the regroup commits as prepared); files added to or
    replacing the regrouped batches make it conflict, prepare again and commit. Either way every
    value of both writes reads back and the hot columns end in one group."""
    t = _table(wh, name)
    t.read(columns=HOT)
    before = _state(t)
    raced: list[int] = []

    def race() -> None:
        other = wh.table(name)
        racer(other)
        raced.append(other.version)

    with hooked("governance.before_commit", race):
        (res,) = t.maintain(["regroup"])
    assert res.outcome == "committed"
    # prepared again on the racer's commit exactly when that commit touched the batches
    assert (res.plan.base_version >= raced[0]) == conflicts
    rows = _state(t)
    old = [{k: v for k, v in r.items() if k != "extra"} for r in rows if r["c0"] < 900]
    assert old == before
    if racer is _append:
        assert [r["c0"] for r in rows if r["c0"] >= 900] == [900]
    if racer is _add_column:
        assert all(r["extra"] == 2 * r["_ai_unique_id_"] for r in rows)
    snap = t.snapshot()
    ids = [c.column_id for c in snap.columns if c.name in HOT]
    groups = {f.group_name for frag in snap.fragments_of(["b0", "b1"])
              for f in snap.resolve(frag.fragment_id, ids).values() if f is not None}  # fmt: skip
    assert len(groups) == 1  # b2 (appended meanwhile) keeps the declared groups until next run
    assert [h.op for h in t.history()].count("regroup") == 1


def _declared(t: omnitable.Table, columns: list[str], version: int | None = None) -> set[str]:
    """The catalog's declared groups of ``columns`` (what new writes use)."""
    return {c.group_name for c in t.snapshot(version=version).columns if c.name in columns}


def _batch_groups(t: omnitable.Table, batch: str, columns: list[str]) -> set[str]:
    snap = t.snapshot()
    ids = [c.column_id for c in snap.columns if c.name in columns]
    return {f.group_name for frag in snap.fragments_of([batch])
            for f in snap.resolve(frag.fragment_id, ids).values() if f is not None}  # fmt: skip


def test_a_regroup_declares_its_groups_for_new_writes(wh: omnitable.Warehouse, name: str) -> None:
    """The regroup's commit makes its target groups the declared ones: a batch appended after
    it writes the hot columns into one file; time travel sees the old declaration."""
    t = _table(wh, name)
    t.read(columns=HOT)
    old = t.version
    (res,) = t.maintain(["regroup"], options={"regroup": {"min_group_columns": 1}})
    assert res.outcome == "committed" and res.summary["columns_declared"] == 4
    (hot,) = _declared(t, HOT)
    assert _groups_of(t, HOT) == {hot} and _declared(t, ["c1"]) == {"g0"}
    assert _declared(t, HOT, version=old) == {"g0", "g1", "g2", "g3"}
    t.append(pa.table({c: [900 + j] for j, c in enumerate(COLS)}), "b2")
    assert _batch_groups(t, "b2", HOT) == {hot}  # before: one file per old group (4)
    assert t.read(where=pc.field("c0") == 900, columns=HOT).to_pylist() == [
        {"c0": 900, "c2": 902, "c4": 904, "c6": 906}
    ]
    (again,) = t.maintain(["regroup"], options={"regroup": {"min_group_columns": 1}})
    assert again.outcome == "nothing_to_do"
    # a declaration-only change (no batch to move) still commits: a table with no batches
    e = wh.create_table(name + "_e", dict.fromkeys(COLS, "bigint"), groups=GROUPS)
    (only,) = e.maintain(["regroup"], options={"regroup": {"groups": {"pair": ["c1", "c11"]}}})
    assert only.outcome == "committed" and only.plan.summary["batches"] == 0
    assert _declared(e, ["c1", "c11"]) == {"pair"} and _declared(e, ["c0"]) == {"g0"}


def _rename(t: omnitable.Table) -> None:
    t.rename_column("c2", "c2b")


@pytest.mark.parametrize("racer", [_append, _add_column], ids=["append", "add_columns"])
def test_writes_racing_a_regroup_see_its_declared_groups(
    wh: omnitable.Warehouse, name: str, racer: Any
) -> None:
    """An append or add_columns between the regroup's Execute and Commit: both commit, the
    racer's files keep the groups it read, the declaration is the regroup's, and the next
    append writes the new groups."""
    t = _table(wh, name)
    t.read(columns=HOT)
    with hooked("governance.before_commit", lambda: racer(wh.table(name))):
        (res,) = t.maintain(["regroup"], options={"regroup": {"min_group_columns": 1}})
    assert res.outcome == "committed" and res.summary["columns_declared"] == 4
    (hot,) = _declared(t, HOT)
    if racer is _append:
        assert len(_batch_groups(t, "b2", HOT)) == 4  # written with the groups it read
    else:
        assert _declared(t, ["extra"]) == {"ex"}
    t.append(pa.table({c: [800 + j] for j, c in enumerate(COLS)}), "b3")
    assert _batch_groups(t, "b3", HOT) == {hot}
    assert t.read(where=pc.field("c0") == 800, columns=HOT).to_pylist() == [
        {"c0": 800, "c2": 802, "c4": 804, "c6": 806}
    ]


def test_a_column_added_to_a_declared_group_meanwhile_conflicts(
    wh: omnitable.Warehouse, name: str
) -> None:
    """add_columns into the group name a regroup declares, between its Execute and Commit: the
    regroup conflicts (nothing of it committed), prepares again on the new head and commits;
    the added column's values are kept."""
    t = _table(wh, name)
    before = _state(t)
    seen: list[int] = []

    def race() -> None:
        if not seen:
            other = wh.table(name)
            ids = other.read(columns=["_ai_unique_id_"]).column(0)
            other.add_columns(pa.table({"_ai_unique_id_": ids, "extra": ids}), group="pair")
            seen.append(other.version)

    opts = {"regroup": {"groups": {"pair": ["c1", "c11"]}}}
    with hooked("governance.before_commit", race):
        (res,) = t.maintain(["regroup"], options=opts)
    assert res.outcome == "committed" and res.plan.base_version >= seen[0]
    assert _declared(t, ["c1", "c11", "extra"]) == {"pair"}
    rows = _state(t)
    assert [{k: v for k, v in r.items() if k != "extra"} for r in rows] == before
    assert all(r["extra"] == r["_ai_unique_id_"] for r in rows)
    assert [h.op for h in t.history()].count("regroup") == 1
    # no batch to rewrite (only the declaration changes): the group check alone conflicts
    e = wh.create_table(name + "_e", dict.fromkeys(COLS, "bigint"), groups=GROUPS)
    empty = pa.table(
        {"_ai_unique_id_": pa.array([], pa.int64()), "extra": pa.array([], pa.int64())}
    )
    added: list[int] = []

    def race_empty() -> None:
        if not added:
            other = wh.table(name + "_e")
            other.add_columns(empty, group="pair")
            added.append(other.version)

    with hooked("governance.before_commit", race_empty):
        (res,) = e.maintain(["regroup"], options=opts)
    assert res.outcome == "committed" and res.plan.base_version >= added[0]
    assert _declared(e, ["c1", "c11", "extra"]) == {"pair"}


def test_a_rename_racing_a_regroup_conflicts_either_way(wh: omnitable.Warehouse, name: str) -> None:
    """A rename of a column the regroup re-declares commits between its Execute and Commit:
    the regroup prepares again and declares the renamed column; a rename prepared before a
    regroup commits conflicts (its column's row changed)."""
    t = _table(wh, name)
    t.read(columns=HOT)
    opts = {"regroup": {"min_group_columns": 1}}
    with hooked("governance.before_commit", lambda: _rename(wh.table(name))):
        (res,) = t.maintain(["regroup"], options=opts)
    assert res.outcome == "committed"
    assert len(_declared(t, ["c0", "c2b", "c4", "c6"])) == 1
    u = wh.create_table(name + "_u", dict.fromkeys(COLS, "bigint"), groups=GROUPS)
    u.append(pa.table({c: [1] for c in COLS}), "b0")
    pair = {"regroup": {"groups": {"pair": ["c1", "c11"]}}}
    regroup = hooked("columns.before_commit", lambda: u.maintain(["regroup"], options=pair))
    with regroup, pytest.raises(omnitable.CommitConflict, match="regrouped"):
        wh.table(name + "_u").rename_column("c1", "c1b")
    assert _declared(u, ["c1"]) == {"pair"}
