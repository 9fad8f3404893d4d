"""``Table.merge`` and ``Table.rebase`` on SQLite (docs/branches.md, "Merging"): fast-forwards,
clean three-way merges at column grain, every kind of conflict with the three strategies,
merging again, rebasing, and bad input. Every case compares the merged read with a model (the
base rows with both branches' changes applied) and checks that a refused merge commits
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.dataops.merge import MergeConflict

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


# -- fast-forward ---------------------------------------------------------------------------


def test_fast_forward_makes_the_branch_rows_main(t: omnitable.Table) -> None:
    fork = t.version
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1", 7: "A7"})
    a.append(new_rows([20, 21]), "b3")
    delete_x(a, 3)
    a.rename_column("y", "score")
    result = t.merge("a")
    assert result.fast_forward
    assert (result.version, result.base_version, result.source_version) == (
        a.version,
        fork,
        a.version,
    )
    assert t.version == a.version
    want = without(with_values(BASE, 0, {1: "A1", 7: "A7"}), 3)
    want |= {20: ("n20", 20.0), 21: ("n21", 21.0)}
    assert rows(t, ("s", "score")) == want == rows(a, ("s", "score"))
    assert t.schema.names == a.schema.names and "y" not in t.schema.names
    assert [c.op for c in t.history()][:4] == ["rename_column", "delete", "append", "update"]
    assert {b.name for b in t.batches()} == {"b1", "b2", "b3"}


def test_fast_forward_twice_and_the_branch_goes_on(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    first = t.merge("a")
    assert first.fast_forward
    [ref] = [r for r in t.branches() if r.name == "a"]
    assert (ref.parent, ref.fork_version) == ("main", first.version)
    set_col(a, "y", {2: 22.0})  # the branch keeps working after the merge
    assert rows(t) == with_values(BASE, 0, {1: "A1"})  # ... and main does not see it
    second = t.merge("a")
    assert second.fast_forward and second.base_version == first.version
    assert rows(t) == with_values(with_values(BASE, 0, {1: "A1"}), 1, {2: 22.0}) == rows(a)
    assert t.merge("a").version is None  # nothing new


def test_fast_forward_keeps_tags_and_child_branches(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    a.create_tag("after-a1")
    child = a.create_branch("child")  # forked from a's head before the merge
    set_col(child, "s", {6: "C6"})
    set_col(a, "s", {2: "A2"})
    delete_x(a, 4)
    pinned = rows(a, tag="after-a1")
    assert t.merge("a").fast_forward
    assert rows(t, tag="after-a1") == pinned == with_values(BASE, 0, {1: "A1"})
    [tag] = t.tags()
    assert tag.parent == "main"  # the tagged version is main's now
    assert rows(child) == with_values(BASE, 0, {1: "A1", 6: "C6"})
    grandchild = a.create_branch("grandchild")  # forked after the merge
    set_col(grandchild, "y", {0: 100.0})
    want = without(with_values(BASE, 0, {1: "A1", 2: "A2"}), 4)
    assert rows(grandchild) == with_values(want, 1, {0: 100.0})
    assert rows(t) == want
    # the child still merges into main, three-way (main moved since it forked)
    result = t.merge("child")
    assert not result.fast_forward
    assert rows(t) == with_values(want, 0, {6: "C6"})


# -- three-way, clean -----------------------------------------------------------------------


def test_disjoint_columns_of_the_same_fragments(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1", 6: "A6", 10: "A10"})  # every fragment, column s
    set_col(t, "y", {2: 2.5, 7: 7.5, 11: 11.5})  # the same fragments, column y
    head = t.version
    result = t.merge("a")
    assert not result.fast_forward and not result.resolved and result.cells == 3
    assert result.version == t.version > head and t.history()[0].op == "merge"
    want = with_values(with_values(BASE, 0, {1: "A1", 6: "A6", 10: "A10"}), 1,
                       {2: 2.5, 7: 7.5, 11: 11.5})  # fmt: skip
    assert rows(t) == want
    assert rows(a) == with_values(BASE, 0, {1: "A1", 6: "A6", 10: "A10"})  # a is unchanged


def test_disjoint_batches_and_new_batches(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})  # b1
    a.append(new_rows([30], "a"), "from_a")
    set_col(t, "s", {10: "M10"})  # b2
    t.append(new_rows([40], "m"), "from_main")
    result = t.merge("a")
    assert (result.cells, result.batches) == (1, 1)
    want = with_values(BASE, 0, {1: "A1", 10: "M10"}) | {30: ("a30", 30.0), 40: ("m40", 40.0)}
    assert rows(t) == want
    assert {b.name for b in t.batches()} == {"b1", "b2", "from_a", "from_main"}


def test_deletes_of_different_rows_of_one_fragment_are_a_union(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    delete_x(a, 1, 2)
    delete_x(t, 3)
    delete_x(t, 1)  # also deleted on a: not a conflict
    result = t.merge("a")
    assert result.deletes == 1 and not result.resolved
    assert rows(t) == without(BASE, 1, 2, 3)


def test_source_adds_and_renames_columns(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.rename_column("s", "label")
    ids = ids_of(a)
    a.add_columns(pa.table({ROW_ID: [ids[3], ids[8]], "z": [3, 8]}))
    set_col(a, "label", {4: "A4"})
    set_col(t, "y", {4: 44.0})
    result = t.merge("a")
    assert result.columns == 2 and not result.resolved
    assert t.schema.names[-4:] == ["x", "label", "y", "z"]
    want = with_values(with_values(BASE, 0, {4: "A4"}), 1, {4: 44.0})
    want = {x: (*r, {3: 3, 8: 8}.get(x)) for x, r in want.items()}
    assert rows(t, ("label", "y", "z")) == want


# -- conflicts and strategies ---------------------------------------------------------------


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


def test_column_renamed_differently(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.rename_column("s", "sa")
    t.rename_column("s", "sm")
    assert _refused(t, "a", ("sm", "y")) == [("column", "s", "s", "sa (active)", "sm (active)", ())]
    for strategy, name in (("ours", "sm"), ("theirs", "sa")):
        into = t.create_branch(f"into-{strategy}")
        into.merge("a", strategy=strategy)
        assert [n for n in into.schema.names if n.startswith("s")] == [name]
        assert rows(into, (name, "y")) == BASE


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


# -- merging again, rebasing ----------------------------------------------------------------


def test_merging_again_brings_only_the_newer_changes(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "y", {2: 22.0})
    first = t.merge("a")
    assert not first.fast_forward and first.source_version == a.version
    set_col(t, "s", {1: "M1"})  # main overwrites the cell it adopted from a
    set_col(a, "s", {6: "A6"})  # a changes another fragment
    second = t.merge("a")  # base: a's version the first merge brought, not the fork
    assert second.base_version == first.source_version and second.cells == 1
    assert not second.resolved
    assert rows(t) == with_values(with_values(BASE, 0, {1: "M1", 6: "A6"}), 1, {2: 22.0})


def test_merging_with_nothing_new_commits_nothing(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    assert t.merge("a").version is None  # a never committed
    set_col(a, "s", {1: "A1"})
    set_col(t, "y", {2: 22.0})
    t.merge("a")
    before = head_state(t)
    result = t.merge("a")
    assert result.version is None and not result.fast_forward and result.cells == 0
    assert head_state(t) == before
    assert a.merge("main").version is not None  # the other way there is main's change
    assert rows(a) == rows(t)


def test_merge_commits_when_the_target_already_had_everything(t: omnitable.Table) -> None:
    """ "ours" keeping every conflict still commits: the recorded source version is the next
    merge's base, so the conflict is not reported again."""
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "s", {2: "M2"})
    before = rows(t)
    result = t.merge("a", strategy="ours")
    assert result.version == t.version and result.cells == 0 and len(result.resolved) == 1
    assert rows(t) == before
    assert t.merge("a").version is None
    set_col(a, "y", {3: 33.0})
    assert not t.merge("a").resolved  # only the new change, no old conflict
    assert rows(t) == with_values(before, 1, {3: 33.0})


