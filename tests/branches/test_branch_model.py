"""Property test: random sequences of appends, deletes by id, updates and renames, applied to a
branch and, interleaved, to main, read like a pandas model per branch (on SQLite and PostgreSQL,
``wh``). Neither line's operations leak into the other; each branch's earlier versions keep
reading as they were."""

from __future__ import annotations

import itertools

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import APPEND_NAME, ROW_ID

_names = itertools.count()
_values = itertools.count(1000)

OP = st.tuples(
    st.sampled_from(["main", "exp"]),
    st.sampled_from(["append", "delete", "update", "rename"]),
    st.integers(1, 4),  # rows to append, or how many rows to delete / update
    st.integers(0, 50),  # which rows (an offset into the live rows)
)


class Line:
    """One branch: the table bound to it, its pandas model (columns batch, x, s, under the
    value column's current name ``col``) and its states by version."""

    def __init__(self, t: omnitable.Table, model: pd.DataFrame, col: str) -> None:
        self.t, self.model, self.col = t, model, col
        self.states: dict[int, pd.DataFrame] = {}

    def read(self, version: int | None = None) -> pd.DataFrame:
        got = self.t.read(version=version).to_pandas().drop(columns=[ROW_ID])
        return _norm(got.rename(columns={APPEND_NAME: "batch"}))

    def pick(self, n: int, at: int) -> list[int]:
        """``n`` of the model's x values from offset ``at`` on (wrapping)."""
        xs = sorted(self.model[self.col].tolist())
        return [xs[(at + i) % len(xs)] for i in range(min(n, len(xs)))] if xs else []

    def ids(self, xs: list[int]) -> list[int]:
        live = self.t.read([ROW_ID, self.col]).to_pydict()
        by_x = dict(zip(live[self.col], live[ROW_ID], strict=True))
        return [by_x[x] for x in xs]

    def apply(self, op: str, n: int, at: int, step: int) -> None:
        col = self.col
        if op == "append":
            xs = [next(_values) for _ in range(n)]
            name = f"{self.t.current_branch}{step}"
            self.t.append(pa.table({col: pa.array(xs, pa.int64()), "s": [f"s{x}" for x in xs]}),
                          name, target_fragment_rows=2)  # fmt: skip
            new = pd.DataFrame({"batch": name, col: xs, "s": [f"s{x}" for x in xs]})
            self.model = pd.concat([self.model, new], ignore_index=True)
        elif op == "delete" and (xs := sorted(set(self.pick(n, at)))):
            self.t.delete(ids=self.ids(xs))
            self.model = self.model[~self.model[col].isin(xs)]
        elif op == "update" and (xs := sorted(set(self.pick(n, at)))):
            data = pa.table(
                {ROW_ID: pa.array(self.ids(xs), pa.int64()), "s": [f"u{step}"] * len(xs)}
            )
            self.t.update(data, ["s"])
            self.model.loc[self.model[col].isin(xs), "s"] = f"u{step}"
        elif op == "rename":
            self.t.rename_column(col, f"x{step}")
            self.model = self.model.rename(columns={col: f"x{step}"})
            self.col = f"x{step}"
        self.states[self.t.version] = _norm(self.model)


def _norm(df: pd.DataFrame) -> pd.DataFrame:
    xcol = next(c for c in df.columns if c not in ("batch", "s"))
    out = df[["batch", xcol, "s"]].astype({xcol: "int64", "s": object, "batch": object})
    return out.sort_values(xcol).reset_index(drop=True)


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=st.lists(OP, min_size=1, max_size=8))
def test_branch_and_main_read_like_their_models(
    wh: omnitable.Warehouse, ops: list[tuple[str, str, int, int]]
) -> None:
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint", "s": "string"})
    xs = [next(_values) for _ in range(5)]
    t.append(pa.table({"x": pa.array(xs, pa.int64()), "s": [f"s{x}" for x in xs]}), "b0",
             target_fragment_rows=2)  # fmt: skip
    start = pd.DataFrame({"batch": "b0", "x": xs, "s": [f"s{x}" for x in xs]})
    lines = {"main": Line(t, start.copy(), "x"), "exp": Line(t.create_branch("exp"), start, "x")}
    for line in lines.values():
        line.states[t.version] = _norm(line.model)
    for step, (target, op, n, at) in enumerate(ops):
        lines[target].apply(op, n, at, step)
    for line in lines.values():
        pd.testing.assert_frame_equal(line.read(), _norm(line.model))
        for version, state in line.states.items():
            pd.testing.assert_frame_equal(line.read(version), state)
