"""Branches under concurrency, on SQLite and PostgreSQL (``wh``): commits on different branches
never conflict; a commit racing the deletion (and re-creation) of its branch lands before it or
fails with NotFoundError, never on the new branch; a writer killed mid-commit on a branch leaves
every branch as it was; a branch created at the head while a commit is under way sees all of
that commit or none of it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable.exceptions import NotFoundError

from .common import base_table, batch, rows

Race = Callable[[str, Callable[[], Any], Callable[[], Any]], dict[str, Any]]


def test_commits_on_different_branches_never_conflict(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    main_before = rows(t)
    left, right = t.create_branch("left"), t.create_branch("right")
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def work(b: omnitable.Table, base: int) -> None:
        try:
            start.wait()
            for i in range(6):
                b.append(batch(f"{b.current_branch}{i}", [base + i]), f"{b.current_branch}{i}")
                if i % 2:
                    b.delete(pc.field("x") == i)  # an inherited row
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(b, n)) for b, n in ((left, 100), (right, 200))]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert errors == []
    for b, base in ((left, 100), (right, 200)):
        want = [r["x"] for r in main_before if r["x"] not in (1, 3, 5)] + list(
            range(base, base + 6)
        )
        assert sorted(r["x"] for r in rows(b)) == sorted(want)
        assert len(b.history()) == len(t.history()) + 9
    assert rows(t) == main_before


WRITES: dict[str, tuple[str, Callable[[omnitable.Table], Any]]] = {
    "append": ("append.before_commit", lambda b: b.append(batch("late", [70]), "late")),
    "delete": ("delete.before_commit", lambda b: b.delete(pc.field("x") == 11)),
    "update": (
        "update.before_commit",
        lambda b: b.update(pa.table({ROW_ID: pa.array([1], pa.int64()), "s": ["late"]})),
    ),
    "add_columns": (
        "add_columns.before_commit",
        lambda b: b.add_columns(pa.table({ROW_ID: pa.array([1], pa.int64()), "late": ["late"]})),
    ),
}


def _traces(t: omnitable.Table) -> list[Any]:
    """Whatever a ``WRITES`` writer would leave on ``t``."""
    got = rows(t)
    return [r for r in got if r[APPEND_NAME] == "late" or r["s"] == "late" or "late" in r] + (
        [] if 11 in {r["x"] for r in got} else ["row 11 deleted"]
    )


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "recreated"])
@pytest.mark.parametrize("kind", list(WRITES))
def test_a_commit_racing_the_deletion_of_its_branch(
    wh: omnitable.Warehouse, race: Race, kind: str, recreate: bool
) -> None:
    """The writer has read the branch and is about to commit when the branch is deleted (and,
    with ``recreate``, made again after main moved on): it fails with NotFoundError and its
    change shows nowhere. The appending and updating writers' branch has a commit of its own;
    the others' has none (they read it at its fork, a version of main)."""
    t = base_table(wh)
    b = t.create_branch("exp")
    if kind in ("append", "update"):
        b.append(batch("e", [50]), "e")
    point, write = WRITES[kind]

    def delete() -> None:
        t.delete_branch("exp")
        if recreate:
            t.append(batch("m", [60]), "m")
            t.append(batch("m2", [61]), "m2")
            t.create_branch("exp")

    main_before = rows(t)
    out = race(point, lambda: write(b), delete)
    assert isinstance(out.get("error"), NotFoundError), out
    assert "exp" in str(out["error"])
    assert rows(t) == main_before if not recreate else _traces(t) == []
    if recreate:
        assert rows(t.branch("exp")) == rows(t) and _traces(t.branch("exp")) == []
    else:
        assert [r.name for r in t.branches()] == ["main"]


