"""A model of the three-way merge (docs/branches.md, "Merging"), checked with hypothesis on
SQLite and local Spark: from a common ancestor (three fragments of two rows; ``a`` and ``b``
in one column group, ``c`` in another), branch ``a`` and ``main`` each apply a drawn list of
updates (some rewriting a value it already had) and deletes. A pandas-free model of each side
says which (fragment, column) cells it changed, which rows it deleted and every value; from it:

- the conflicts: a cell both sides changed, and a row one side deleted (and the other did not)
  whose value the other side changed in a column it changed in that fragment;
- with none, ``merge(strategy="fail")`` commits and the read equals both sides applied: each
  cell from the side that changed it, deletes a union;
- with some, ``MergeConflict.details`` names exactly those, nothing is committed, and "ours" /
  "theirs" (merged into branches of main's head) give the documented result.

Every merged table read through Spark equals the Python read.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID, MergeConflict

pytestmark = pytest.mark.spark

COLS = ("a", "b", "c")
ROWS, PER_FRAGMENT = 6, 2
_names = itertools.count()

Op = tuple[str, str, frozenset[int], bool]  # (update | delete, column, rows x, same value)
_rows = st.frozensets(st.integers(0, ROWS - 1), min_size=1, max_size=2)
_op = st.one_of(
    st.tuples(st.just("update"), st.sampled_from(COLS), _rows, st.booleans()),
    st.tuples(st.just("delete"), st.just(""), _rows, st.just(False)),
)
_ops = st.lists(_op, min_size=1, max_size=3)


def _base(x: int) -> dict[str, Any]:
    return {"a": x, "b": f"b{x}", "c": float(x)}


@dataclass
class Side:
    """One branch's state in the model: values of every row (deleted ones too), deleted rows,
    and the (fragment index, column) cells it rewrote."""

    tag: int
    values: dict[int, dict[str, Any]] = field(
        default_factory=lambda: {x: _base(x) for x in range(ROWS)}
    )
    deleted: set[int] = field(default_factory=set)
    changed: set[tuple[int, str]] = field(default_factory=set)
    commits: int = 0

    def new_value(self, col: str, n: int) -> Any:
        k = 1000 * self.tag + n
        return {"a": k, "b": f"v{k}", "c": k + 0.5}[col]

    def apply(self, t: omnitable.Table, ids: dict[int, int], op: Op) -> None:
        kind, col, xs, same = op
        live = sorted(x for x in xs if x not in self.deleted)
        if not live:
            return
        if kind == "delete":
            t.delete(ids=[ids[x] for x in live])
            self.deleted.update(live)
        else:
            vals = [_base(x)[col] if same else self.new_value(col, self.commits) for x in live]
            t.update(pa.table({ROW_ID: [ids[x] for x in live], col: vals}), [col])
            for x, v in zip(live, vals, strict=True):
                self.values[x][col] = v
                self.changed.add((x // PER_FRAGMENT, col))
        self.commits += 1


def _conflicts(src: Side, dst: Side) -> set[tuple[Any, ...]]:
    """(kind, fragment index, column, source, target, rows) of every conflict of merging
    ``src`` into ``dst``."""
    out: set[tuple[Any, ...]] = set()
    for frag, col in src.changed & dst.changed:
        out.add(("cell", frag, col))
    for deleter, other, names in ((src, dst, ("deleted", "updated")),
                                  (dst, src, ("updated", "deleted"))):  # fmt: skip
        gone = deleter.deleted - other.deleted
        for frag, col in other.changed:
            offsets = tuple(
                x % PER_FRAGMENT
                for x in sorted(gone)
                if x // PER_FRAGMENT == frag and other.values[x][col] != _base(x)[col]
            )
            if offsets:
                out.add(("rows", frag, col, *names, offsets))
    return out


def _merged(
    src: Side, dst: Side, strategy: str, conflicts: set[tuple[Any, ...]]
) -> dict[int, tuple[Any, ...]]:
    """The rows {x: (a, b, c)} the merge must read: every cell from the side that changed it
    (both: the strategy's), deletes a union less the rows the strategy keeps ("ours": those
    the source deleted and the target updated; "theirs": the other way)."""
    keep = {
        c[1] * PER_FRAGMENT + offset
        for c in conflicts
        if c[0] == "rows" and (c[3] == "deleted") == (strategy == "ours")
        for offset in c[5]
    }
    out = {}
    for x in range(ROWS):
        if x in (src.deleted | dst.deleted) - keep:
            continue
        cells = [(x // PER_FRAGMENT, col) for col in COLS]
        out[x] = tuple(
            (src if cell in src.changed and (cell not in dst.changed or strategy == "theirs")
             else dst).values[x][cell[1]]
            for cell in cells
        )  # fmt: skip
    return out


def _read(t: omnitable.Table) -> dict[int, tuple[Any, ...]]:
    got = t.read(["x", *COLS]).to_pylist()
    return {r["x"]: tuple(r[c] for c in COLS) for r in got}


def _spark_read(t: omnitable.Table, spark: Any) -> dict[int, tuple[Any, ...]]:
    got = t.to_spark(spark).select("x", *COLS).collect()
    return {r["x"]: tuple(r[c] for c in COLS) for r in got}


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Any:
    warehouse = omnitable.connect(str(tmp_path_factory.mktemp("merge-model") / "wh"))
    yield warehouse
    warehouse.close()


def _ancestor(wh: omnitable.Warehouse) -> tuple[omnitable.Table, dict[int, int], list[str]]:
    t = wh.create_table(
        f"m{next(_names)}",
        {"x": "bigint", "a": "bigint", "b": "string", "c": "double"},
        groups={"g2": ["c"]},
    )
    base = [{"x": x, **_base(x)} for x in range(ROWS)]
    t.append(pa.Table.from_pylist(base, t.schema.remove(0).remove(0)), "b1",
             target_fragment_rows=PER_FRAGMENT)  # fmt: skip
    got = t.read([ROW_ID, "x"])
    ids = dict(zip(got.column("x").to_pylist(), got.column(ROW_ID).to_pylist(), strict=True))
    paths = [f.path for f in t.snapshot().fragments]
    assert [f.row_count for f in t.snapshot().fragments] == [PER_FRAGMENT] * 3
    return t, ids, paths


def _delete(*xs: int) -> Op:
    return ("delete", "", frozenset(xs), False)


def _update(col: str, *xs: int, same: bool = False) -> Op:
    return ("update", col, frozenset(xs), same)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops_a=_ops, ops_main=_ops)
@example(ops_a=[_update("a", 0), _delete(3)], ops_main=[])  # a fast-forward
@example(ops_a=[_delete(1)], ops_main=[_update("a", 1), _delete(1)])  # deleted on both
@example(ops_a=[_delete(0)], ops_main=[_update("b", 0, same=True)])  # a rewrite, no change
@example(ops_a=[_update("c", 2, 3)], ops_main=[_delete(2), _update("c", 4)])
def test_merge_equals_the_model(
    wh: omnitable.Warehouse, spark: Any, ops_a: list[Op], ops_main: list[Op]
) -> None:
    t, ids, paths = _ancestor(wh)
    a = t.create_branch("a")
    src, dst = Side(tag=1), Side(tag=2)
    for op in ops_a:
        src.apply(a, ids, op)
    for op in ops_main:
        dst.apply(t, ids, op)
    expected = _conflicts(src, dst)
    if not expected:
        result = t.merge("a")
        assert (result.version is None) == (src.commits == 0)
        assert result.fast_forward == (src.commits > 0 and dst.commits == 0)
        assert _read(t) == _merged(src, dst, "fail", expected) == _spark_read(t, spark)
        return
    head = (t.version, _read(t))
    with pytest.raises(MergeConflict) as info:
        t.merge("a")
    got = {(c.kind, paths.index(c.where), c.column) + ((c.source, c.target, c.rows)
           if c.kind == "rows" else ()) for c in info.value.details}  # fmt: skip
    assert got == expected
    assert (t.version, _read(t)) == head
    for strategy in ("ours", "theirs"):
        into = t.create_branch(strategy)
        into.merge("a", strategy=strategy)
        want = _merged(src, dst, strategy, expected)
        assert _read(into) == want == _spark_read(into, spark), strategy
