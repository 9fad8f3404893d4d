"""Shared set-up of the merge tests: a small table of two batches (``b1``: two fragments of
five rows, ``b2``: one of two rows) with ``x`` and ``s`` in group ``base`` and ``y`` in group
``g2``, and reads of it as ``{x: (s, y)}`` to compare with a model."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import omnitable
from omnitable import ROW_ID

Rows = dict[int, tuple[Any, ...]]

BASE: Rows = {i: (f"r{i}", float(i)) for i in range(12)}


def make_table(wh: omnitable.Warehouse, name: str = "web") -> omnitable.Table:
    t = wh.create_table(name, {"x": "bigint", "s": "string", "y": "double"}, groups={"g2": ["y"]})
    t.append(_rows(range(10)), "b1", target_fragment_rows=5)
    t.append(_rows(range(10, 12)), "b2")
    return t


def _rows(xs: range | list[int], s: str = "r") -> pa.Table:
    return pa.table(
        {"x": list(xs), "s": [f"{s}{i}" for i in xs], "y": [float(i) for i in xs]},
        schema=pa.schema([("x", pa.int64()), ("s", pa.string()), ("y", pa.float64())]),
    )


def new_rows(xs: list[int], s: str = "n") -> pa.Table:
    """Rows ``x`` in ``xs`` with ``s = f"{s}{x}"`` and ``y = x``."""
    return _rows(xs, s)


def ids_of(t: omnitable.Table) -> dict[int, int]:
    """``x`` -> ``_ai_unique_id_`` of the live rows."""
    got = t.read([ROW_ID, "x"])
    return dict(zip(got.column("x").to_pylist(), got.column(ROW_ID).to_pylist(), strict=True))


def rows(t: omnitable.Table, cols: tuple[str, ...] = ("s", "y"), **kw: Any) -> Rows:
    """``{x: (values of cols)}`` of the live rows (``kw``: read's version, branch, tag)."""
    got = t.read(["x", *cols], **kw).to_pylist()
    out = {r["x"]: tuple(r[c] for c in cols) for r in got}
    assert len(out) == len(got), "x is unique"
    return out


def set_col(t: omnitable.Table, col: str, values: dict[int, Any]) -> None:
    """Update column ``col`` of the rows ``x`` -> value (one commit)."""
    ids = ids_of(t)
    t.update(pa.table({ROW_ID: [ids[x] for x in values], col: list(values.values())}), [col])


def delete_x(t: omnitable.Table, *xs: int) -> None:
    ids = ids_of(t)
    t.delete(ids=[ids[x] for x in xs])


def fragment_paths(t: omnitable.Table) -> list[str]:
    """The fragments' paths in row order: [b1 rows 0-4, b1 rows 5-9, b2]."""
    return [f.path for f in t.snapshot().fragments]


def with_values(base: Rows, col: int, values: dict[int, Any]) -> Rows:
    """``base`` with position ``col`` of rows ``x`` set to the values."""
    out = dict(base)
    for x, v in values.items():
        row = list(out[x])
        row[col] = v
        out[x] = tuple(row)
    return out


def without(base: Rows, *xs: int) -> Rows:
    return {x: r for x, r in base.items() if x not in xs}


def head_state(t: omnitable.Table, cols: tuple[str, ...] = ("s", "y")) -> tuple[int, int, Rows]:
    """(head version, number of commits, rows) of the table's branch: what a failed merge must
    leave unchanged."""
    return t.version, len(t.history()), rows(t, cols)
