"""Merges racing other writers, on SQLite and PostgreSQL (``wh``): a commit on the target or on
the source lands between the merge's plan and its commit (failpoint ``merge.before_commit``),
or a writer that planned before the merge commits after it. The merge plans again or conflicts
cleanly; no commit of either side is ever lost, and every read equals the model. One warehouse
per backend for the module (``shared_warehouse``), a table of its own for each test (``name``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import pytest

import omnitable
from omnitable import MergeConflict
from omnitable._failpoints import hooked

from .merge_helpers import (
    BASE,
    Rows,
    delete_x,
    head_state,
    make_table,
    new_rows,
    rows,
    set_col,
    with_values,
    without,
)

POINT = "merge.before_commit"
Race = Callable[[str, Callable[[], Any], Callable[[], Any]], dict[str, Any]]  # conftest.race


pytestmark = pytest.mark.shared_warehouse  # one warehouse per backend (conftest)


@pytest.fixture
def name() -> str:
    """The test's own table in the shared warehouse."""
    return f"web_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def t(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    return make_table(wh, name)


def _three_way_setup(t: omnitable.Table) -> omnitable.Table:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "y", {2: 22.0})  # main moved: not a fast-forward
    return a


def test_target_commit_during_a_three_way_merge_is_kept(t: omnitable.Table) -> None:
    _three_way_setup(t)
    with hooked(POINT, lambda: set_col(t, "s", {6: "M6"})):
        result = t.merge("a")
    assert not result.fast_forward and result.cells == 1
    assert [c.op for c in t.history()][:2] == ["merge", "update"]  # planned again after it
    assert rows(t) == with_values(with_values(BASE, 0, {1: "A1", 6: "M6"}), 1, {2: 22.0})


def test_target_commit_that_conflicts_during_a_merge(t: omnitable.Table) -> None:
    _three_way_setup(t)
    change = hooked(POINT, lambda: set_col(t, "s", {3: "M3"}))  # a's cell, changed on main
    with change, pytest.raises(MergeConflict) as info:
        t.merge("a")
    assert [(c.kind, c.column) for c in info.value.details] == [("cell", "s")]
    assert t.history()[0].op == "update"  # the racing commit, and no merge
    assert rows(t) == with_values(with_values(BASE, 0, {3: "M3"}), 1, {2: 22.0})


