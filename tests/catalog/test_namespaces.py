"""Namespaces in the Python API (docs/tables.md, "Namespaces"), on SQLite and PostgreSQL:
create/list/drop, ``ns.table`` addresses, the default namespace, and bad input."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.exceptions import AlreadyExistsError, NotFoundError, ValidationError


def _dirs(wh: omnitable.Warehouse) -> set[str]:
    root = Path(wh.root.path)
    return {p.name for p in root.iterdir() if p.is_dir()} if root.exists() else set()


def test_default_namespace_holds_tables_named_without_one(wh: omnitable.Warehouse) -> None:
    assert wh.namespaces() == ["default"]
    t = wh.create_table("web", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2]}), "a")
    assert wh.table("default.web").record.table_id == t.record.table_id
    assert wh.table("default.web").name == "web"
    assert wh.tables() == ["web"] and wh.tables(namespace="default") == ["web"]
    with pytest.raises(AlreadyExistsError, match="'web': it already exists"):
        wh.create_table("default.web", {"x": "bigint"})
    assert wh.table("web").read(["x"])["x"].to_pylist() == [1, 2]


def test_create_list_and_drop_namespaces(wh: omnitable.Warehouse) -> None:
    wh.create_namespace("ns", {"comment": "web crawl", "owner": "data"})
    wh.create_namespace("a")
    assert wh.namespaces() == ["a", "default", "ns"]
    assert wh.catalog.namespace_properties("ns") == {"comment": "web crawl", "owner": "data"}
    with pytest.raises(AlreadyExistsError, match="namespace 'ns': it already exists"):
        wh.create_namespace("ns")
    wh.create_namespace("ns", if_not_exists=True)
    assert wh.tables(namespace="ns") == []
    assert wh.drop_namespace("a") == []
    assert wh.namespaces() == ["default", "ns"]
    with pytest.raises(NotFoundError, match="Cannot drop namespace 'a': no such namespace"):
        wh.drop_namespace("a")
    with pytest.raises(ValidationError, match="Cannot drop namespace 'default'"):
        wh.drop_namespace("default", cascade=True)
    assert wh.namespaces() == ["default", "ns"]


def test_same_table_name_in_two_namespaces_holds_different_data(wh: omnitable.Warehouse) -> None:
    wh.create_namespace("a")
    wh.create_namespace("b")
    tables = {name: wh.create_table(name, {"x": "bigint"}) for name in ("web", "a.web", "b.web")}
    for i, t in enumerate(tables.values()):
        t.append(pa.table({"x": list(range(i + 1))}), f"batch-{i}")
    assert wh.tables() == ["a.web", "b.web", "web"]
    assert wh.tables(namespace="a") == ["a.web"]
    assert wh.table("a.web").name == "a.web" and wh.table("a.web").record.namespace == "a"
    assert wh.table("web").read(["x"])["x"].to_pylist() == [0]
    assert wh.table("a.web").read(["x"])["x"].to_pylist() == [0, 1]
    assert wh.table("b.web").read(["x"])["x"].to_pylist() == [0, 1, 2]
    assert [b.name for b in wh.table("b.web").batches()] == ["batch-2"]
    locations = {wh.table(n).record.location for n in tables}
    assert len(locations) == 3 and any(loc.startswith("a.web-") for loc in locations)
    wh.drop_table("a.web")
    assert wh.tables() == ["b.web", "web"]
    assert wh.table("b.web").read(["x"])["x"].to_pylist() == [0, 1, 2]
    assert wh.table("web").count() == 1


def test_missing_namespace_is_a_clear_error_and_creates_nothing(wh: omnitable.Warehouse) -> None:
    wh.create_table("web", {"x": "bigint"})
    before = (_dirs(wh), wh.tables(), wh.namespaces())
    with pytest.raises(NotFoundError) as info:
        wh.create_table("nope.web", {"x": "bigint"})
    assert "Cannot create table 'nope.web' in namespace 'nope': no such namespace" in str(
        info.value
    )
    assert "create_namespace('nope')" in str(info.value)
    assert (_dirs(wh), wh.tables(), wh.namespaces()) == before
    with pytest.raises(NotFoundError, match=r"'nope.web' \(namespace 'nope' does not exist\)"):
        wh.table("nope.web")
    with pytest.raises(NotFoundError, match="list the tables of namespace 'nope'"):
        wh.tables(namespace="nope")


@pytest.mark.parametrize(
    "call",
    [
        lambda wh: wh.create_namespace("a.b"),
        lambda wh: wh.create_namespace("a-b"),
        lambda wh: wh.create_namespace(""),
        lambda wh: wh.create_namespace("x" * 129),
        lambda wh: wh.create_namespace("ok", {"k": object()}),
        lambda wh: wh.create_table("a.b.c", {"x": "bigint"}),
        lambda wh: wh.create_table(".web", {"x": "bigint"}),
        lambda wh: wh.create_table("ns.", {"x": "bigint"}),
        lambda wh: wh.table("a b.web"),
        lambda wh: wh.tables(namespace="a.b"),
        lambda wh: wh.drop_namespace("../x"),
    ],
)
def test_invalid_names_are_refused(wh: omnitable.Warehouse, call: Any) -> None:
    with pytest.raises(ValidationError, match="Cannot use (namespace|table)|properties"):
        call(wh)
    assert wh.namespaces() == ["default"] and wh.tables() == []


def test_dropping_a_namespace_that_holds_tables(wh: omnitable.Warehouse) -> None:
    wh.create_namespace("ns")
    for name in ("web", "code"):
        wh.create_table(f"ns.{name}", {"x": "bigint"}).append(pa.table({"x": [1]}), "a")
    wh.create_table("web", {"x": "bigint"}).append(pa.table({"x": [5]}), "a")
    dirs = _dirs(wh)
    with pytest.raises(ValidationError, match=r"holds tables \(ns.code, ns.web\).*cascade"):
        wh.drop_namespace("ns")
    assert wh.namespaces() == ["default", "ns"] and _dirs(wh) == dirs
    assert wh.table("ns.web").count() == 1
    assert wh.drop_namespace("ns", cascade=True) == ["ns.code", "ns.web"]
    assert wh.namespaces() == ["default"] and wh.tables() == ["web"]
    assert _dirs(wh) == {d for d in dirs if not d.startswith("ns.")}
    assert wh.table("web").read(["x"])["x"].to_pylist() == [5]
    with pytest.raises(NotFoundError):
        wh.table("ns.web")
    wh.create_namespace("ns")  # a new namespace of the same name starts empty
    assert wh.tables(namespace="ns") == []
    assert wh.create_table("ns.web", {"x": "bigint"}).count() == 0


def test_create_table_and_drop_namespace_race(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A create_table paused after checking its namespace holds it: a concurrent drop waits,
    then finds the table and is refused; no table is ever left in a dropped namespace."""
    wh.create_namespace("ns")
    point = "catalog.create_table"
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"{point}=pause:{tmp_path}")
    out: dict[str, Any] = {}

    def create() -> None:
        out["table"] = wh.create_table("ns.web", {"x": "bigint"})

    def drop() -> None:
        try:
            out["dropped"] = wh.drop_namespace("ns")
        except Exception as exc:
            out["drop_error"] = exc

    creator = threading.Thread(target=create)
    creator.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / f"{point}.reached").exists():
        assert creator.is_alive() and time.monotonic() < deadline, out
        time.sleep(0.02)
    dropper = threading.Thread(target=drop)
    dropper.start()
    if not wh.catalog.store.is_sqlite:  # wait until the drop is blocked on the namespace row
        while not _waiting_on_lock(wh, "DELETE FROM namespaces"):
            assert dropper.is_alive() and time.monotonic() < deadline, out
            time.sleep(0.02)
    (tmp_path / f"{point}.go").touch()
    creator.join(120)
    dropper.join(120)
    assert isinstance(out.get("drop_error"), ValidationError), out
    assert wh.namespaces() == ["default", "ns"] and wh.tables() == ["ns.web"]


def _waiting_on_lock(wh: omnitable.Warehouse, query: str) -> bool:
    with wh.catalog.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
        ).all()
    return any(query in r[0] for r in rows)
