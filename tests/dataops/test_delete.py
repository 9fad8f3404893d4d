"""``Table.delete``: deletion vectors on SQLite and PostgreSQL (``wh``), read back by the Python
reader; a pandas model of append/delete sequences (hypothesis); bad input commits nothing."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable.catalog.commit import CommitRequest, NewDeletion
from omnitable.vocabulary.deletions import decode_vector, encode_vector


def _table(wh: omnitable.Warehouse, name: str = "t") -> omnitable.Table:
    t = wh.create_table(name, {"x": "bigint", "s": "string", "payload": "string"})
    for b, lo in (("a", 0), ("b", 20)):
        n = 20
        t.append(
            pa.table(
                {
                    "x": pa.array(range(lo, lo + n), pa.int64()),
                    "s": [f"s{i}" if i % 7 else None for i in range(lo, lo + n)],
                    "payload": [f"p{i}" * 50 for i in range(lo, lo + n)],
                }
            ),
            b,
            target_fragment_rows=5,
        )
    return t


def _xs(t: omnitable.Table, **kw: object) -> list[int]:
    return sorted(t.read(["x"], **kw)["x"].to_pylist())  # type: ignore[arg-type]


def test_delete_by_filter_and_ids_with_time_travel_and_counts(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v0 = t.version
    first = t.delete(pc.field("x") < 3, why="bad samples")
    assert (first.rows, first.fragments) == (3, 1) and first.version == v0 + 1
    ids = t.read([ROW_ID, "x"], where=pc.field("x").isin([10, 30, 31])).to_pydict()
    second = t.delete(ids=ids[ROW_ID])
    assert (second.rows, second.fragments) == (3, 2)
    assert _xs(t) == [x for x in range(40) if x not in {0, 1, 2, 10, 30, 31}]
    assert _xs(t, version=v0) == list(range(40))  # time travel sees the rows
    assert _xs(t, version=first.version) == list(range(3, 40))
    assert [(b.name, b.rows, b.fragments) for b in t.batches()] == [("a", 16, 4), ("b", 18, 4)]
    assert [b.rows for b in t.batches(version=v0)] == [20, 20]
    head = t.history()[0]
    assert head.op == "delete" and head.summary["rows"] == 3
    assert t.history()[1].summary["why"] == "bad samples"
    # a filter: deleted rows never come back, with late materialization of the payload too
    got = t.read(["x", "payload"], where=pc.field("x") <= 11).to_pydict()
    assert got["x"] == [3, 4, 5, 6, 7, 8, 9, 11]
    assert got["payload"] == [f"p{i}" * 50 for i in got["x"]]
    # NULL is not true: rows with a NULL s survive a filter on s
    t.delete(pc.field("s") == "s13")
    assert 13 not in _xs(t) and 14 in _xs(t) and 7 in _xs(t)


def test_cumulative_vectors_and_fully_deleted_fragments(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.delete(pc.field("x").isin([5, 6]))
    t.delete(pc.field("x").isin([7, 8]))
    v = t.delete(pc.field("x") == 9).version
    snap = t.snapshot()
    (dv,) = snap.deletions.values()  # one visible vector per fragment: the union
    assert dv.deleted_count == 5 and dv.added_version == v and dv.mask().all()
    plan = t.plan(["x"])
    assert plan.fragments_total == 7 and len(plan.fragments) == 7  # the empty one dropped out
    assert dv.fragment_id not in {f.fragment_id for f in plan.fragments}
    assert t.read(["x"], batches=["a"]).num_rows == 15
    with wh.catalog.store.read() as conn:
        rows = conn.execute(
            text("SELECT added_version, removed_version FROM deletion_vectors ORDER BY 1")
        ).all()
    assert [tuple(r) for r in rows] == [(v - 2, v - 1), (v - 1, v), (v, None)]


def test_replacing_a_batch_retires_its_vectors(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.delete(pc.field("x") < 12)
    t.append(pa.table({"x": [100, 101]}), "a", mode="replace")
    assert _xs(t) == [*range(20, 40), 100, 101]
    with wh.catalog.store.read() as conn:
        live = conn.execute(
            text("SELECT COUNT(*) FROM deletion_vectors WHERE removed_version IS NULL")
        ).scalar()
    assert live == 0
    assert [b.rows for b in t.batches()] == [20, 2]


def test_matching_nothing_commits_nothing(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    v = t.version
    assert t.delete(pc.field("x") > 1000) == omnitable.DeleteResult(None, 0, 0)
    t.delete(pc.field("x") == 1)
    assert t.delete(pc.field("x") == 1).version is None  # already deleted
    assert t.version == v + 1


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({}, omnitable.ValidationError, "not neither"),
        ({"where": pc.field("x") > 1, "ids": [1]}, omnitable.ValidationError, "not both"),
        ({"where": "x > 1"}, omnitable.ValidationError, "must be a pyarrow.compute.Expression"),
        ({"ids": []}, omnitable.ValidationError, "non-empty list of integers"),
        ({"ids": [True]}, omnitable.ValidationError, "non-empty list of integers"),
        ({"ids": "1,2"}, omnitable.ValidationError, "must be a list of integers"),
        ({"ids": [1, 10**9]}, omnitable.NotFoundError, r"1 of the 2 ids are not live rows"),
        ({"where": pc.field("nope") > 1}, omnitable.UnknownColumnError, "nope"),
        ({"where": pc.field("s") > 1}, omnitable.ValidationError, "Cannot filter"),
    ],
)
def test_bad_input_commits_nothing(
    wh: omnitable.Warehouse, kwargs: dict[str, object], error: type[Exception], pattern: str
) -> None:
    t = _table(wh)
    v = t.version
    with pytest.raises(error, match=pattern):
        t.delete(**kwargs)  # type: ignore[arg-type]
    assert t.version == v and t.read(["x"]).num_rows == 40


def test_commit_rejects_a_vector_that_no_longer_replaces_the_head(
    wh: omnitable.Warehouse,
) -> None:
    """The commit validates what the delete read: a vector computed without a concurrent
    delete's rows would drop them."""
    t = _table(wh)
    base = t.snapshot()
    frag = base.fragments[0]
    t.delete(pc.field("x") == 0)  # commits a vector on the same fragment after `base`
    mask = np.zeros(frag.row_count, dtype=bool)
    mask[1] = True
    stale = NewDeletion(frag.fragment_id, frag.batch_id, 1, encode_vector(mask), None)
    req = CommitRequest(op="delete", base_version=base.version, deletions=[stale])
    with pytest.raises(omnitable.CommitConflict, match="deleted rows of 1 of the same fragment"):
        wh.catalog.commit(t.record, req)
    assert _xs(t)[:2] == [1, 2]


