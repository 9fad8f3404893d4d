"""``Table.rollback`` on SQLite and PostgreSQL (``wh``): the head reads exactly like the target
version after any sequence of operations (a hypothesis model), history is kept, features and
columns follow, bad input and a racing commit commit nothing."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable._failpoints import hooked

_names = itertools.count()


def _state(t: omnitable.Table, **kw: Any) -> tuple[list[str], list[dict[str, Any]], list[Any]]:
    """Everything a reader sees: schema, rows (in read order), batches (name, rows, in order)."""
    got = t.read(**kw)
    rows = got.to_pylist()
    batches = [(b.name, b.rows) for b in t.batches(kw.get("version"))]  # type: ignore[arg-type]
    return got.schema.names, rows, batches


def test_rollback_undoes_every_kind_of_change_and_keeps_history(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"r{next(_names)}", {"x": "bigint", "label": "string"})
    t.append(pa.table({"x": list(range(10)), "label": ["a"] * 10}), "a", target_fragment_rows=4)
    good = t.version
    before = _state(t)
    ids = t.read([ROW_ID])[ROW_ID].to_pylist()
    t.delete(pc.field("x") < 2)
    t.update(pa.table({ROW_ID: [ids[5]], "label": ["Z"]}))
    t.add_columns(pa.table({ROW_ID: ids[3:6], "note": ["n3", "n4", "n5"]}))
    t.append(pa.table({"x": [100], "label": ["new"]}), "a", mode="replace")
    t.append(pa.table({"x": [200], "label": ["b"]}), "b")
    t.rename_column("label", "tag")
    t.retire("note")
    bad = t.version
    after_bad = _state(t)
    v = t.rollback(good, why="the job was wrong")
    assert v == bad + 1 and _state(t) == before
    assert _state(t, version=bad) == after_bad  # history kept: time travel still reads it
    head = t.history(1)[0]
    assert head.op == "rollback" and head.summary["to_version"] == good
    assert head.summary["why"] == "the job was wrong" and head.summary["discarded"] == bad - good
    assert t.retired() == [] and t.schema.names == before[0]
    # the table takes new work after a rollback, and a rollback can go forward again
    t.delete(pc.field("x") == 9)
    t.rollback(bad)
    assert _state(t) == after_bad and t.retired() == ["note"]


def test_rollback_restores_features_and_their_outputs(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"f{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2, 3]}), "a")
    t.register(omnitable.sql_feature("twice", "x * 2", "bigint", "1"))
    registered = t.version
    t.register(omnitable.sql_feature("twice", "x * 3", "bigint", "2"))
    t.register(omnitable.sql_feature("later", "x + 1", "bigint", "1"))
    assert {f.id for f in t.features()} == {"twice@2", "later@1"}
    t.rollback(registered)
    assert {f.id for f in t.features()} == {"twice@1"}  # later was registered after it
    assert "later" not in t.schema.names
    assert [f.name for s in t.backfill("twice").steps for f in s.features] == ["twice"]


def test_bad_rollbacks_commit_nothing(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"b{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1]}), "a")
    v = t.version
    for version, error, pattern in [
        (v, omnitable.ValidationError, "give an earlier version"),
        (v + 5, omnitable.ValidationError, "give an earlier version"),
        (-1, omnitable.ValidationError, "integer >= 0"),
        ("1", omnitable.ValidationError, "integer >= 0"),
        (True, omnitable.ValidationError, "integer >= 0"),
    ]:
        with pytest.raises(error, match=pattern):
            t.rollback(version)  # type: ignore[arg-type]
    t.append(pa.table({"x": [2]}), "b")
    with pytest.raises(omnitable.ValidationError, match="give an earlier version"):
        t.rollback(1_000)
    assert t.version == v + 1


def test_a_commit_racing_the_rollback_is_never_discarded_unseen(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"c{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1]}), "a")
    racer = wh.table(t.name)
    append = lambda: racer.append(pa.table({"x": [2]}), "b")  # noqa: E731
    with (
        hooked("rollback.before_commit", append),
        pytest.raises(omnitable.CommitConflict, match="was committed after version"),
    ):
        t.rollback(0)
    assert sorted(t.read(["x"])["x"].to_pylist()) == [1, 2]


def test_rollback_keeps_the_batch_order_of_its_target(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"o{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1]}), "b0")
    t.append(pa.table({"x": [2]}), "b1")
    target = t.version
    t.append(pa.table({"x": [3]}), "b0", mode="replace")
    t.append(pa.table({"x": [4]}), "b2")
    t.rollback(target)
    assert [b.name for b in t.batches()] == ["b0", "b1"]
    assert t.read(["x"])["x"].to_pylist() == [1, 2]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 8), st.integers(1, 4)),
        st.tuples(st.just("replace"), st.integers(0, 3), st.integers(1, 3)),
        st.tuples(st.just("delete"), st.integers(2, 4), st.integers(0, 3)),
        st.tuples(st.just("update"), st.integers(0, 2**16), st.integers(1, 4)),
        st.tuples(st.just("rollback"), st.integers(0, 2**16), st.just(0)),
    ),
    min_size=2,
    max_size=9,
)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS)
def test_rollback_reads_like_the_version_it_rolled_back_to(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]]
) -> None:
    """Any mix of appends, batch replacements, deletes, updates and rollbacks: after each
    rollback the head reads exactly like its target, and every version keeps reading as it
    did."""
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint", "y": "string"})
    seen: dict[int, Any] = {t.version: _state(t)}
    for i, (op, a, b) in enumerate(ops):
        if op in ("append", "replace"):
            names = [x.name for x in t.batches()]
            name = names[a % len(names)] if op == "replace" and names else f"b{i}"
            xs = [i * 100 + k for k in range(a % 8 + 1)]
            t.append(pa.table({"x": pa.array(xs, pa.int64()), "y": [f"v{x}" for x in xs]}),
                     name, mode="replace" if name in names else "error",
                     target_fragment_rows=b)  # fmt: skip
        elif op == "delete":
            t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)
        elif op == "update":
            live = t.read([ROW_ID])[ROW_ID].to_pylist()
            if not live:
                continue
            pick = np.random.default_rng(a).choice(len(live), min(b, len(live)), replace=False)
            t.update(pa.table({ROW_ID: [live[j] for j in pick], "y": [f"u{i}"] * len(pick)}))
        else:
            earlier = sorted(v for v in seen if v < t.version)
            if not earlier:
                continue
            target = earlier[a % len(earlier)]
            t.rollback(target)
            assert _state(t) == seen[target]  # batches and rows in the target's order too
        seen[t.version] = _state(t)
    for version, state in seen.items():
        assert _state(t, version=version) == state
