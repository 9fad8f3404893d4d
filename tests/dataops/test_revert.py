"""``Table.revert`` on SQLite and PostgreSQL (``wh``): undo exactly one commit and keep the
later ones (a hypothesis model replayed without that operation), conflicts when a later commit
changed the same things, bad input, a racing writer and a writer killed mid-commit."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable._failpoints import hooked

_names = itertools.count()


def _rows(t: omnitable.Table, **kw: Any) -> list[tuple[Any, ...]]:
    got = t.read(**kw)
    names = [n for n in got.schema.names if n != ROW_ID]
    return sorted(tuple(r[n] for n in names) for r in got.to_pylist())


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(f"r{next(_names)}", {"x": "bigint", "label": "string"})
    t.append(pa.table({"x": list(range(8)), "label": ["a"] * 8}), "a", target_fragment_rows=4)
    return t


def test_revert_undoes_one_commit_and_keeps_the_later_ones(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    deleted = t.delete(pc.field("x") == 1).version
    updated = t.update(pa.table({ROW_ID: [ids[2]], "label": ["Z"]})).version
    appended = t.append(pa.table({"x": [10, 11], "label": ["b", "b"]}), "b")
    noted = t.add_columns(pa.table({ROW_ID: ids[:2], "note": ["n0", "n1"]}))
    renamed = t.rename_column("label", "tag")
    t.delete(pc.field("x") == 11)
    t.revert(updated, why="bad relabel")
    assert t.read(["tag"], where=pc.field("x") == 2)["tag"].to_pylist() == ["a"]
    assert sorted(t.read(["x"])["x"].to_pylist()) == [0, 2, 3, 4, 5, 6, 7, 10]  # later ones kept
    t.revert(deleted)
    assert 1 in t.read(["x"])["x"].to_pylist()
    t.revert(noted)
    assert "note" not in t.schema.names and "tag" in t.schema.names
    t.revert(renamed)
    assert t.schema.names[-1] == "label"
    t.revert(appended)  # its batch goes, with the later delete of one of its rows
    assert [b.name for b in t.batches()] == ["a"] and t.count() == 8
    head = t.history(1)[0]
    assert head.op == "revert" and head.summary["reverted"] == appended
    assert _rows(t) == _rows(t, version=1)  # every change undone: the first append's state


def test_revert_conflicts_when_a_later_commit_changed_the_same_things(
    wh: omnitable.Warehouse,
) -> None:
    t = _table(wh)
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    first = t.update(pa.table({ROW_ID: [ids[0]], "label": ["A"]})).version
    t.update(pa.table({ROW_ID: [ids[1]], "label": ["B"]}))  # the same fragment's column again
    deleted = t.delete(pc.field("x") == 5).version
    t.delete(pc.field("x") == 6)  # the same fragment's vector again
    renamed = t.rename_column("label", "tag")
    t.retire("tag")
    replaced = t.append(pa.table({"x": [1]}), "c")
    t.append(pa.table({"x": [2]}), "c", mode="replace")
    v = t.version
    for version, pattern in [
        (first, "column id \\d+ of fragment \\w+ was written again"),
        (deleted, "rows of fragment \\w+ were deleted \\(or restored\\) again"),
        (renamed, "column id \\d+ was renamed, retired or replaced"),
        (replaced, "fragment\\(s\\) it changed were replaced or removed"),
    ]:
        with pytest.raises(omnitable.CommitConflict, match=pattern):
            t.revert(version)
    assert t.version == v


def test_revert_of_a_registration(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    t.register(omnitable.sql_feature("twice", "x * 2", "bigint", "1"))
    second = t.register(omnitable.sql_feature("twice", "x * 3", "bigint", "2"))
    assert second is not None
    t.revert(second)
    assert [f.id for f in t.features()] == ["twice@1"]
    first = min(h.version for h in t.history() if h.op == "register")
    t.revert(first)
    assert t.features() == [] and "twice" not in t.schema.names


def test_bad_reverts_commit_nothing(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    done = t.delete(pc.field("x") == 0).version
    t.revert(done)
    v = t.version
    for kwargs, error, pattern in [
        ({"version": 0}, omnitable.ValidationError, "it created the table"),
        ({"version": 999}, omnitable.NotFoundError, "no such version"),
        ({"version": done}, omnitable.ValidationError, "reverted already"),
        ({"version": "1"}, omnitable.ValidationError, "integer >= 0"),
        ({"version": 1, "dependents": "ignore"}, omnitable.ValidationError, "fail, stale"),
    ]:
        with pytest.raises(error, match=pattern):
            t.revert(**kwargs)  # type: ignore[arg-type]
    assert t.version == v


def test_a_write_racing_the_revert_is_seen_by_its_checks(wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    updated = t.update(pa.table({ROW_ID: [ids[0]], "label": ["A"]})).version
    racer = wh.table(t.name)
    again = lambda: racer.update(pa.table({ROW_ID: [ids[1]], "label": ["B"]}))  # noqa: E731
    with (
        hooked("revert.before_commit", again),
        pytest.raises(omnitable.CommitConflict, match="was written again"),
    ):
        t.revert(updated)
    assert t.read(["label"]).to_pydict()["label"][:2] == ["A", "B"]


def test_revert_killed_mid_commit_leaves_nothing(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    uri, root = catalog_spec
    t = _table(wh)
    deleted = t.delete(pc.field("x") < 3).version
    before = (t.version, _rows(t))
    code = f"import omnitable; omnitable.connect({uri!r}, root={root!r}).table({t.name!r}).revert({deleted})"
    env = dict(os.environ, OMNITABLE_FAILPOINTS="commit.mid_insert=exit",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 77, proc.stderr[-2000:]
    assert (t.version, _rows(t)) == before
    t.revert(deleted)
    assert t.count() == 8


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 8), st.integers(1, 4)),
        st.tuples(st.just("delete"), st.integers(2, 4), st.integers(0, 3)),
        st.tuples(st.just("update"), st.integers(2, 4), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=7,
)


def _replay(ops: list[tuple[str, int, int]], skip: int | None) -> pd.DataFrame:
    model = pd.DataFrame({"x": pd.Series([], dtype="int64"), "y": pd.Series([], dtype=object)})
    for i, (op, a, b) in enumerate(ops):
        if i == skip:
            continue
        if op == "append":
            xs = [i * 100 + k for k in range(a)]
            model = pd.concat([model, pd.DataFrame({"x": xs, "y": [f"v{x}" for x in xs]})])
        elif op == "delete":
            model = model[(model.x % a) != b]
        else:
            new = [f"u{i}" if x % a == b else y for x, y in zip(model.x, model.y, strict=True)]
            model = model.assign(y=new)
    return model


def _depends(ops: list[tuple[str, int, int]], k: int) -> bool:
    """A later update or delete chose its rows among rows operation k deleted (a later delete
    of such rows deleted fewer rows, or committed nothing, because k had run)."""
    if ops[k][0] != "delete":
        return False
    before = _replay(ops[:k], None)
    gone = before[(before.x % ops[k][1]) == ops[k][2]]
    return any(op != "append" and ((gone.x % a) == b).any() for op, a, b in ops[k + 1 :])


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, pick=st.integers(0, 2**16))
def test_revert_reads_like_the_model_without_that_operation(
    wh: omnitable.Warehouse, ops: list[tuple[str, int, int]], pick: int
) -> None:
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint", "y": "string"})
    versions: dict[int, int] = {}  # op index -> its commit
    for i, (op, a, b) in enumerate(ops):
        if op == "append":
            xs = [i * 100 + k for k in range(a)]
            t.append(pa.table({"x": pa.array(xs, pa.int64()), "y": [f"v{x}" for x in xs]}),
                     f"b{i}", target_fragment_rows=b)  # fmt: skip
        elif op == "delete":
            t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)
        else:
            hit = t.read([ROW_ID], where=(pc.field("x") - (pc.field("x") / a) * a) == b)[ROW_ID]
            if len(hit):
                t.update(pa.table({ROW_ID: hit, "y": [f"u{i}"] * len(hit)}))
        if t.version not in versions.values() and t.version > 0:
            versions[i] = t.version
    if not versions:
        return
    k = sorted(versions)[pick % len(versions)]
    before = _rows(t)
    try:
        t.revert(versions[k])
    except omnitable.CommitConflict:
        assert _rows(t) == before  # a later commit changed what it changed: nothing applied
        return
    if not _depends(ops, k):
        model = _replay(ops, k)
        assert _rows(t, columns=["x", "y"]) == sorted(zip(model.x, model.y, strict=True))
