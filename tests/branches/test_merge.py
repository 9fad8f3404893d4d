"""``Table.merge`` and ``Table.rebase`` on SQLite (docs/branches.md, "Merging"): fast-forwards
(chains of them, tags, child branches, time travel), clean three-way merges at column grain,
merging again, rebasing, and bad input. Every case compares the merged read with a model (the
base rows with both branches' changes applied); a refused merge commits nothing. Conflicts are
in test_merge_conflicts.py, races in test_merge_races.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID, MergeConflict

from .merge_helpers import (
    BASE,
    delete_x,
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
