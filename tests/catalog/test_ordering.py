"""Catalog order, not wall clocks: the current feature version, commit timestamps, and
registrations validated against concurrent registrations."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from sqlalchemy import text

import omnitable
from omnitable.context import TableContext
from omnitable.features.registry import table_graph


def _sql(name: str, expr: str, version: str) -> Any:
    return omnitable.sql_feature(name, expr, "double", version)


def test_current_feature_version_follows_commit_order_not_clock(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("t", {"a": "double"})
    t.register(_sql("f", "a + 1", "1"))
    t.register(_sql("f", "a + 2", "2"))
    # the second registration was made on a host whose clock is far behind
    with wh.catalog.store.write() as conn:
        conn.execute(
            text(
                "UPDATE features SET registered_at = '2000-01-01T00:00:00.000000Z' WHERE version = '2'"
            )
        )
    assert [f.version for f in t.features()] == ["2"]


def test_commit_time_never_goes_back(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("t", {"a": "double"})
    t.append(pa.table({"a": [1.0]}), "b1")
    ahead = "2999-01-01T00:00:00.000000Z"  # written by a host whose clock is far ahead
    with wh.catalog.store.write() as conn:
        conn.execute(text("UPDATE commits SET committed_at = :at WHERE version = 1"), {"at": ahead})
    t.append(pa.table({"a": [2.0]}), "b2")
    times = [c.time for c in reversed(t.history())]
    assert times == sorted(times)
    assert times[-1] == ahead


def test_concurrent_registrations_cannot_form_a_cycle(wh: omnitable.Warehouse, race: Any) -> None:
    t = wh.create_table("t", {"a": "double"})
    t.register(_sql("f", "a + 1", "1"), _sql("g", "a + 2", "1"))
    out = race(
        "register.before_commit",
        lambda: t.register(_sql("f", "g + 1", "2")),  # f reads g
        lambda: t.register(_sql("g", "f + 1", "2")),  # g reads f: valid against f@1
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "g@2" in str(out["error"])
    graph = table_graph(TableContext.of(t.warehouse, t.record))  # still acyclic
    assert {f.name: f.version for f in t.features()} == {"f": "1", "g": "2"}
    assert graph is not None
