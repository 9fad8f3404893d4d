"""Reverting on keyed tables (SQLite and PostgreSQL, ``wh``), racing upserts: an upsert of a key
the revert brings back, committed while the revert commits, makes it conflict and apply nothing;
an upsert of other keys only makes it check again. (Reverts without a racer:
``test_upsert.py``.)"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable._failpoints import hooked

_names = itertools.count()
_TAKEN = r"bring back 1 row\(s\) whose keys live rows hold again \(e\.g\. key '[bc]',"


def _keyed(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(f"k{next(_names)}", {"url": "string", "label": "bigint"}, key="url")
    t.upsert(pa.table({"url": ["a", "b", "c"], "label": [1, 2, 3]}))
    return t


def _state(t: omnitable.Table) -> list[tuple[str, int]]:
    return sorted((r["url"], r["label"]) for r in t.read(["url", "label"]).to_pylist())


def test_reverting_a_delete_brings_the_row_and_its_key_back(wh: omnitable.Warehouse) -> None:
    t = _keyed(wh)
    deleted = t.delete(pc.field("url") == "b").version
    assert deleted is not None and t.lookup(["b"]).num_rows == 0
    t.revert(deleted)
    assert _state(t) == [("a", 1), ("b", 2), ("c", 3)]
    assert t.lookup(["b"], ["label"]).to_pylist() == [{"label": 2}]
    merged = t.upsert(pa.table({"url": ["b"], "label": [20]}))  # the key is live again: merged
    assert (merged.inserted, merged.merged) == (0, 1)


def test_an_upsert_of_the_key_committing_during_the_revert_makes_it_conflict(
    wh: omnitable.Warehouse,
) -> None:
    t = _keyed(wh)
    deleted = t.delete(pc.field("url") == "c").version
    assert deleted is not None
    racer = wh.table(t.name)
    with (
        hooked(
            "revert.before_commit", lambda: racer.upsert(pa.table({"url": ["c"], "label": [30]}))
        ),
        pytest.raises(omnitable.CommitConflict, match=_TAKEN),
    ):
        t.revert(deleted)
    assert _state(t) == [("a", 1), ("b", 2), ("c", 30)]
    assert t.lookup(["c"], ["label"]).to_pylist() == [{"label": 30}]


def test_a_revert_racing_an_unrelated_upsert_commits(wh: omnitable.Warehouse) -> None:
    t = _keyed(wh)
    deleted = t.delete(pc.field("url") == "c").version
    assert deleted is not None
    racer = wh.table(t.name)
    with hooked(
        "revert.before_commit", lambda: racer.upsert(pa.table({"url": ["d"], "label": [4]}))
    ):
        t.revert(deleted)
    assert _state(t) == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    assert t.lookup(["d", "c"], ["url"]).column("url").to_pylist() == ["d", "c"]
