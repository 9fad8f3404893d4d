"""Commit-time validation without Spark: column-group ownership under racing writers, and
staleness derived from lineage read sets (issue 10, items 2 and 3)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable._failpoints import hooked

from .helpers import commit_outputs

G = omnitable.sql_feature("g", "length(text)", "int", "1", inputs=["text"])


@pytest.fixture
def table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("t", {"text": "string"})
    t.append(pa.table({"text": ["a", "bb", "ccc", "dddd"]}), "b1", target_fragment_rows=2)
    return t


def _add_note(t: omnitable.Table) -> None:
    ids = t.read(columns=[ROW_ID]).column(ROW_ID)
    t.add_columns(pa.table({ROW_ID: ids, "note": ["n"] * len(ids)}), group="g")


@pytest.mark.parametrize(
    ("first", "second", "point"),
    [
        (_add_note, lambda t: t.register(G), "register.before_commit"),
        (lambda t: t.register(G), _add_note, "add_columns.before_commit"),
    ],
    ids=["add_columns-commits-first", "register-commits-first"],
)
def test_add_columns_and_register_racing_for_one_group_cannot_both_commit(
    table: omnitable.Table,
    first: Callable[[omnitable.Table], object],
    second: Callable[[omnitable.Table], object],
    point: str,
) -> None:
    # `second` has taken its snapshot (group 'g' unused) when `first` commits
    with (
        hooked(point, lambda: first(table)),
        pytest.raises(omnitable.CommitConflict, match="group 'g' holds .*concurrent commit"),
    ):
        second(table)
    groups = {c.name: (c.group_name, c.feature) for c in table.snapshot().columns}
    owners = {feat for name, (grp, feat) in groups.items() if grp == "g"}
    assert len(owners) == 1  # raw columns or feature g's outputs, never both


def test_a_feature_computed_from_a_replaced_input_file_is_stale(wh: omnitable.Warehouse) -> None:
    """A table that reached the bad state before read sets were validated: g's file records
    f's first file as its input, but f was recomputed (and committed) before g committed."""
    t = wh.create_table("t", {"text": "string"})
    t.append(pa.table({"text": ["a", "b"]}), "b1")
    f = omnitable.sql_feature("f", "upper(text)", "string", "1", inputs=["text"])
    g = omnitable.sql_feature("g", "lower(f)", "string", "1", inputs=["f"])
    t.register(f, g)
    frag = t.snapshot().fragments[0].fragment_id
    commit_outputs(t, f, [frag])
    first = _provider(t, frag, "f")
    commit_outputs(t, f, [frag])  # f recomputed ...
    commit_outputs(t, g, [frag], read_set={"f": first})  # ... g committed from the old file
    assert t.status().state("b1", "g") == "stale"
    plan = t.backfill("g")
    assert [[x.name for x in s.features] for s in plan.steps] == [["g"]]
    assert "recomputed after this was computed" in plan.explain()
    commit_outputs(t, g, [frag], read_set={"f": _provider(t, frag, "f")})
    assert t.status().state("b1", "g") == "done"


def _provider(t: omnitable.Table, frag: str, column: str) -> str:
    snap = t.snapshot()
    cid = snap.column(column).column_id
    p = snap.resolve(frag, [cid])[cid]
    assert p is not None
    return p.file_id
