"""Batches keep their read position (catalog schema v7, docs/catalog.md "Read order"): a
rollback, a revert and a branch merge bring a batch back in the place it had, a replace moves
it last, and time travel reads every version in its own order; ``Table.batches()`` and the rows
of ``read()`` agree, on SQLite and PostgreSQL (``wh``)."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc

import omnitable

_names = itertools.count()


def _order(t: omnitable.Table, version: int | None = None) -> tuple[list[str], list[int]]:
    """Batch names and the rows' ``x`` values, in read order."""
    names = [b.name for b in t.batches(version)]
    return names, t.read(["x"], version=version)["x"].to_pylist()


def _table(wh: omnitable.Warehouse, *names: str) -> omnitable.Table:
    """A table with one batch per name, appended in that order: batch ``names[i]`` holds
    ``x = 10 * i`` and ``10 * i + 1`` (two fragments)."""
    t = wh.create_table(f"bo{next(_names)}", {"x": "bigint"})
    for i, name in enumerate(names):
        t.append(pa.table({"x": [10 * i, 10 * i + 1]}), name, target_fragment_rows=1)
    return t


def _positions(t: omnitable.Table) -> dict[str, int]:
    """The catalog's read position of each visible batch of ``t``'s head, by name."""
    return {b.name: b.position for b in t.snapshot().batches}


def test_a_replace_moves_the_batch_last_and_time_travel_keeps_each_order(
    wh: omnitable.Warehouse,
) -> None:
    t = _table(wh, "b0", "b1", "b2")
    before = t.version
    t.append(pa.table({"x": [5]}), "b1", mode="replace")
    assert _order(t) == (["b0", "b2", "b1"], [0, 1, 20, 21, 5])
    assert _positions(t)["b1"] == t.version
    assert _order(t, before) == (["b0", "b1", "b2"], [0, 1, 10, 11, 20, 21])


def test_rollback_brings_batches_back_in_their_place(wh: omnitable.Warehouse) -> None:
    t = _table(wh, "b0", "b1", "b2")
    target = t.version
    positions = _positions(t)
    t.append(pa.table({"x": [5]}), "b0", mode="replace")
    t.delete(pc.field("x") == 20)
    t.append(pa.table({"x": [7]}), "b3")
    replaced = t.version
    t.rollback(target)
    assert _order(t) == (["b0", "b1", "b2"], [0, 1, 10, 11, 20, 21])
    assert _positions(t) == positions  # the copies keep the rows' positions
    assert _order(t, replaced) == (["b1", "b2", "b0", "b3"], [10, 11, 21, 5, 7])
    t.append(pa.table({"x": [8]}), "b4")  # new work after the rollback goes last
    assert _order(t)[0] == ["b0", "b1", "b2", "b4"]
    t.rollback(replaced)  # forward again: the replacing b0 is back after b2
    assert _order(t) == (["b1", "b2", "b0", "b3"], [10, 11, 21, 5, 7])


def test_revert_of_a_replace_restores_the_batch_in_its_place(wh: omnitable.Warehouse) -> None:
    t = _table(wh, "b0", "b1")
    t.append(pa.table({"x": [5]}), "b0", mode="replace")
    replace = t.version
    t.append(pa.table({"x": [20]}), "b2")
    assert _order(t) == (["b1", "b0", "b2"], [10, 11, 5, 20])
    t.revert(replace)
    assert _order(t) == (["b0", "b1", "b2"], [0, 1, 10, 11, 20])
    assert _order(t, replace) == (["b1", "b0"], [10, 11, 5])  # history reads as it did
    t.revert(t.version)  # reverting the revert puts the replacement back in its place
    assert _order(t) == (["b1", "b0", "b2"], [10, 11, 5, 20])


def test_merge_of_a_branch_that_replaced_a_batch_keeps_its_position(
    wh: omnitable.Warehouse,
) -> None:
    """The branch's replacement of b0 (its own version) lands before b2, which main appended
    after it: the merge copies the batch with the position it has on the branch."""
    t = _table(wh, "b0", "b1")
    fix = t.create_branch("fix")
    fix.append(pa.table({"x": [5]}), "b0", mode="replace")
    on_branch = _order(fix)
    assert on_branch == (["b1", "b0"], [10, 11, 5])
    t.append(pa.table({"x": [20]}), "b2")
    result = t.merge("fix")
    assert not result.fast_forward and result.batches == 1  # b0 copied from the branch
    assert _order(t) == (["b1", "b0", "b2"], [10, 11, 5, 20])
    assert _positions(t)["b0"] == _positions(fix)["b0"]
    assert _order(fix) == on_branch
    t.rollback(t.version - 1)  # before the merge: b0 back in front
    assert _order(t) == (["b0", "b1", "b2"], [0, 1, 10, 11, 20])


def test_rebase_keeps_the_position_of_what_it_brings_in(wh: omnitable.Warehouse) -> None:
    t = _table(wh, "b0", "b1")
    fix = t.create_branch("fix")
    fix.append(pa.table({"x": [30]}), "b3")
    t.append(pa.table({"x": [5]}), "b0", mode="replace")  # after b3 was appended on the branch
    t.rebase("fix")
    assert _order(fix) == (["b1", "b3", "b0"], [10, 11, 30, 5])
    t.merge("fix")  # a fast-forward now: main reads like the branch
    assert _order(t) == _order(fix)
