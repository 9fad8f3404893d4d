"""``Table.update`` on SQLite and PostgreSQL (``wh``): rewritten column files of the updated
columns only, time travel, deletes, bad input, a concurrent update of the same cells, and a
pandas model of append/update/delete/upsert sequences."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable._failpoints import hooked

from .upsert_model import append_like_the_model, upsert_like_the_model

_names = itertools.count()


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(
        f"u{next(_names)}",
        {"x": "bigint", "label": "string", "score": "double", "text": "string"},
        groups={"meta": ["label", "score"], "payload": ["text"]},
    )
    t.append(
        pa.table({"x": list(range(12)), "label": ["a"] * 12, "score": [0.5] * 12,
                  "text": [f"{i}" * 300 for i in range(12)]}),
        "b1", target_fragment_rows=4,
    )  # fmt: skip
    return t


def _ids(t: omnitable.Table) -> list[int]:
    return t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()


def test_update_writes_only_the_updated_columns(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    before = t.snapshot()
    result = t.update(pa.table({ROW_ID: [ids[1], ids[9]], "label": ["B", "J"]}), why="relabel")
    assert (result.rows, result.fragments, result.files) == (2, 2, 2)
    got = t.read(["x", "label", "score"]).to_pydict()
    assert got["label"] == ["a", "B"] + ["a"] * 7 + ["J", "a", "a"]
    assert got["score"] == [0.5] * 12  # the group's other column keeps its file
    after = t.snapshot()
    score, text = after.column("score").column_id, after.column("text").column_id
    label = after.column("label").column_id
    for frag in after.fragments:
        old = before.resolve(frag.fragment_id, [score, text, label])
        new = after.resolve(frag.fragment_id, [score, text, label])
        assert new[score] == old[score] and new[text] == old[text]
        touched = frag.fragment_id in {
            f.fragment_id for f in after.fragments[:1] + after.fragments[2:]
        }
        assert (new[label] != old[label]) is touched
        if touched:
            assert set(new[label].columns) == {label}  # the new file carries label only
    assert result.bytes_written < 2000  # never the 300-character text
    assert t.read(["label"], version=result.version - 1)["label"].to_pylist() == ["a"] * 12
    head = t.history(1)[0]
    assert head.op == "update" and head.summary["why"] == "relabel"
    assert head.summary["columns"] == ["label"] and head.summary["user"]


def test_update_several_groups_and_columns_argument(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    data = pa.table({ROW_ID: [ids[0]], "label": ["Z"], "score": [9], "text": ["new"]})
    result = t.update(data, columns=["score", "text"])  # label is given but not updated
    assert result.files == 2  # one per group (meta, payload) of the one fragment
    row = t.read(["label", "score", "text"], where=pc.field("x") == 0).to_pylist()[0]
    assert row == {"label": "a", "score": 9.0, "text": "new"}


def test_update_ignores_nothing_silently(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    t.delete(pc.field("x") == 3)
    v = t.version
    files = _files(t)
    cases = [
        (pa.table({"label": ["x"]}), omnitable.ValidationError, "needs a _ai_unique_id_ column"),
        (pa.table({ROW_ID: [ids[0]]}), omnitable.ValidationError, "found none"),
        (pa.table({ROW_ID: pa.array([], pa.int64()), "label": pa.array([], pa.string())}),
         omnitable.ValidationError, "no rows"),
        (pa.table({ROW_ID: pa.array([None], pa.int64()), "label": ["x"]}),
         omnitable.ValidationError, "null"),
        (pa.table({ROW_ID: [ids[0], ids[0]], "label": ["x", "y"]}),
         omnitable.ValidationError, "duplicate"),
        (pa.table({ROW_ID: [ids[0]], "nope": ["x"]}), omnitable.UnknownColumnError, "nope"),
        (pa.table({ROW_ID: [ids[0]], "x": ["not a number"]}), omnitable.ValidationError,
         "do not convert"),
        (pa.table({ROW_ID: [ids[3]], "label": ["x"]}), omnitable.NotFoundError, "not live rows"),
        (pa.table({ROW_ID: [ids[0], 10**9], "label": ["x", "y"]}), omnitable.NotFoundError,
         "1 of the 2"),
        (pa.table({ROW_ID: [ids[0]], omnitable.APPEND_NAME: ["x"]}), omnitable.ValidationError,
         "system column"),
    ]  # fmt: skip
    for data, error, pattern in cases:
        with pytest.raises(error, match=pattern):
            t.update(data)
    t.retire("score")
    with pytest.raises(omnitable.UnknownColumnError, match="score"):
        t.update(pa.table({ROW_ID: [ids[0]], "score": [1.0]}))
    assert t.version == v + 1  # the retire only
    assert _files(t) == files  # nothing written by a failed update is left behind


def _files(t: omnitable.Table) -> set[str]:
    selector = pafs.FileSelector(t.location.path, recursive=True)
    return {i.path for i in t.location.fs.get_file_info(selector) if i.path.endswith(".parquet")}


def test_concurrent_updates_of_the_same_cells_conflict(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    other = wh.table(t.name)

    def racing() -> None:
        other.update(pa.table({ROW_ID: [ids[1]], "label": ["B"]}))
        other.update(pa.table({ROW_ID: [ids[2]], "score": [2.0]}))  # another column: fine

    with (
        hooked("update.before_commit", racing),
        pytest.raises(
            omnitable.CommitConflict, match=r"wrote column\(s\) label in 1 of the same fragment"
        ),
    ):
        t.update(pa.table({ROW_ID: [ids[0]], "label": ["A"]}))
    got = t.read(["label", "score"]).to_pydict()
    assert got["label"][:3] == ["a", "B", "a"] and got["score"][2] == 2.0
    t.update(pa.table({ROW_ID: [ids[0]], "label": ["A"]}))  # re-run on the new head
    assert t.read(["label"])["label"].to_pylist()[:2] == ["A", "B"]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 10), st.integers(1, 4)),
        st.tuples(st.just("update"), st.integers(0, 2**16), st.integers(1, 5)),
        st.tuples(st.just("delete"), st.integers(2, 4), st.integers(0, 3)),
        st.tuples(st.just("upsert"), st.integers(0, 2**16), st.integers(1, 6)),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, keyed=st.booleans())
def test_append_update_delete_sequences_read_like_a_pandas_model(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]], keyed: bool
) -> None:
    """On a table keyed by x, appends are upserts of new keys and upserts (of live, deleted
    and new keys) join in; lookups agree with the model."""
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint", "y": "string"},
                        key="x" if keyed else None)  # fmt: skip
    model = pd.DataFrame({"x": pd.Series([], dtype="int64"), "y": pd.Series([], dtype=object)})
    states: dict[int, list[tuple[int, str | None]]] = {}
    for i, (op, a, b) in enumerate(ops):
        if op == "append":
            model = append_like_the_model(t, model, i, a, b, keyed)
        elif op == "update":
            live = t.read([ROW_ID, "x"]).to_pydict()
            if not live[ROW_ID]:
                continue
            pick = np.random.default_rng(a).choice(len(live[ROW_ID]), min(b, len(live[ROW_ID])),
                                                  replace=False)  # fmt: skip
            new = {live["x"][j]: f"u{i}-{live['x'][j]}" for j in pick}
            t.update(pa.table({ROW_ID: [live[ROW_ID][j] for j in pick], "y": list(new.values())}))
            model["y"] = [new.get(x, y) for x, y in zip(model.x, model.y, strict=True)]
        elif op == "upsert":
            if not keyed:
                continue
            seen = {x for version in states.values() for x, _ in version}
            xs = sorted(seen) + [i * 100 + k for k in range(3)]
            model = upsert_like_the_model(t, model, xs, i, a, b)
        else:
            t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)  # x % a == b
            model = model[~((model.x % a) == b)]
        states[t.version] = sorted(zip(model.x.tolist(), model.y.tolist(), strict=True))
        got = t.read(["x", "y"]).to_pydict()
        assert sorted(zip(got["x"], got["y"], strict=True)) == states[t.version]
        if keyed:
            keys = [*(x for x, _ in states[t.version][::-1]), 10**9]  # one missing key
            found = t.lookup(keys, ["x", "y"]).to_pydict()
            assert list(zip(found["x"], found["y"], strict=True)) == states[t.version][::-1]
    for version, rows in states.items():
        got = t.read(["x", "y"], version=version).to_pydict()
        assert sorted(zip(got["x"], got["y"], strict=True)) == rows