def test_vector_encoding_round_trips_and_rejects_garbage() -> None:
    for n in (1, 7, 8, 9, 1000):
        mask = np.random.default_rng(n).random(n) < 0.3
        assert np.array_equal(decode_vector(encode_vector(mask), n), mask)
    with pytest.raises(omnitable.CorruptInputError, match="needs 2"):
        decode_vector(encode_vector(np.ones(3, bool)), 9)
    with pytest.raises(omnitable.CorruptInputError, match="Cannot decode"):
        decode_vector("not base64!", 8)
    with pytest.raises(omnitable.CorruptInputError, match="past row 3"):
        decode_vector(encode_vector(np.ones(8, bool)), 3)


# -- a pandas model ---------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 12), st.integers(1, 5)),
        st.tuples(st.just("delete_mod"), st.integers(2, 5), st.integers(0, 4)),
        st.tuples(st.just("delete_ids"), st.integers(0, 2**16), st.integers(1, 4)),
        st.tuples(st.just("delete_batch"), st.integers(0, 5), st.just(0)),
    ),
    min_size=1,
    max_size=8,
)
_names = itertools.count()


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_append_and_delete_sequences_read_like_a_pandas_model(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]]
) -> None:
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint"})
    model = pd.DataFrame({"x": pd.Series([], dtype="int64"), "batch": pd.Series([], dtype=str)})
    states: dict[int, list[int]] = {}
    for i, (op, a, b) in enumerate(ops):
        if op == "append":
            xs = [i * 100 + k for k in range(a)]
            if xs:
                t.append(pa.table({"x": pa.array(xs, pa.int64())}), f"b{i}",
                         target_fragment_rows=b)  # fmt: skip
                model = pd.concat([model, pd.DataFrame({"x": xs, "batch": f"b{i}"})])
        elif op == "delete_mod":
            t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)  # x % a == b
            model = model[~((model.x % a) == b)]
        elif op == "delete_ids":
            live = t.read([ROW_ID, "x"]).to_pydict()
            if live[ROW_ID]:
                rng = np.random.default_rng(a)
                pick = rng.choice(len(live[ROW_ID]), min(b, len(live[ROW_ID])), replace=False)
                t.delete(ids=[live[ROW_ID][j] for j in pick])
                gone = {live["x"][j] for j in pick}
                model = model[~model.x.isin(gone)]
        else:
            batches = [x.name for x in t.batches()]
            if batches:
                name = batches[a % len(batches)]
                t.delete(pc.field(APPEND_NAME) == name)
                model = model[model.batch != name]
        states[t.version] = sorted(model.x.tolist())
        assert sorted(t.read(["x"])["x"].to_pylist()) == states[t.version]
        assert sum(x.rows for x in t.batches()) == len(model)
    for version, xs in states.items():  # every earlier version still reads as it was
        assert sorted(t.read(["x"], version=version)["x"].to_pylist()) == xs