def test_a_commit_that_holds_the_lock_lands_before_the_deletion(
    wh: omnitable.Warehouse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer is inside its commit transaction (table lock held) when delete_branch starts:
    the commit lands, then the deletion moves it aside with the branch; a new branch of that
    name does not see it."""
    t = base_table(wh)
    b = t.create_branch("exp")
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"commit.before_end=pause:{gate}")
    out: dict[str, Any] = {}

    def run(key: str, fn: Callable[[], Any]) -> threading.Thread:
        def go() -> None:
            try:
                out[key] = fn()
            except Exception as exc:
                out[key] = exc

        th = threading.Thread(target=go)
        th.start()
        return th

    writer = run("append", lambda: b.append(batch("late", [70]), "late"))
    while not (gate / "commit.before_end.reached").exists():
        assert writer.is_alive(), out
        time.sleep(0.02)
    deleter = run("delete", lambda: t.delete_branch("exp"))
    (gate / "commit.before_end.go").touch()
    writer.join(120)
    deleter.join(120)
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert isinstance(out["append"], int) and out["delete"] is None, out
    assert [r.name for r in t.branches()] == ["main"]
    fresh = t.create_branch("exp")
    assert rows(fresh) == rows(t) and 70 not in {r["x"] for r in rows(fresh)}


CHILD = textwrap.dedent("""
    import importlib, sys
    import omnitable
    races = importlib.import_module(sys.argv[1])  # this module (tests/ is on the path)
    uri, root, kind = sys.argv[2:]
    races.write_on_exp(omnitable.connect(uri, root=root or None).table("t"), kind)
    print("committed", flush=True)
""")


def write_on_exp(t: omnitable.Table, kind: str) -> None:
    """One commit of writer ``kind`` on branch ``exp`` of ``t`` (in the child, then again in
    the test)."""
    b = t.branch("exp")
    if kind == "append":
        b.append(batch("late", [70]), "late")
    elif kind == "delete":
        b.delete(ids=[1, 7])
    elif kind == "update":
        b.update(pa.table({ROW_ID: pa.array([1], pa.int64()), "s": ["late"]}))
    elif kind == "rename":
        b.rename_column("s", "late")
    else:
        b.rollback(1)


@pytest.mark.parametrize("kind", ["append", "delete", "update", "rename", "rollback"])
def test_a_writer_killed_mid_commit_on_a_branch(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], kind: str
) -> None:
    uri, root = catalog_spec
    t = base_table(wh)
    b = t.create_branch("exp")
    b.delete(ids=[0])  # the branch owns a commit, and inherits main's rows
    state = {n: (rows(x), x.version, x.history()) for n, x in (("main", t), ("exp", b))}
    env = dict(os.environ, OMNITABLE_FAILPOINTS="commit.mid_insert=exit",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, __name__, uri, root or "", kind],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 77, proc.stderr[-3000:]
    assert "committed" not in proc.stdout
    assert {n: (rows(x), x.version, x.history()) for n, x in (("main", t), ("exp", b))} == state
    write_on_exp(t, kind)  # the branch still takes the same commit
    assert b.version == state["exp"][1] + 1 and rows(b) != state["exp"][0]
    assert (rows(t), t.version, t.history()) == state["main"]


@pytest.mark.parametrize("held", [False, True], ids=["before_commit", "in_commit"])
def test_a_branch_created_at_the_head_sees_a_whole_commit_or_none(
    wh: omnitable.Warehouse, race: Race, held: bool, tmp_path: Path
) -> None:
    """An update of rows in every fragment races ``create_branch``: paused before its commit
    (no lock), the branch forks before it; paused inside it (lock held), the fork waits for it
    and sees all of it."""
    t = base_table(wh)
    before = rows(t)
    ids = [r[ROW_ID] for r in before]
    data = pa.table({ROW_ID: pa.array(ids, pa.int64()), "s": [f"new{i}" for i in ids]})
    made: dict[str, omnitable.Table] = {}
    if not held:
        out = race("update.before_commit", lambda: t.update(data),
                   lambda: made.setdefault("b", t.create_branch("exp")))  # fmt: skip
        assert rows(made["b"]) == before
    else:
        out = _create_while_committing(t, data, made, tmp_path)
        assert rows(made["b"]) == rows(t) == [{**r, "s": f"new{r[ROW_ID]}"} for r in before]
    assert "error" not in out, out
    assert made["b"].branches()[0].name == "exp"


def _create_while_committing(
    t: omnitable.Table, data: pa.Table, made: dict[str, omnitable.Table], tmp_path: Path
) -> dict[str, Any]:
    gate = tmp_path / f"gate-{uuid.uuid4().hex[:8]}"
    gate.mkdir()
    os.environ["OMNITABLE_FAILPOINTS"] = f"commit.mid_insert=pause:{gate}"
    out: dict[str, Any] = {}
    try:
        writer = threading.Thread(target=lambda: out.setdefault("version", t.update(data)))
        writer.start()
        while not (gate / "commit.mid_insert.reached").exists():
            assert writer.is_alive(), out
            time.sleep(0.02)
        creator = threading.Thread(target=lambda: made.setdefault("b", t.create_branch("exp")))
        creator.start()
        (gate / "commit.mid_insert.go").touch()
        writer.join(120)
        creator.join(120)
    finally:
        del os.environ["OMNITABLE_FAILPOINTS"]
    return out
