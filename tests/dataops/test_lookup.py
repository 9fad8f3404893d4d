"""``Table.lookup`` on SQLite and PostgreSQL (``wh``): equal to a filtered read for random key
subsets (missing keys left out, order kept), deleted rows, column subsets, key inputs (lists,
tuples, pyarrow, pandas) and bad input."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import ROW_ID

_names = itertools.count()


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    """Keyed by url u0..u59 (three upserts, so three batches of fragments of 7 rows in row
    groups of 3), x = i, s = s<i>; u7 and u33 deleted."""
    t = wh.create_table(f"l{next(_names)}", {"url": "string", "x": "bigint", "s": "string"},
                        key="url", properties={"write.target_fragment_rows": 7,
                                               "write.row_group_size": 3})  # fmt: skip
    for start in (0, 20, 40):
        xs = list(range(start, start + 20))
        t.upsert(pa.table({"url": [f"u{i}" for i in xs], "x": xs, "s": [f"s{i}" for i in xs]}))
    t.delete(pc.field("url").isin(["u7", "u33"]))
    return t


def test_lookup_equals_a_filtered_read(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    rng = np.random.default_rng(12)
    universe = [f"u{i}" for i in range(70)]  # u60.. are missing, u7 and u33 deleted
    for _ in range(8):
        keys = list(rng.choice(universe, int(rng.integers(0, 25)), replace=False))
        got = t.lookup(keys)
        read = t.read(where=pc.field("url").isin(keys)).to_pylist()
        by_url = {r["url"]: r for r in read}
        assert got.to_pylist() == [by_url[k] for k in keys if k in by_url]
        assert got.schema == t.read().schema
    assert t.lookup(["u7", "u33", "nope"]).num_rows == 0
    assert t.lookup([]).num_rows == 0
    assert len(t.snapshot().fragments) == 9


def test_lookup_columns_and_key_inputs(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    want = [{"s": "s41", "x": 41}, {"s": "s2", "x": 2}]
    assert t.lookup(["u41", "u99", "u2"], ["s", "x"]).to_pylist() == want
    assert t.lookup(pa.table({"url": ["u41", "u2"]}), ["s", "x"]).to_pylist() == want
    assert t.lookup(pd.DataFrame({"url": ["u41", "u2"]}), ["s", "x"]).to_pylist() == want
    assert t.lookup(pa.array(["u41", "u2"]), ["s", "x"]).to_pylist() == want
    ids = t.lookup(["u3"], [ROW_ID, "url"]).to_pylist()
    assert ids == t.read([ROW_ID, "url"], where=pc.field("url") == "u3").to_pylist()


def test_lookup_by_a_key_of_several_columns(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"m{next(_names)}", {"a": "string", "b": "int", "v": "string"},
                        key=["a", "b"])  # fmt: skip
    t.upsert(pa.table({"a": ["p", "p", "q"], "b": [1, 2, 1], "v": ["p1", "p2", "q1"]}))
    assert t.lookup([("q", 1), ("p", 3), ("p", 1)], ["v"]).to_pylist() == [{"v": "q1"},
                                                                            {"v": "p1"}]  # fmt: skip
    frame = pd.DataFrame({"b": [2, 1], "a": ["p", "q"]})
    assert t.lookup(frame, ["v"]).to_pylist() == [{"v": "p2"}, {"v": "q1"}]
    with pytest.raises(omnitable.ValidationError, match="give each key as a tuple of 2 values"):
        t.lookup(["p"])
    with pytest.raises(omnitable.ValidationError, match=r"keys lack column\(s\) \['b'\]"):
        t.lookup(pa.table({"a": ["p"]}))


def test_bad_lookups_say_why(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    plain = wh.create_table(f"p{next(_names)}", {"url": "string"})
    with pytest.raises(omnitable.UnknownColumnError, match="nope"):
        t.lookup(["u1"], ["x", "nope"])
    with pytest.raises(omnitable.ValidationError, match="a key holds NULL"):
        t.lookup(["u1", None])
    with pytest.raises(omnitable.ValidationError, match="it has no key"):
        plain.lookup(["u1"])
    with pytest.raises(omnitable.ValidationError, match="keys must be a list"):
        t.lookup("u1")
    ints = wh.create_table(f"i{next(_names)}", {"id": "bigint"}, key="id")
    with pytest.raises(omnitable.ValidationError, match="do not convert"):
        ints.lookup(["seven"])