def test_add_columns_and_supplied_ids_after_a_delete_stay_aligned(wh: omnitable.Warehouse) -> None:
    """New column files align to the fragment's offsets, deleted rows included; a deleted row's
    id is still taken."""
    t = _table(wh)
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    t.delete(pc.field("x").isin([0, 2]))
    t.add_columns(pa.table({ROW_ID: ids[:5], "note": [f"n{i}" for i in range(5)]}))
    got = t.read(["x", "note"], where=pc.field("x") < 6).to_pydict()
    assert got == {"x": [1, 3, 4, 5], "note": ["n1", "n3", "n4", None]}
    with pytest.raises(omnitable.ValidationError, match="already"):
        t.append(pa.table({ROW_ID: [ids[0]], "x": [99]}), "c")


@pytest.mark.parametrize("deleted", [0.1, 0.7])
def test_values_read_in_place_keep_only_the_live_rows(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch, deleted: float
) -> None:
    """Fixed-width columns read in place from their pages take a deleted fragment's live rows
    there (its live offsets, :mod:`omnitable.format.live_rows`: every page read when most rows
    live, the pages holding them otherwise); the other columns drop the deleted rows after
    their read; a column no file provides and the batch name come at the live rows' count.
    Every read equals the rows that were not deleted."""
    import omnitable.format.reader as reader

    n = 3_000
    schema = {"f": "double", "g": "double", "i": "bigint", "s": "string", "z": "double"}
    t = wh.create_table(f"live{next(_names)}", schema, groups={"nums": ["f", "g"]})
    xs = np.arange(n)
    f, g = np.random.default_rng(4).random((2, n))  # random floats are stored PLAIN, as is
    t.append(pa.table({"f": f, "g": g, "i": xs, "s": [f"s{k}" for k in xs]}), "a")
    ids = t.read([ROW_ID, "i"]).sort_by("i")[ROW_ID].to_numpy()
    gone = np.random.default_rng(5).random(n) < deleted
    t.delete(ids=ids[gone].tolist())
    gathered: list[int] = []
    real = reader.gather_plain

    def spy(handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray | None) -> object:
        got = real(handle, uri, column, rows)
        gathered.append(-1 if got is None or rows is None else len(rows))
        return got

    monkeypatch.setattr(reader, "gather_plain", spy)
    want = {"i": xs[~gone].tolist(), "s": [f"s{k}" for k in xs[~gone]],
            "f": f[~gone].tolist(), "g": g[~gone].tolist(), "z": [None] * int((~gone).sum()),
            APPEND_NAME: ["a"] * int((~gone).sum())}  # fmt: skip
    for _ in range(3):  # the first read decodes with pyarrow; later ones read pages in place
        got = t.read(["i", "s", "f", "g", "z", APPEND_NAME]).sort_by("i").to_pydict()
        assert got == want
    assert int((~gone).sum()) in gathered  # a gather took the live rows from the pages
