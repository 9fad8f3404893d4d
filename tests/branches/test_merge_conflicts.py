"""Merge conflicts on SQLite (docs/branches.md, "Merging"): the same cell on both sides, a row
deleted on one side and updated on the other (both ways; not when both deleted it, not against
a rewrite with the same value), batches replaced, changed or removed on both, columns renamed,
retired or added on both, keys inserted on both. Each: ``MergeConflict`` with exactly those
details and nothing committed, then "ours" and "theirs" merged into branches of the target's
head give the documented result."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID, MergeConflict

from .merge_helpers import (
    BASE,
    Rows,
    delete_x,
    fragment_paths,
    head_state,
    ids_of,
    make_table,
    new_rows,
    rows,
    set_col,
    with_values,
    without,
)


@pytest.fixture
def wh(tmp_path: Path) -> Iterator[omnitable.Warehouse]:
    warehouse = omnitable.connect(str(tmp_path / "wh"))
    yield warehouse
    warehouse.close()


@pytest.fixture
def t(wh: omnitable.Warehouse) -> omnitable.Table:
    return make_table(wh)


def _refused(
    t: omnitable.Table, source: str, cols: tuple[str, ...] = ("s", "y")
) -> list[tuple[Any, ...]]:
    """Merge with strategy "fail": the conflicts as (kind, where, column, source, target, rows);
    asserts that nothing was committed."""
    before = head_state(t, cols)
    with pytest.raises(MergeConflict) as info:
        t.merge(source)
    assert head_state(t, cols) == before
    assert "nothing was committed" in str(info.value)
    return [(c.kind, c.where, c.column, c.source, c.target, c.rows) for c in info.value.details]


def _strategies(t: omnitable.Table, source: str) -> tuple[Rows, Rows]:
    """Merge ``source`` into two branches forked from ``t``'s head, with "ours" and "theirs";
    returns what each reads."""
    out = []
    for strategy in ("ours", "theirs"):
        into = t.create_branch(f"into-{strategy}")
        result = into.merge(source, strategy=strategy)
        assert result.version == into.version and len(result.resolved) >= 1
        assert into.merge(source).version is None  # resolved once: not reported again
        out.append(rows(into))
    return out[0], out[1]


def test_same_cell_updated_on_both(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "s", {2: "M2"})
    set_col(a, "y", {3: 33.0})  # not a conflict: merged by both strategies
    frag = fragment_paths(t)[0]
    [(kind, where, column, src, dst, _)] = _refused(t, "a")
    assert (kind, where, column) == ("cell", frag, "s")
    assert src.startswith(frag + "/") and dst.startswith(frag + "/") and src != dst
    ours, theirs = _strategies(t, "a")
    assert ours == with_values(with_values(BASE, 0, {2: "M2"}), 1, {3: 33.0})
    # theirs takes the source's file of the cell: M2 goes back to the base value with it
    assert theirs == with_values(with_values(BASE, 0, {1: "A1"}), 1, {3: 33.0})


def test_cell_conflict_names_both_files(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "y", {7: 77.0})
    set_col(t, "y", {8: 88.0})
    frag = fragment_paths(t)[1]

    def file_of(branch: omnitable.Table) -> str:
        snap = branch.snapshot()
        [fragment] = [f for f in snap.fragments if f.path == frag]
        files = snap.files_by_fragment[fragment.fragment_id]
        y = next(c.column_id for c in snap.columns if c.name == "y")
        return max((f for f in files if y in f.columns), key=lambda f: f.added_version).path

    assert _refused(t, "a") == [("cell", frag, "y", file_of(a), file_of(t), ())]


def test_one_update_of_two_groups_against_one_of_them(t: omnitable.Table) -> None:
    """a's one update writes s and y of a fragment; main rewrote y there: y conflicts, s is
    adopted from the same file whatever the strategy."""
    a = t.create_branch("a")
    ids = ids_of(a)
    a.update(pa.table({ROW_ID: [ids[1]], "s": ["A1"], "y": [11.0]}), ["s", "y"])
    set_col(t, "y", {2: 22.0})
    [(kind, _, column, _, _, _)] = _refused(t, "a")
    assert (kind, column) == ("cell", "y")
    ours, theirs = _strategies(t, "a")
    assert ours == with_values(with_values(BASE, 0, {1: "A1"}), 1, {2: 22.0})
    assert theirs == with_values(with_values(BASE, 0, {1: "A1"}), 1, {1: 11.0})


def test_source_deleted_a_row_the_target_updated(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    delete_x(a, 6, 8)
    set_col(t, "y", {6: 66.0})
    assert _refused(t, "a") == [("rows", fragment_paths(t)[1], "y", "deleted", "updated", (1,))]
    ours, theirs = _strategies(t, "a")
    assert ours == without(with_values(BASE, 1, {6: 66.0}), 8)  # kept with main's value
    assert theirs == without(BASE, 6, 8)


def test_target_deleted_a_row_the_source_updated(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {6: "A6", 7: "A7"})
    delete_x(t, 7)
    assert _refused(t, "a") == [("rows", fragment_paths(t)[1], "s", "updated", "deleted", (2,))]
    ours, theirs = _strategies(t, "a")
    assert ours == without(with_values(BASE, 0, {6: "A6"}), 7)
    assert theirs == with_values(BASE, 0, {6: "A6", 7: "A7"})  # back, with a's value


def test_delete_against_a_rewrite_with_the_same_value_is_no_conflict(
    t: omnitable.Table,
) -> None:
    a = t.create_branch("a")
    delete_x(a, 6)
    set_col(t, "s", {6: "r6", 7: "M7"})  # row 6 rewritten with its value
    t.merge("a")
    assert rows(t) == without(with_values(BASE, 0, {7: "M7"}), 6)


def test_row_deleted_on_both_sides_and_updated_on_one_is_no_conflict(
    t: omnitable.Table,
) -> None:
    """Both branches deleted row 1; main updated it first. Both sides agree it is gone: no
    conflict, and "ours" must not bring it back."""
    a = t.create_branch("a")
    delete_x(a, 1)
    set_col(t, "s", {1: "M1"})
    delete_x(t, 1)
    into = t.create_branch("into-ours")
    assert into.merge("a", strategy="ours").resolved == []
    assert rows(into) == without(BASE, 1)
    t.merge("a")
    assert rows(t) == without(BASE, 1)


def test_batch_replaced_on_both(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.append(new_rows([20], "a"), "b2", mode="replace")
    t.append(new_rows([30, 31], "m"), "b2", mode="replace")
    set_col(a, "s", {1: "A1"})
    assert _refused(t, "a") == [("batch", "b2", None, "1 fragment(s)", "1 fragment(s)", ())]
    ours, theirs = _strategies(t, "a")
    b1 = with_values({x: r for x, r in BASE.items() if x < 10}, 0, {1: "A1"})
    assert ours == b1 | {30: ("m30", 30.0), 31: ("m31", 31.0)}
    assert theirs == b1 | {20: ("a20", 20.0)}


def test_batch_replaced_on_one_side_and_changed_on_the_other(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.append(new_rows([20], "a"), "b2", mode="replace")
    set_col(t, "s", {10: "M10"})
    assert _refused(t, "a") == [("batch", "b2", None, "1 fragment(s)", "changed", ())]
    ours, theirs = _strategies(t, "a")
    b1 = {x: r for x, r in BASE.items() if x < 10}
    assert ours == with_values(BASE, 0, {10: "M10"})
    assert theirs == b1 | {20: ("a20", 20.0)}


def test_batch_changed_on_the_source_and_replaced_on_the_target(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {10: "A10"})
    t.append(new_rows([30], "m"), "b2", mode="replace")
    assert _refused(t, "a") == [("batch", "b2", None, "changed", "replaced", ())]
    ours, theirs = _strategies(t, "a")
    b1 = {x: r for x, r in BASE.items() if x < 10}
    assert ours == b1 | {30: ("m30", 30.0)}
    assert theirs == with_values(BASE, 0, {10: "A10"})


def test_batch_removed_on_the_source(t: omnitable.Table) -> None:
    """a reverts main's append of b2 (a revert on a branch ends inherited rows by fragment and
    by file in one commit); the merge removes b2 from main, or conflicts where main changed it."""
    b2 = t.history()[0].version  # the append of b2
    a = t.create_branch("a")
    a.revert(b2)
    assert [b.name for b in a.batches()] == ["b1"] and [b.name for b in t.batches()] == ["b1", "b2"]
    c = t.create_branch("c")
    set_col(t, "y", {2: 22.0})
    result = t.merge("a")
    assert result.batches == 1 and not result.resolved
    b1 = {x: r for x, r in BASE.items() if x < 10}
    assert rows(t) == with_values(b1, 1, {2: 22.0}) and [b.name for b in t.batches()] == ["b1"]
    set_col(c, "s", {10: "C10"})  # c changed b2, which main removed meanwhile
    assert _refused(t, "c") == [("batch", "b2", None, "changed", "replaced", ())]
    ours, theirs = _strategies(t, "c")
    assert ours == rows(t)
    assert theirs == rows(t) | {10: ("C10", 10.0), 11: ("r11", 11.0)}


@pytest.mark.parametrize(
    ("on_a", "on_main", "source", "target", "ours", "theirs"),
    [
        ("rename:sa", "rename:sm", "sa (active)", "sm (active)", "sm", "sa"),
        ("retire", "rename:sm", "s (retired)", "sm (active)", "sm", None),
        ("rename:sa", "retire", "sa (active)", "s (retired)", None, "sa"),
    ],
)
def test_column_changed_differently(
    t: omnitable.Table,
    on_a: str,
    on_main: str,
    source: str,
    target: str,
    ours: str | None,
    theirs: str | None,
) -> None:
    def change(branch: omnitable.Table, what: str) -> None:
        if what == "retire":
            branch.retire("s")
        else:
            branch.rename_column("s", what.split(":")[1])

    a = t.create_branch("a")
    change(a, on_a)
    change(t, on_main)
    got = _refused(t, "a", ("y",))
    assert got == [("column", "s", "s", source, target, ())]
    for strategy, name in (("ours", ours), ("theirs", theirs)):
        into = t.create_branch(f"into-{strategy}")
        into.merge("a", strategy=strategy)
        names = [n for n in into.schema.names if n.startswith("s")]
        assert names == ([] if name is None else [name])
        if name is not None:
            assert rows(into, (name, "y")) == BASE


def test_two_new_columns_of_one_name(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    ids = ids_of(t)
    a.add_columns(pa.table({ROW_ID: [ids[1]], "z": [1]}))
    t.add_columns(pa.table({ROW_ID: [ids[2]], "z": [2]}))
    assert _refused(t, "a") == [("column", "z", "z", "added", "exists", ())]
    with pytest.raises(omnitable.ValidationError, match="both branches added a column 'z'"):
        t.merge("a", strategy="theirs")
    t.merge("a", strategy="ours")
    assert {x: r[2] for x, r in rows(t, ("s", "y", "z")).items() if r[2] is not None} == {2: 2}


def test_keyed_table_key_inserted_on_both(wh: omnitable.Warehouse) -> None:
    k = wh.create_table("k", {"key": "string", "v": "bigint"}, key="key")
    k.upsert(pa.table({"key": ["k1", "k2"], "v": [1, 2]}), append_name="u0")
    a = k.create_branch("a")
    a.upsert(pa.table({"key": ["new", "k1", "a-only"], "v": [10, 11, 12]}), append_name="ua")
    k.upsert(pa.table({"key": ["new", "m-only"], "v": [20, 21]}), append_name="um")
    before = head_state_keyed(k)
    with pytest.raises(MergeConflict) as info:
        k.merge("a")
    assert head_state_keyed(k) == before
    assert [(c.kind, c.where, c.source) for c in info.value.details] == [
        ("key", "ua", "1 key(s) inserted")
    ]
    with pytest.raises(omnitable.ValidationError, match="both branches inserted the same keys"):
        k.merge("a", strategy="theirs")
    assert head_state_keyed(k) == before
    result = k.merge("a", strategy="ours")  # the source's row of key "new" is left out
    assert [c.kind for c in result.resolved] == ["key"]
    assert _by_key(k) == {"k1": 11, "k2": 2, "new": 20, "m-only": 21, "a-only": 12}
    assert k.count() == 5  # keys unique among live rows: the index answers
    assert k.lookup(["new", "a-only"]).column("v").to_pylist() == [20, 12]
    assert k.merge("a").version is None


def test_keyed_table_ours_on_a_source_batch_with_deletes(wh: omnitable.Warehouse) -> None:
    """The rows "ours" leaves out add to the rows the source deleted in the copied batch."""
    k = wh.create_table("k", {"key": "string", "v": "bigint"}, key="key")
    k.upsert(pa.table({"key": ["k1"], "v": [1]}), append_name="u0")
    a = k.create_branch("a")
    a.upsert(pa.table({"key": ["p", "q", "r"], "v": [10, 11, 12]}), append_name="ua")
    a.delete(ids=[r[ROW_ID] for r in a.lookup(["p"], [ROW_ID]).to_pylist()])
    k.upsert(pa.table({"key": ["q", "p"], "v": [20, 21]}), append_name="um")
    with pytest.raises(MergeConflict, match="1 key"):  # only q: p is deleted on a
        k.merge("a")
    k.merge("a", strategy="ours")
    assert _by_key(k) == {"k1": 1, "q": 20, "p": 21, "r": 12} and k.count() == 4


def head_state_keyed(k: omnitable.Table) -> tuple[int, int, dict[str, int]]:
    return k.version, len(k.history()), _by_key(k)


def _by_key(k: omnitable.Table) -> dict[str, int]:
    got = k.read(["key", "v"]).to_pylist()
    return {r["key"]: r["v"] for r in got}


def _current(t: omnitable.Table) -> dict[str, str]:
    return {f.name: f.version for f in t.features()}


def test_feature_version_changed_on_both(t: omnitable.Table) -> None:
    t.register(omnitable.sql_feature("s_len", "length(s)", "int", "1"))
    a = t.create_branch("a")
    a.register(omnitable.sql_feature("s_len", "length(s) + 1", "int", "2"))
    t.register(omnitable.sql_feature("s_len", "length(s) + 2", "int", "3"))
    a.register(omnitable.sql_feature("y2", "y * 2", "double", "1"))  # only on a: merged
    assert _refused(t, "a") == [("feature", "s_len", None, "2", "3", ())]
    assert _current(t) == {"s_len": "3"}
    for strategy, version in (("ours", "3"), ("theirs", "2")):
        into = t.create_branch(f"into-{strategy}")
        result = into.merge("a", strategy=strategy)
        assert [c.kind for c in result.resolved] == ["feature"]
        assert _current(into) == {"s_len": version, "y2": "1"}
    assert _current(t) == {"s_len": "3"}
