"""Branch and tag lifecycle (docs/branches.md) on SQLite and PostgreSQL (``wh``): creating refs
from every kind of source, listing and deleting them, the zero-copy fork, bad input, the
feature registrations of a branch, and what happens to a deleted branch."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import inspect, text

import omnitable
from omnitable.exceptions import AlreadyExistsError, NotFoundError, ValidationError

from .common import base_table, batch, rows

LEN = omnitable.sql_feature("x_len", "length(s)", "int", "1")


def catalog_counts(wh: omnitable.Warehouse) -> dict[str, int]:
    """Row count of every catalog table."""
    with wh.catalog.store.read() as conn:
        names = inspect(conn).get_table_names()
        return {n: int(conn.execute(text(f"SELECT count(*) FROM {n}")).scalar_one()) for n in names}


def listing(t: omnitable.Table) -> list[tuple[str, int]]:
    root = Path(t.location.path)
    return sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*"))


def names(refs: list[Any]) -> list[str]:
    return [r.name for r in refs]


def test_create_from_head_version_branch_and_tag(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)  # v0 create, v1 b1, v2 b2
    a = t.create_branch("a")
    assert (a.current_branch, t.current_branch) == ("a", "main")
    assert "branch='a'" in repr(a) and "branch" not in repr(t)
    t.append(batch("m3", [300]), "m3")  # v3 on main
    old = t.create_branch("old", 1)
    assert rows(old) == rows(t, version=1) and old.version == 1
    v4 = a.append(batch("a4", [400, 401]), "a4")
    v5 = a.delete(ids=[0]).version
    before = t.create_branch("c_before", 2, from_branch="a")  # before a's own commits
    mid = a.create_branch("c_mid", v4)
    head = t.create_branch("c_head", from_branch="a")
    assert rows(before) == rows(t, version=2) and rows(mid) == rows(a, version=v4)
    assert rows(head) == rows(a) and 400 in [r["x"] for r in rows(mid)]
    tag = a.create_tag("a_tag")
    assert (tag.kind, tag.version, tag.parent, tag.fork_version) == ("tag", v5, "a", None)
    from_tag = t.create_branch("ft", from_tag="a_tag")
    assert rows(from_tag) == rows(a) == rows(t, tag="a_tag")
    refs = {r.name: r for r in t.branches()}
    assert list(refs) == ["a", "c_before", "c_head", "c_mid", "ft", "main", "old"]
    want = {"main": (t.version, None, None), "a": (v5, "main", 2), "old": (1, "main", 1),
            "c_before": (2, "main", 2), "c_mid": (v4, "a", v4), "c_head": (v5, "a", v5),
            "ft": (v5, "a", v5)}  # fmt: skip
    assert {n: (r.version, r.parent, r.fork_version) for n, r in refs.items()} == want
    assert all(r.kind == "branch" and r.max_age_s is None for r in refs.values())
    assert t.branch("a").current_branch == "a" and rows(t.branch("a")) == rows(a)
    assert t.branch("main").current_branch == "main"
    kept = t.create_tag("kept", 1, max_age=dt.timedelta(hours=1))
    created = dt.datetime.fromisoformat(kept.created_at.replace("Z", "+00:00"))
    assert kept.max_age_s == 3600 and kept.expires_at is not None
    expires = dt.datetime.fromisoformat(kept.expires_at.replace("Z", "+00:00"))
    assert expires - created == dt.timedelta(hours=1)
    assert [(r.name, r.version, r.parent) for r in t.tags()] == [
        ("a_tag", v5, "a"), ("kept", 1, "main")
    ]  # fmt: skip
    assert t.tags()[0].expires_at is None and t.create_tag("secs", max_age=90).max_age_s == 90
    t.delete_tag("kept")
    assert names(t.tags()) == ["a_tag", "secs"] and rows(t, version=1) == rows(old)
    for name in ("ft", "c_head", "c_mid", "c_before", "old"):
        t.delete_branch(name)
    t.delete_tag("a_tag")
    t.delete_branch("a")
    assert names(t.branches()) == ["main"]


def test_creating_a_branch_copies_nothing(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    t.delete(ids=[1])
    counts, files = catalog_counts(wh), listing(t)
    t.create_branch("exp")
    after = catalog_counts(wh)
    assert after == {**counts, "refs": counts["refs"] + 1}
    assert listing(t) == files
    t.create_branch("exp2", 1)
    t.create_tag("tg")
    assert catalog_counts(wh) == {**counts, "refs": counts["refs"] + 3}
    assert listing(t) == files


BAD_NAMES: list[Any] = ["a/b", "a.b", "", " x", "x'y", "123", "a" * 101, "a b", "x;--", 7, None]


@pytest.mark.parametrize("bad", BAD_NAMES, ids=repr)
def test_invalid_names_are_refused(tmp_path: Path, bad: Any) -> None:
    with omnitable.connect(str(tmp_path / "wh")) as wh:
        t = base_table(wh)
        t.create_tag("tg")
        calls = [
            lambda: t.create_branch(bad), lambda: t.create_tag(bad), lambda: t.branch(bad),
            lambda: t.delete_branch(bad), lambda: t.delete_tag(bad),
        ]  # fmt: skip
        if bad is not None:  # None is the default source: this table's branch, no tag
            calls.append(lambda: t.create_branch("ok", from_branch=bad))
            calls.append(lambda: t.create_branch("ok", from_tag=bad))
        for call in calls:
            with pytest.raises(ValidationError, match="name"):
                call()
        assert names(t.branches()) == ["main"] and names(t.tags()) == ["tg"]
        assert t.create_branch("a" * 100).current_branch == "a" * 100
        assert t.create_branch("1a_-Z").current_branch == "1a_-Z"


def test_duplicates_and_unknown_sources(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    b = t.create_branch("exp")
    b.append(batch("e", [50]), "e")
    main_v = t.append(batch("m", [60]), "m")
    t.create_tag("tg")
    refused: list[tuple[type[Exception], str, Any]] = [
        (AlreadyExistsError, "a branch of that name", lambda: t.create_branch("exp")),
        (AlreadyExistsError, "a tag of that name", lambda: t.create_branch("tg")),
        (AlreadyExistsError, "a branch of that name", lambda: t.create_tag("exp")),
        (AlreadyExistsError, "a branch of that name", lambda: t.create_tag("main")),
        (AlreadyExistsError, "a tag of that name", lambda: t.create_tag("tg")),
        (NotFoundError, "nope", lambda: t.create_branch("x", from_branch="nope")),
        (NotFoundError, "nope", lambda: t.create_branch("x", from_tag="nope")),
        (NotFoundError, "tag 'exp'", lambda: t.create_branch("x", from_tag="exp")),
        (NotFoundError, "version", lambda: t.create_branch("x", 999)),
        (NotFoundError, "version", lambda: b.create_branch("x", main_v)),  # not in exp's history
        (NotFoundError, "version", lambda: b.create_tag("x", main_v)),
        (NotFoundError, "version", lambda: t.create_tag("x", 999)),
        (NotFoundError, "nope", lambda: t.branch("nope")),
        (NotFoundError, "branch 'tg'", lambda: t.branch("tg")),
        (ValidationError, "from_tag", lambda: t.create_branch("x", 1, from_tag="tg")),
        (
            ValidationError,
            "from_tag",
            lambda: t.create_branch("x", from_branch="exp", from_tag="tg"),
        ),
        (ValidationError, "version", lambda: t.create_branch("x", "1")),  # type: ignore[arg-type]
        (ValidationError, "version", lambda: t.create_tag("x", 1.5)),  # type: ignore[arg-type]
        (ValidationError, "version", lambda: t.create_tag("x", True)),
    ]
    for age in (0, -5, 0.5, "10", True, dt.timedelta(0), dt.timedelta(seconds=-1)):
        refused.append((ValidationError, "max_age", lambda age=age: t.create_tag("x", max_age=age)))
    branches, tags = t.branches(), t.tags()
    for exc, match, call in refused:
        with pytest.raises(exc, match=match):
            call()
    assert t.branches() == branches and t.tags() == tags


def test_delete_rules(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    exp = t.create_branch("exp")
    exp.append(batch("e", [50]), "e")
    exp.create_branch("child")
    exp.create_tag("pin")
    t.create_tag("main_pin")
    with pytest.raises(ValidationError, match="Cannot delete branch 'main'"):
        t.delete_branch("main")
    with pytest.raises(NotFoundError, match="nope"):
        t.delete_branch("nope")
    with pytest.raises(NotFoundError):
        t.delete_branch("pin")  # a tag
    with pytest.raises(NotFoundError):
        t.delete_tag("exp")  # a branch
    with pytest.raises(NotFoundError):
        t.delete_tag("nope")
    with pytest.raises(ValidationError, match="branch 'child', tag 'pin' are based on it"):
        t.delete_branch("exp")
    t.delete_branch("child")
    with pytest.raises(ValidationError, match="tag 'pin'"):
        t.delete_branch("exp")
    assert names(t.branches()) == ["exp", "main"] and rows(exp)[-1]["x"] == 50
    t.delete_tag("pin")
    t.delete_branch("exp")
    assert names(t.branches()) == ["main"] and names(t.tags()) == ["main_pin"]


def test_a_feature_registered_on_a_branch_stays_on_it(wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    b = t.create_branch("exp")
    v = b.register(LEN)
    assert v is not None and [f.name for f in b.features()] == ["x_len"]
    assert t.features() == [] and "x_len" not in t.schema.names  # main never sees it
    assert "x_len" in b.schema.names
    other = t.create_branch("other")  # a branch of main does not see it either
    assert other.features() == []
    t.register(omnitable.sql_feature("x_len", "length(s) + 1", "int", "1"))  # main's own
    assert [f.name for f in t.features()] == ["x_len"]
    assert b.features()[0].expr != t.features()[0].expr


def test_undoing_a_registration_on_a_branch_leaves_main_registered(
    wh: omnitable.Warehouse,
) -> None:
    t = base_table(wh)
    registered = t.register(LEN)
    assert registered is not None
    b = t.create_branch("exp")
    b.delete(ids=[0])
    b.rollback(registered - 1)  # before main's registration: gone on the branch only
    assert b.features() == [] and "x_len" not in b.schema.names
    assert [f.name for f in t.features()] == ["x_len"] and "x_len" in t.schema.names
    c = t.create_branch("exp2")
    c.revert(registered)  # undo main's registration on the branch
    assert c.features() == [] and [f.name for f in t.features()] == ["x_len"]
    b.rollback(registered)  # back to the fork's state: registered again on the branch
    assert rows(b) == rows(t) and [f.name for f in b.features()] == ["x_len"]


def test_a_deleted_branch_takes_no_commit_and_its_name_starts_afresh(
    wh: omnitable.Warehouse,
) -> None:
    t = base_table(wh)
    b = t.create_branch("exp")
    b.append(batch("e", [50]), "e")
    stale = t.branch("exp")
    t.delete_branch("exp")
    counts = catalog_counts(wh)
    writes = [
        lambda: stale.append(batch("late", [70]), "late"),
        lambda: stale.delete(ids=[0]),
        lambda: stale.update(pa.table({"_ai_unique_id_": pa.array([0], pa.int64()), "s": ["z"]})),
        lambda: stale.add_columns(
            pa.table({"_ai_unique_id_": pa.array([0], pa.int64()), "n": [1]})
        ),
        lambda: stale.rename_column("x", "y"),
        lambda: stale.rollback(1),
    ]
    for write in writes:
        with pytest.raises(NotFoundError, match="exp"):
            write()
    assert catalog_counts(wh) == counts
    with pytest.raises(NotFoundError):
        stale.read()
    t.append(batch("m", [60]), "m")
    fresh = t.create_branch("exp")
    assert rows(fresh) == rows(t) and 50 not in [r["x"] for r in rows(fresh)]
    assert "e" not in {x.name for x in fresh.batches()}
    assert [h.version for h in fresh.history()] == [h.version for h in t.history()]