def test_target_commit_during_a_fast_forward_makes_it_three_way(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    delete_x(a, 4)

    def late() -> None:
        t.append(new_rows([30], "m"), "late")

    with hooked(POINT, late):
        result = t.merge("a")
    assert not result.fast_forward and result.deletes == 1 and result.cells == 1
    assert rows(t) == without(with_values(BASE, 0, {1: "A1"}), 4) | {30: ("m30", 30.0)}
    assert rows(a) == without(with_values(BASE, 0, {1: "A1"}), 4)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_source_commit_during_a_merge_is_merged_too(t: omnitable.Table, fast_forward: bool) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    want = with_values(BASE, 0, {1: "A1", 7: "A7"})
    if not fast_forward:
        set_col(t, "y", {2: 22.0})
        want = with_values(want, 1, {2: 22.0})
    with hooked(POINT, lambda: set_col(a, "s", {7: "A7"})):
        result = t.merge("a")
    assert result.fast_forward == fast_forward and result.source_version == a.version
    assert rows(t) == want
    assert t.merge("a").version is None


def test_merge_racing_in_threads(t: omnitable.Table, race: Race) -> None:
    """The merge pauses before its commit in a thread while main takes an update on another
    connection, then goes on: it plans again and keeps the update."""
    _three_way_setup(t)
    out = race(POINT, lambda: t.merge("a"), lambda: set_col(t, "s", {8: "M8"}))
    assert "error" not in out, out
    assert out["version"].version == t.version
    assert rows(t) == with_values(with_values(BASE, 0, {1: "A1", 8: "M8"}), 1, {2: 22.0})


def _writer(kind: str, target: omnitable.Table) -> Any:
    """A write on ``target`` that pauses at its ``*.before_commit`` failpoint."""
    if kind == "update":
        return "update.before_commit", lambda: set_col(target, "y", {9: 99.0})
    if kind == "delete":
        return "delete.before_commit", lambda: delete_x(target, 9)
    return "append.before_commit", lambda: target.append(new_rows([50], "w"), "w")


@pytest.mark.parametrize("kind", ["update", "delete", "append"])
@pytest.mark.parametrize("fast_forward", [True, False])
def test_target_writer_planned_before_a_merge_commits_after_it(
    t: omnitable.Table, race: Race, kind: str, fast_forward: bool
) -> None:
    """A writer on main planned before the merge and commits after it: it commits (it touches
    other cells than the merge) on top of the merge, and both show."""
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1", 9: "A9"})
    a.append(new_rows([20], "a"), "from_a")
    want = with_values(BASE, 0, {1: "A1", 9: "A9"}) | {20: ("a20", 20.0)}
    if not fast_forward:
        set_col(t, "y", {2: 22.0})
        want = with_values(want, 1, {2: 22.0})
    point, write = _writer(kind, t)
    merged: list[Any] = []
    out = race(point, write, lambda: merged.append(t.merge("a")))
    assert merged[0].fast_forward == fast_forward
    assert "error" not in out, out  # other cells than the merge's: it commits on top
    assert t.history()[0].op == kind and t.history()[1].op == (
        "append" if fast_forward else "merge"  # a's last commit, or the merge
    )
    want = {"update": lambda w: with_values(w, 1, {9: 99.0}),
            "delete": lambda w: without(w, 9),
            "append": lambda w: w | {50: ("w50", 50.0)}}[kind](want)  # fmt: skip
    assert rows(t) == want


@pytest.mark.parametrize("kind", ["update", "delete", "append"])
def test_source_writer_planned_before_a_fast_forward_commits_on_the_source(
    t: omnitable.Table, race: Race, kind: str
) -> None:
    """A writer on the source planned before a fast-forward commits after it, on the source
    (whose rows are main's by then): main does not see it until the next merge."""
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    point, write = _writer(kind, a)
    merged: list[Any] = []
    out = race(point, write, lambda: merged.append(t.merge("a")))
    assert merged[0].fast_forward
    assert "error" not in out, out
    main_rows = with_values(BASE, 0, {1: "A1"})
    assert rows(t) == main_rows
    want = {"update": lambda w: with_values(w, 1, {9: 99.0}),
            "delete": lambda w: without(w, 9),
            "append": lambda w: w | {50: ("w50", 50.0)}}[kind](main_rows)  # fmt: skip
    assert rows(a) == want
    before = head_state(t)
    assert t.merge("a").fast_forward
    assert rows(t) == want and head_state(t) != before


def _fork_with_change(t: omnitable.Table, fast_forward: bool) -> Rows:
    """Branch ``a`` changes one cell; unless ``fast_forward``, main changes another after the
    fork. Returns the rows main should read after merging ``a``."""
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    want = with_values(BASE, 0, {1: "A1"})
    if not fast_forward:
        set_col(t, "y", {2: 22.0})
        want = with_values(want, 1, {2: 22.0})
    return want


@pytest.mark.parametrize("fast_forward", [True, False])
def test_target_writer_of_a_merged_cell_never_overwrites_it(
    t: omnitable.Table, race: Race, fast_forward: bool
) -> None:
    """A writer on main planned before the merge updates the cell the merge brings: it must not
    commit its stale file over the merged one (it conflicts, or plans again on top)."""
    want = _fork_with_change(t, fast_forward)
    merged: list[Any] = []
    out = race(
        "update.before_commit",
        lambda: set_col(t, "s", {3: "M3"}),
        lambda: merged.append(t.merge("a")),
    )
    assert merged[0].fast_forward == fast_forward
    if "error" in out:
        assert isinstance(out["error"], omnitable.CommitConflict), out
    else:
        want = with_values(want, 0, {3: "M3"})
    assert rows(t) == want


def test_a_target_that_keeps_moving_fails_the_merge_cleanly(t: omnitable.Table) -> None:
    """Main takes a commit before every one of the merge's commits: after 5 plans the merge
    raises CommitConflict, commits nothing, and every racing commit is kept."""
    a = _three_way_setup(t)
    moved: list[float] = []
    with ExitStack() as stack:

        def keep_moving() -> None:
            moved.append(float(len(moved)))
            set_col(t, "y", {9: moved[-1]})
            stack.enter_context(hooked(POINT, keep_moving))  # again at the next plan

        stack.enter_context(hooked(POINT, keep_moving))
        with pytest.raises(omnitable.CommitConflict, match="moved") as info:
            t.merge("a")
    assert not isinstance(info.value, MergeConflict)
    assert len(moved) == 5  # one racing commit per plan (5 plans)
    assert [c.op for c in t.history()][:5] == ["update"] * 5
    assert rows(t) == with_values(BASE, 1, {2: 22.0, 9: moved[-1]})
    assert t.merge("a").cells == 1  # then it merges
    assert rows(t) == with_values(with_values(BASE, 0, {1: "A1"}), 1, {2: 22.0, 9: 4.0})
    assert rows(a) == with_values(BASE, 0, {1: "A1"})


@pytest.mark.parametrize("fast_forward", [True, False])
def test_the_same_merge_twice_at_once(t: omnitable.Table, race: Race, fast_forward: bool) -> None:
    """Two merges of a into main at once: one commits, the other plans again and finds
    nothing new (it commits nothing)."""
    want = _fork_with_change(t, fast_forward)
    second: list[Any] = []
    out = race(POINT, lambda: t.merge("a"), lambda: second.append(t.merge("a")))
    assert second[0].fast_forward == fast_forward and second[0].version == t.version
    assert "error" not in out, out
    assert out["version"].version is None
    assert rows(t) == want
    assert [c.op for c in t.history()].count("merge") == (0 if fast_forward else 1)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_source_deleted_during_a_merge(t: omnitable.Table, fast_forward: bool) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    if not fast_forward:
        set_col(t, "y", {2: 22.0})
    before = head_state(t)
    with hooked(POINT, lambda: t.delete_branch("a")), pytest.raises(omnitable.NotFoundError):
        t.merge("a")
    assert head_state(t) == before
    assert [r.name for r in t.branches()] == ["main"]


def test_two_branches_merged_at_once(t: omnitable.Table, race: Race) -> None:
    """a and b both fork from main's head: each could fast-forward alone. b's merge lands while
    a's waits to commit; a's plans again (three-way) and both branches' changes show."""
    a, b = t.create_branch("a"), t.create_branch("b")
    set_col(a, "s", {1: "A1"})
    delete_x(a, 6)
    set_col(b, "y", {1: 11.0})
    b.append(new_rows([30], "b"), "from_b")
    second: list[Any] = []
    out = race(POINT, lambda: t.merge("a"), lambda: second.append(t.merge("b")))
    assert second[0].fast_forward
    assert "error" not in out, out
    assert not out["version"].fast_forward and out["version"].version == t.version
    want = without(with_values(with_values(BASE, 0, {1: "A1"}), 1, {1: 11.0}), 6)
    assert rows(t) == want | {30: ("b30", 30.0)}


CHILD = textwrap.dedent("""
    import sys
    import omnitable
    uri, root, name = sys.argv[1:]
    omnitable.connect(uri, root=root or None).table(name).merge("a")
    print("committed", flush=True)
""")


@pytest.mark.parametrize(
    "point", ["commit.mid_insert", "fast_forward.mid_update"], ids=["three-way", "fast-forward"]
)
def test_a_merge_killed_mid_commit_leaves_both_branches_as_they_were(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], name: str, point: str
) -> None:
    """The merging process dies inside its transaction (after some of its rows were written):
    main and the source read, version and list their history as before, and the merge then
    goes through."""
    uri, root = catalog_spec
    t = make_table(wh, name)
    fast_forward = point.startswith("fast_forward")
    want = _fork_with_change(t, fast_forward)
    a = t.branch("a")
    state = {n: (rows(x), x.version, x.history()) for n, x in (("main", t), ("a", a))}
    env = dict(os.environ, OMNITABLE_FAILPOINTS=f"{point}=exit",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, uri, root or "", name],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 77, proc.stderr[-3000:]
    assert "committed" not in proc.stdout
    assert {n: (rows(x), x.version, x.history()) for n, x in (("main", t), ("a", a))} == state
    assert t.merge("a").fast_forward == fast_forward
    assert rows(t) == want
