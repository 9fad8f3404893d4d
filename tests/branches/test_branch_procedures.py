"""``CALL <catalog>.system.<name>(...)`` (docs/spark.md, "Procedures") against the Python API,
on SQLite and PostgreSQL (``wh``) with the shared local session: a branch or tag made by a CALL
is the one Python would have made (``Table.branches()``, ``tags()``, reads, commits on it) and
the other way round; ``delete_branch`` moves a branch's rows aside like ``Table.delete_branch``;
a CALL ``create_tag`` racing a Python commit pins a committed version; every refused CALL
changes nothing; the procedures of the Python engine say what to use instead."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import omnitable
from omnitable import ROW_ID
from omnitable.catalog.refs import Ref
from omnitable.exceptions import NotFoundError
from omnitable.spark.session import CATALOG_CLASS, warehouse_string

from .common import base_table, batch, rows

pytestmark = pytest.mark.spark

Race = Callable[[str, Callable[[], Any], Callable[[], Any]], dict[str, Any]]


def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A fresh Spark catalog name for ``wh`` (the plugin caches its warehouse per name)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse_string(wh))
    return name


def call(spark: Any, sql: str) -> dict[str, Any]:
    out = spark.sql(sql).collect()
    assert len(out) == 1
    result: dict[str, Any] = out[0].asDict()
    return result


def same(ref: Ref) -> tuple[Any, ...]:
    return (ref.name, ref.kind, ref.version, ref.parent, ref.fork_version, ref.max_age_s)


def refs_state(t: omnitable.Table) -> tuple[list[Ref], list[Ref]]:
    return t.branches(), t.tags()


def test_refs_made_by_call_are_python_refs_and_back(spark: Any, wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    c = catalog(spark, wh)
    made = call(spark, f"CALL {c}.system.create_branch('t', 'exp')")
    exp = {b.name: b for b in t.branches()}["exp"]
    assert same(exp) == ("exp", "branch", t.version, "main", t.version, None)
    assert (made["name"], made["kind"], made["version"], made["parent"]) == same(exp)[:4]
    assert made["fork_version"] == exp.fork_version and made["created_at"] == exp.created_at
    # Python commits on the branch the JVM created; main does not see them
    b = t.branch("exp")
    b.append(batch("e", [77]), "e")
    assert [r["x"] for r in rows(b)][-1] == 77 and 77 not in [r["x"] for r in rows(t)]
    # a tag by name, on that branch, with a retention as an interval
    tag = call(
        spark,
        f"CALL {c}.system.create_tag(tag => 'pin', table => 't', branch => 'exp', max_age => '1 day')",
    )
    (pin,) = t.tags()
    assert same(pin) == ("pin", "tag", b.version, "exp", None, 86400)
    assert tag["expires_at"] == pin.expires_at
    assert rows(t, tag="pin") == rows(b)
    # the same tag made by Python has the same row
    py_tag = t.branch("exp").create_tag("pin2", max_age=dt.timedelta(days=1))
    assert same(py_tag)[2:] == same(pin)[2:]
    # Python's refs are deleted by CALL; the JVM's by Python
    t.create_branch("py_branch", from_version=t.version - 1)
    gone = call(spark, f"CALL {c}.system.delete_branch('t', 'py_branch')")
    assert gone["name"] == "py_branch" and "py_branch" not in {r.name for r in t.branches()}
    call(spark, f"CALL {c}.system.delete_tag('t', 'pin2')")
    t.delete_tag("pin")
    assert t.tags() == []
    t.delete_branch("exp")
    assert [r.name for r in t.branches()] == ["main"]


def test_delete_branch_by_call_moves_rows_aside_like_python(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    t = base_table(wh)
    c = catalog(spark, wh)
    for name in ("by_call", "by_python"):
        b = t.create_branch(name)
        b.append(batch(name, [100, 101]), name)
        b.delete(ids=[rows(t)[0][ROW_ID]])
    call(spark, f"CALL {c}.system.delete_branch(branch => 'by_call', table => 't')")
    t.delete_branch("by_python")
    with wh.catalog.store.read() as conn:
        counts = {
            name: conn.execute(
                text("SELECT COUNT(*) FROM commits WHERE branch LIKE :p"),
                {"p": f"~deleted~{name}~%"},
            ).scalar_one()
            for name in ("by_call", "by_python")
        }
        left = conn.execute(
            text("SELECT COUNT(*) FROM batches WHERE branch IN ('by_call', 'by_python')")
        ).scalar_one()
    assert counts == {"by_call": 2, "by_python": 2} and left == 0
    with pytest.raises(NotFoundError):
        t.branch("by_call")
    again = t.create_branch("by_call")  # a new branch of the name starts from its own fork
    assert rows(again) == rows(t)


@pytest.mark.parametrize("held", [False, True], ids=["before_commit", "in_commit"])
def test_a_tag_created_by_call_pins_a_committed_version(
    spark: Any, wh: omnitable.Warehouse, race: Race, held: bool, tmp_path: Path
) -> None:
    """A Python delete races CALL create_tag: paused before its commit (no lock), the tag pins
    the version before it; paused inside it (lock held), the CALL waits for the commit and pins
    it (never a version that is still being written)."""
    t = base_table(wh)
    c = catalog(spark, wh)
    before = t.version
    first = [rows(t)[0][ROW_ID]]
    sql = f"CALL {c}.system.create_tag('t', 'pin')"
    if not held:
        raced = race(
            "delete.before_commit", lambda: t.delete(ids=first), lambda: spark.sql(sql).collect()
        )
        assert "error" not in raced, raced
        assert t.tags()[0].version == before < t.version
        assert rows(t, tag="pin") == rows(t, version=before)
        return
    gate = tmp_path / "gate"
    gate.mkdir()
    os.environ["OMNITABLE_FAILPOINTS"] = f"commit.mid_insert=pause:{gate}"
    out: dict[str, Any] = {}
    try:
        writer = threading.Thread(
            target=lambda: out.setdefault("version", t.delete(ids=first).version)
        )
        writer.start()
        while not (gate / "commit.mid_insert.reached").exists():
            assert writer.is_alive(), out
            time.sleep(0.02)
        tagger = threading.Thread(target=lambda: out.setdefault("tag", call(spark, sql)))
        tagger.start()
        if not wh.catalog.store.is_sqlite:  # the CALL must queue on the table's commit lock
            _wait_for_jvm_lock_wait(wh, tagger)
        (gate / "commit.mid_insert.go").touch()
        writer.join(120)
        tagger.join(120)
    finally:
        del os.environ["OMNITABLE_FAILPOINTS"]
    assert out["tag"]["version"] == out["version"] == t.version > before
    assert rows(t, tag="pin") == rows(t)


def _wait_for_jvm_lock_wait(wh: omnitable.Warehouse, tagger: threading.Thread) -> None:
    """Until the JVM's connection (application ``omnitable-spark``) waits on a PostgreSQL lock:
    the Python commit holds the table's row lock, so a CALL that takes it (``FOR UPDATE``)
    waits; one that read the refs without the lock would finish instead."""
    deadline = time.monotonic() + 120
    query = text(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'omnitable-spark' AND wait_event_type = 'Lock'"
    )
    while True:
        with wh.catalog.store.engine.connect() as conn:
            if conn.execute(query).scalar_one() > 0:
                return
        assert tagger.is_alive(), "the CALL finished while the commit held the table lock"
        assert time.monotonic() < deadline, "the CALL never waited for the table lock"
        time.sleep(0.05)


def test_refused_calls_change_nothing(spark: Any, wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    t.create_tag("keep")
    base = t.create_branch("base")
    base.append(batch("bb", [50]), "bb")  # a commit of its own: its tag is based on it
    base.create_tag("on_base", max_age=60)
    c = catalog(spark, wh)
    state = refs_state(t)
    p = f"{c}.system"
    for sql, message in [
        (f"CALL {p}.create_branch('t', 'keep')", "a tag of that name exists"),
        (f"CALL {p}.create_branch('t', 'nb', 'main', {t.version + 5})", f"version {t.version + 5}"),
        (f"CALL {p}.create_branch('t', 'a.b')", "Invalid branch name 'a.b'"),
        (f"CALL {p}.create_tag('t', 'nt', max_age => -3)", "at least 1 second"),
        (f"CALL {p}.delete_branch('t', 'base')", "tag 'on_base' are based on it"),
        (f"CALL {p}.delete_branch('t', 'main')", "Cannot delete branch 'main'"),
        (f"CALL {p}.delete_tag('t', 'base')", "Cannot find tag 'base'"),
        (f"CALL {p}.create_tag('nosuch', 'nt')", "Cannot find table 'nosuch'"),
        (f"CALL {p}.create_tag(table => 't', name => 'nt')", "name"),
        (f"CALL {p}.drop_branch('t', 'base')", "create_branch, create_tag, delete_branch"),
        (f"CALL {p}.rollback('t', 999)", "give an earlier version"),
        (f"CALL {p}.revert('t', 0)", "it created the table"),
        (f"CALL {p}.merge_branch('t', 'base', 'base')", "Cannot merge branch 'base' into itself"),
        (f"CALL {p}.rebase_branch('t', 'base', strategy => 'mine')", "fail, ours, theirs"),
    ]:
        with pytest.raises(Exception) as err:
            spark.sql(sql).collect()
        assert message in str(err.value), (sql, str(err.value))
        assert refs_state(t) == state, sql
