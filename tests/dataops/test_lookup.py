"""``Table.lookup`` on SQLite and PostgreSQL (``wh``): equal to a filtered read for random key
subsets (missing keys left out, order kept), deleted rows, column subsets, key inputs (lists,
tuples, pyarrow, pandas), keys asked twice, with and without reading the stored keys back (and
what each does when the index points a key at a row holding another one: a collision), and bad
input."""

from __future__ import annotations

import itertools
import os

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


@pytest.mark.parametrize("verify_keys", [False, True])
def test_lookup_equals_a_filtered_read(wh: omnitable.Warehouse, verify_keys: bool) -> None:
    t = _table(wh)
    rng = np.random.default_rng(12)
    universe = [f"u{i}" for i in range(70)]  # u60.. are missing, u7 and u33 deleted
    for _ in range(8):
        keys = list(rng.choice(universe, int(rng.integers(0, 25)), replace=False))
        got = t.lookup(keys, verify_keys=verify_keys)
        read = t.read(where=pc.field("url").isin(keys)).to_pylist()
        by_url = {r["url"]: r for r in read}
        assert got.to_pylist() == [by_url[k] for k in keys if k in by_url]
        assert got.schema == t.read().schema
    twice = t.lookup(["u3", "u9", "u3", "u99"], ["x", "url"], verify_keys=verify_keys)
    assert twice.to_pylist() == [{"x": x, "url": f"u{x}"} for x in (3, 9, 3)]
    assert t.lookup(["u3", "u9"], ["url"], verify_keys=verify_keys).to_pylist() == [
        {"url": "u3"},
        {"url": "u9"},
    ]
    nothing = t.lookup(["u3", "u99", "u9"], [], verify_keys=verify_keys)
    assert (nothing.num_rows, nothing.num_columns) == (2, 0)  # one row per key found
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


def test_a_key_the_index_points_at_another_row(wh: omnitable.Warehouse) -> None:
    """A collision, made by rewriting a fragment's index file so that u5's hash points at u6's
    row: a lookup trusts the index (u6's values under the key asked, as an upsert would merge
    into that row), ``verify_keys`` reads u6's stored key back and leaves the row out."""
    from omnitable.format import keyindex
    from omnitable.vocabulary.keys import key_hashes

    t = _table(wh)
    frag = next(f for f in t.snapshot().fragments if f.row_count == 7)  # u0..u6
    location = t._ctx.location
    index = keyindex.load_key_index(location, frag.path, frag.row_count)
    h1, h2, offset = index.h1.copy(), index.h2.copy(), index.offset.copy()
    (a1,), (a2,) = key_hashes([pa.array(["u5"])])
    (b1,), (b2,) = key_hashes([pa.array(["u6"])])
    at_u5 = int(np.flatnonzero((h1 == a1) & (h2 == a2))[0])
    at_u6 = int(np.flatnonzero((h1 == b1) & (h2 == b2))[0])
    by_row = np.empty(frag.row_count, np.uint64), np.empty(frag.row_count, np.uint64)
    by_row[0][offset], by_row[1][offset] = h1, h2
    by_row[0][offset[at_u6]], by_row[1][offset[at_u6]] = a1, a2  # u6's row now hashes as u5
    by_row[0][offset[at_u5]], by_row[1][offset[at_u5]] = b1, b2  # and u5's row as u6
    keyindex._CACHE.clear()
    os.remove(location.child_path(keyindex.index_path(frag.path)))
    keyindex.write_key_index(location, frag.path, *by_row)
    assert t.lookup(["u5", "u4"], ["url", "x"]).to_pylist() == [
        {"url": "u5", "x": 6},
        {"url": "u4", "x": 4},
    ]
    assert t.lookup(["u5", "u4"], ["url", "x"], verify_keys=True).to_pylist() == [
        {"url": "u4", "x": 4}
    ]
    with pytest.raises(omnitable.ValidationError, match="verify_keys must be True or False"):
        t.lookup(["u4"], verify_keys="yes")  # type: ignore[arg-type]
    keyindex._CACHE.clear()


def test_keys_of_several_integer_columns_are_read_back(wh: omnitable.Warehouse) -> None:
    """Such keys hash to 64 bits (both halves equal), so a lookup compares the stored keys by
    default: an index entry pointing a key at another row's (as a collision would) returns no
    row, without ``verify_keys``."""
    from omnitable.format import keyindex
    from omnitable.vocabulary.keys import key_hashes, weak_key_hash

    assert weak_key_hash([pa.int64(), pa.date32()]) and not weak_key_hash([pa.int64()])
    assert not weak_key_hash([pa.int64(), pa.string()])
    t = wh.create_table(f"n{next(_names)}", {"a": "bigint", "b": "int", "v": "string"},
                        key=["a", "b"])  # fmt: skip
    t.upsert(pa.table({"a": [1, 1, 2], "b": [1, 2, 1], "v": ["a1", "a2", "b1"]}))
    (frag,) = t.snapshot().fragments
    location = t._ctx.location
    h1, h2 = key_hashes([pa.array([1, 1, 2], pa.int64()), pa.array([1, 2, 1], pa.int32())])
    h1[0], h2[0] = h1[1], h2[1]  # row 0 (1, 1) now hashes as (1, 2), as does row 1
    n1, n2 = key_hashes([pa.array([9], pa.int64()), pa.array([9], pa.int32())])
    h1[1], h2[1] = n1[0], n2[0]  # and row 1 as (9, 9)
    keyindex._CACHE.clear()
    os.remove(location.child_path(keyindex.index_path(frag.path)))
    keyindex.write_key_index(location, frag.path, h1, h2)
    assert t.lookup([(1, 2), (2, 1)], ["v"]).to_pylist() == [{"v": "b1"}]  # (1, 2) -> row 0
    keyindex._CACHE.clear()


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