def test_rebase_then_merge_back(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    a.append(new_rows([30], "a"), "from_a")
    set_col(t, "s", {6: "M6"})
    t.append(new_rows([40], "m"), "from_main")
    main_before = head_state(t)
    rebased = t.rebase("a")
    assert not rebased.fast_forward and rebased.version == a.version
    assert head_state(t) == main_before  # a rebase commits on the branch only
    want = with_values(BASE, 0, {1: "A1", 6: "M6"}) | {30: ("a30", 30.0), 40: ("m40", 40.0)}
    assert rows(a) == want
    set_col(a, "y", {6: 66.0})  # tested against the current main, the branch goes on
    back = t.merge("a")
    assert back.base_version == rebased.source_version  # the rebase is the merge base
    assert (back.cells, back.batches) == (2, 1) and not back.resolved
    assert rows(t) == with_values(want, 1, {6: 66.0}) == rows(a)
    assert t.rebase("a").version is not None  # main's merge commit is new to a
    assert t.rebase("a").version is None


def test_rebase_conflict_with_the_strategies(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "s", {2: "M2"})
    a_before = head_state(a)
    with pytest.raises(MergeConflict):
        t.rebase("a")
    assert head_state(a) == a_before
    t.rebase("a", strategy="ours")  # ours: the branch's side
    assert rows(a) == with_values(BASE, 0, {1: "A1"})
    t.merge("a")  # the conflict was settled on a: main takes a's cell
    assert rows(t) == with_values(BASE, 0, {1: "A1"})


# -- bad input ------------------------------------------------------------------------------


def test_bad_input_commits_nothing(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    before, a_before = head_state(t), head_state(a)
    with pytest.raises(omnitable.ValidationError, match="into itself"):
        t.merge("main")
    with pytest.raises(omnitable.ValidationError, match="into itself"):
        t.merge("a", into="a")
    with pytest.raises(omnitable.ValidationError, match="into itself"):
        t.rebase("main")
    with pytest.raises(omnitable.NotFoundError):
        t.merge("nope")
    with pytest.raises(omnitable.NotFoundError):
        t.merge("a", into="nope")
    with pytest.raises(omnitable.NotFoundError):
        t.rebase("nope")
    for strategy in ("", "both", "OURS", "Theirs"):
        with pytest.raises(omnitable.ValidationError, match="strategy"):
            t.merge("a", strategy=strategy)
    t.create_tag("v1")
    with pytest.raises(omnitable.NotFoundError):  # a tag is not a branch
        t.merge("v1")
    bad = ("", "a/b", "a.b", "a b", "12", "x'; DROP TABLE refs; --", "-a", "a" * 101, "a\n")
    for name in bad:
        with pytest.raises(omnitable.ValidationError):
            t.merge(name)
        with pytest.raises(omnitable.ValidationError):
            t.merge("a", into=name)
    with pytest.raises(omnitable.ValidationError):
        t.publish("a", into="")
    with pytest.raises(omnitable.ValidationError):
        t.create_branch("b\n")
    assert head_state(t) == before and head_state(a) == a_before
    assert [r.name for r in t.branches()] == ["a", "main"]


# -- more shapes ----------------------------------------------------------------------------


def test_fast_forward_over_deleted_rows_keeps_time_travel(t: omnitable.Table) -> None:
    """a deletes another row of a fragment main had deleted rows in (its vector replaces
    main's) and rewrites a cell main had rewritten: after the fast-forward, every version of
    either branch still reads what it read, and the emptied branch can be deleted."""
    delete_x(t, 0)
    set_col(t, "s", {2: "M2"})
    t.create_tag("before")
    pinned = rows(t)
    a = t.create_branch("a")
    delete_x(a, 1)
    mid = a.version
    mid_rows = rows(a)
    set_col(a, "s", {3: "A3"})
    assert t.merge("a").fast_forward
    assert rows(t, tag="before") == pinned == without(with_values(BASE, 0, {2: "M2"}), 0)
    assert rows(t, version=mid) == mid_rows == without(pinned, 1)
    assert rows(t) == with_values(without(pinned, 1), 0, {3: "A3"})
    t.delete_branch("a")
    assert rows(t) == with_values(without(pinned, 1), 0, {3: "A3"})
    assert rows(t, version=mid) == mid_rows


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


def test_fast_forward_chain_over_replaced_vectors_and_files(t: omnitable.Table) -> None:
    """main <- b <- a, each replacing its parent's deletion vector and file of one fragment:
    a fast-forwards into b, b into main; every branch and tag reads what it read, a goes on,
    and the branches and tags can be deleted after."""
    delete_x(t, 0)
    b = t.create_branch("b")
    delete_x(b, 1)  # b's vector replaces main's
    set_col(b, "s", {2: "B2"})
    b.create_tag("tb")
    a = b.create_branch("a")
    delete_x(a, 3)  # a's vector replaces b's
    set_col(a, "s", {2: "A2"})  # a's file replaces b's
    a.create_tag("ta")
    main_rows, a_rows = rows(t), rows(a)
    tags = {n: rows(t, tag=n) for n in ("tb", "ta")}
    assert a_rows == without(with_values(BASE, 0, {2: "A2"}), 0, 1, 3)
    assert b.merge("a").fast_forward
    assert (rows(b), rows(t)) == (a_rows, main_rows)
    assert t.merge("b").fast_forward
    assert rows(t) == rows(b) == rows(a) == a_rows
    assert {n: rows(t, tag=n) for n in tags} == tags
    set_col(a, "y", {4: 44.0})
    assert t.merge("a").fast_forward
    t.delete_tag("ta")
    t.delete_tag("tb")
    t.delete_branch("a")
    t.delete_branch("b")
    assert rows(t) == with_values(a_rows, 1, {4: 44.0})
    assert [r.name for r in t.branches()] == ["main"]
