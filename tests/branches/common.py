"""Shared set-up of the branch tests: a table with two batches on main, and readers that turn a
table (or a ref of it) into rows comparable with a plain Python model."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import omnitable
from omnitable import APPEND_NAME, ROW_ID

Row = dict[str, Any]


def base_table(wh: omnitable.Warehouse, name: str = "t") -> omnitable.Table:
    """``name`` with batch b1 (x 0..5) and b2 (x 10..13), in fragments of 3 rows (so deletes
    and updates touch some fragments and not others)."""
    t = wh.create_table(name, {"x": "bigint", "s": "string"})
    for batch, xs in (("b1", range(6)), ("b2", range(10, 14))):
        data = pa.table({"x": pa.array(list(xs), pa.int64()), "s": [f"s{x}" for x in xs]})
        t.append(data, batch, target_fragment_rows=3)
    return t


def rows(t: omnitable.Table, **read: Any) -> list[Row]:
    """Every live row of ``t`` (``read``: version, branch, tag), ordered by id."""
    return sorted(t.read(**read).to_pylist(), key=lambda r: r[ROW_ID])


def content(t: omnitable.Table, **read: Any) -> list[tuple[Any, ...]]:
    """The rows' values without their ids (for rows whose ids the test did not choose)."""
    out = []
    for r in rows(t, **read):
        out.append(tuple(sorted((k, repr(v)) for k, v in r.items() if k != ROW_ID)))
    return sorted(out)


def model_content(model: list[Row]) -> list[tuple[Any, ...]]:
    return sorted(tuple(sorted((k, repr(v)) for k, v in r.items() if k != ROW_ID)) for r in model)


def batch(name: str, xs: list[int]) -> pa.Table:
    return pa.table({"x": pa.array(xs, pa.int64()), "s": [f"s{x}" for x in xs]})


def new_rows(name: str, xs: list[int]) -> list[Row]:
    """The model of ``batch(name, xs)`` appended (ids aside)."""
    return [{ROW_ID: None, APPEND_NAME: name, "x": x, "s": f"s{x}"} for x in xs]


def ids_where(model: list[Row], pred: Any) -> list[int]:
    return [r[ROW_ID] for r in model if pred(r)]
