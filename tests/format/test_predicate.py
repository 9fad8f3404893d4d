"""Simple filters evaluated by compute kernels (format/predicate.py) keep exactly the rows Acero's
filter keeps, or decline (None) and leave the filter to Acero."""

from __future__ import annotations

import math
import operator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.exceptions import ValidationError
from omnitable.format import predicate
from omnitable.format.predicate import survivors

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32(), pa.uint64(),
         pa.float32(), pa.float64()]  # fmt: skip
OPS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]
INDEX = "__row"


def _acero(where: pc.Expression, arrays: dict[str, Any]) -> np.ndarray:
    n = len(next(iter(arrays.values())))
    table = pa.table({**arrays, INDEX: pa.array(np.arange(n))})
    return table.filter(where).column(INDEX).to_numpy()


def _column(t: pa.DataType, values: list[float | None]) -> pa.Array:
    if pa.types.is_floating(t):
        return pa.array(values, t)
    info = np.iinfo(t.to_pandas_dtype())
    ints = [None if v is None or math.isnan(v) else int(min(max(v, info.min), info.max))
            for v in values]  # fmt: skip
    return pa.array(ints, t)


element = st.one_of(
    st.none(), st.floats(-300, 300), st.just(math.nan), st.sampled_from([0.0, 1.0, -1.0])
)
literals = st.one_of(
    st.integers(-200, 200), st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.5, 1.0, -0.0, 1e-300]),
)  # fmt: skip


@st.composite
def trees(draw: Any, names: list[str]) -> pc.Expression:
    if draw(st.integers(0, 3)) > 0:
        op = draw(st.sampled_from(OPS))
        return op(pc.field(draw(st.sampled_from(names))), draw(literals))
    join = draw(st.sampled_from([operator.and_, operator.or_]))
    return join(draw(trees(names)), draw(trees(names)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), types=st.lists(st.sampled_from(TYPES), min_size=1, max_size=3))
def test_equals_acero_or_declines(data: Any, types: list[pa.DataType]) -> None:
    n = data.draw(st.integers(1, 60))
    arrays = {}
    nulls = data.draw(st.booleans())  # without NULLs, numpy answers (predicate._evaluate_exact)
    for i, t in enumerate(types):
        drawn = data.draw(
            st.lists(
                element if nulls else element.filter(lambda v: v is not None),
                min_size=n,
                max_size=n,
            )
        )
        arrays[f"c{i}"] = data.draw(st.sampled_from([
            _column(t, drawn), pa.chunked_array([_column(t, drawn[: n // 2]), _column(t, drawn[n // 2 :])]),
        ]))  # fmt: skip
    where = data.draw(trees(list(arrays)))
    try:
        want = _acero(where, arrays)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        want = None  # Acero cannot evaluate it (e.g. an integer literal out of the type's range)
    try:
        got = survivors(where, arrays)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        assert want is None, f"{where}: Acero evaluates it, the kernels raise"
        return
    if got is not None:
        assert want is not None, f"{where}: Acero raises, the kernels do not"
        np.testing.assert_array_equal(got, want, err_msg=str(where))


@pytest.mark.parametrize(
    "where",
    [
        pc.field("f") < 0.01,
        pc.field("f") >= -1.5e-7,
        pc.field("i") == 3,
        pc.field("i") != -2,
        (pc.field("f") < 0.5) & (pc.field("i") > 2),
        (pc.field("f") < 0.1) | ((pc.field("i") <= 1) & (pc.field("f") > 0.9)),
        pc.field("f") < 1.0,  # prints as (f < 1)
        pc.field("f") > float("inf"),
        pc.field("f") == float("nan"),
        pc.field("i") < 2**63 - 1,
    ],
    ids=str,
)
@pytest.mark.parametrize("nulls", [True, False])
def test_the_everyday_shapes_are_evaluated_here(where: pc.Expression, nulls: bool) -> None:
    rng = np.random.default_rng(1)
    f = rng.random(1000)
    f[::7] = np.nan
    arrays = {
        "f": pa.array(f, mask=(np.arange(1000) % 11 == 0) if nulls else None),
        "i": pa.array(
            rng.integers(-5, 5, 1000), mask=(np.arange(1000) % 13 == 0) if nulls else None
        ),
    }
    got = survivors(where, arrays)
    assert got is not None
    np.testing.assert_array_equal(got, _acero(where, arrays))


@pytest.mark.parametrize(
    "where",
    [
        pc.field("f") < pa.scalar(0.5, pa.float32()),  # a literal of another type
        pc.field("s") == "a",  # strings
        pc.field("f").is_null(),
        ~(pc.field("f") < 0.5),
        pc.and_(pc.field("f") < 0.5, pc.field("f") > 0.1),  # and (not Kleene's)
        pc.field("f") < pc.field("g"),
        pc.field("missing") < 1,
        pc.field("f") + 1 < 2,
        pc.scalar(True),
    ],
    ids=str,
)
def test_other_shapes_are_left_to_acero(where: pc.Expression) -> None:
    arrays = {"f": pa.array([0.2, 0.7]), "g": pa.array([0.1, 0.9]), "s": pa.array(["a", "b"])}
    assert survivors(where, arrays) is None


def test_field_names_are_read_back_exactly() -> None:
    arrays = {"a.b": pa.array([1, 5]), 'q"x': pa.array([1, 5]), "a": pa.array([9, 9])}
    for name in ("a.b", 'q"x'):
        got = survivors(pc.field(name) > 2, arrays)
        assert got is not None and got.tolist() == [1]
    assert survivors(pc.field("a b") > 2, {"a b": pa.array([1, 5])}) is None  # cannot be parsed
    assert predicate._parse.cache_info().maxsize is not None


def test_a_table_read_filters_through_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Table.read of a simple filter never builds an Acero plan; other filters still do, and a
    filter Acero rejects still fails with a clear error."""
    rng = np.random.default_rng(3)
    data = pa.table({"x": rng.random(3000), "n": rng.integers(0, 9, 3000), "s": ["a", "b"] * 1500})
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("p", data.schema)
        t.append(data, "a")
        acero: list[str] = []
        from omnitable.format.reader import FragmentReader

        real = FragmentReader._filtered

        def counting(*args: Any) -> Any:
            acero.append(str(args[2]))
            return real(*args)

        monkeypatch.setattr(FragmentReader, "_filtered", staticmethod(counting))
        simple = (pc.field("x") < 0.2) & (pc.field("n") >= 4)
        got = t.read(columns=["x", "s"], where=simple)
        assert acero == []
        assert got.equals(data.filter(simple).select(["x", "s"]))
        other = pc.field("s") == "a"
        assert t.read(columns=["x"], where=other).equals(data.filter(other).select(["x"]))
        assert acero == [str(other)]
        with pytest.raises(ValidationError, match="Cannot"):
            t.read(columns=["x"], where=pc.field("s") < 1)


# -- pruning fragments by their statistics (predicate.pruner) ----------------------------------

EXACT_TYPES = [pa.float64(), pa.int64()]
PRUNABLE_TYPES = [*EXACT_TYPES, pa.float32()]


def may_hold(
    where: pc.Expression, bounds: dict[str, tuple[pa.DataType, predicate.Bounds]]
) -> bool | None:
    """The pruner's answer for one fragment of columns (type, bounds); None: declined."""
    check = predicate.pruner(where, {name: t for name, (t, _) in bounds.items()})
    return None if check is None else check({name: b for name, (_, b) in bounds.items()})


def _bounds_of(values: pa.Array, widen: float) -> predicate.Bounds:
    """What statistics could say of ``values``: the bounds of the values neither NULL nor NaN,
    widened by ``widen`` (statistics may bound loosely, never tightly)."""
    kept = [v for v in values.to_pylist() if v is not None and v == v]
    if values.null_count == len(values):
        return predicate.Bounds(all_null=True)
    if not kept:
        return predicate.Bounds()  # only NaNs (and NULLs): no bounds
    lo, hi = min(kept), max(kept)
    if pa.types.is_integer(values.type):
        return predicate.Bounds(lo - int(widen), hi + int(widen))
    return predicate.Bounds(lo - widen, hi + widen)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), types=st.lists(st.sampled_from(PRUNABLE_TYPES), min_size=1, max_size=3))
def test_pruning_never_rules_out_a_fragment_with_a_matching_row(
    data: Any, types: list[pa.DataType]
) -> None:
    """Sound against Acero's filter of the fragment's rows (NULLs, NaNs, loose bounds), and as
    tight as its bounds: with exact bounds, a filter of one ordering comparison (``<``, ``<=``,
    ``>``, ``>=``) is ruled out exactly when no row matches, unless the bounds are unknown."""
    n = data.draw(st.integers(1, 40))
    arrays, bounds = {}, {}
    widen = data.draw(st.sampled_from([0.0, 0.0, 1.0, 50.0]))
    for i, t in enumerate(types):
        drawn = data.draw(st.lists(element, min_size=n, max_size=n))
        arrays[f"c{i}"] = _column(t, drawn)
        bounds[f"c{i}"] = (t, _bounds_of(arrays[f"c{i}"], widen))
    where = data.draw(trees(list(arrays)))
    found = may_hold(where, bounds)
    if found is None:
        return
    matches = len(_acero(where, arrays))
    assert found or matches == 0, f"{where} ruled out with {matches} matching rows"
    leaf = predicate._simple(where)
    if widen == 0 and leaf is not None and isinstance(leaf[0], predicate._Compare):
        b = bounds[leaf[0].name][1]
        if leaf[0].op not in ("==", "!=") and (b.all_null or b.lo is not None):
            assert found == (matches > 0), f"{where}: {b}, {matches} matching rows"


def test_pruning_declines_what_it_cannot_decide_exactly() -> None:
    b = predicate.Bounds(0, 10)
    assert may_hold(pc.field("x") < 5, {"x": (pa.int64(), b)}) is True
    assert may_hold(pc.field("x") > 10, {"x": (pa.int64(), b)}) is False
    assert may_hold(pc.field("x") > 10.0, {"x": (pa.int64(), b)}) is None  # a cast
    assert may_hold(pc.field("x") > 10, {"x": (pa.int32(), b)}) is None
    assert may_hold(pc.field("x") > 10.5, {"x": (pa.float32(), b)}) is False  # widened
    assert may_hold(pc.field("x") > 10, {"x": (pa.float32(), b)}) is None  # Arrow's cast
    assert may_hold(pc.field("x") > 10, {"x": (pa.float64(), b)}) is False  # cast exactly
    assert may_hold(pc.field("x") > 2**53, {"x": (pa.float64(), b)}) is False
    assert may_hold(pc.field("x") > 2**53 + 1, {"x": (pa.float64(), b)}) is None  # Arrow refuses
    assert may_hold(pc.field("y") > 1, {"x": (pa.int64(), b)}) is None
    assert may_hold(pc.field("x").isin([1]), {"x": (pa.int64(), b)}) is None
    edge = {"f": (pa.float64(), predicate.Bounds(0.5, 2.0))}
    assert [may_hold(w, edge) for w in (pc.field("f") < 0.5, pc.field("f") <= 0.5,
            pc.field("f") > 2.0, pc.field("f") >= 2.0, pc.field("f") == 2.0)] == [
        False, True, False, True, True]  # fmt: skip
    nan = predicate.Bounds(math.nan, math.nan)
    assert may_hold(pc.field("f") < 0.5, {"f": (pa.float64(), nan)}) is True


def test_a_table_prunes_simple_filters_as_arrow_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan of a simple filter keeps the fragments Arrow's pruning keeps (four batches, a
    column added after two of them: NULL there), without building a dataset; a filter of
    another shape still goes through Arrow."""
    from omnitable.format.reader import FragmentReader

    rng = np.random.default_rng(5)
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("p", pa.schema([("x", pa.float64()), ("n", pa.int64())]))
        for b in range(4):
            x = rng.random(500) + b  # batch b holds x in [b, b + 1)
            n = np.arange(500, dtype=np.int64) + 1000 * b
            t.append(pa.table({"x": x, "n": n}), f"b{b}")
            if b == 1:
                t.add_columns(pa.table({"_ai_unique_id_": t.read(columns=["_ai_unique_id_"])
                                        .column(0), "late": pa.array([1.0] * 1000)}), group="late")  # fmt: skip
        filters = [
            pc.field("x") < 1.5,
            (pc.field("x") >= 2.2) & (pc.field("n") < 2400),
            (pc.field("x") > 3.5) | (pc.field("n") == 1),
            pc.field("x") != 0.25,
            pc.field("late") > 0.0,
            pc.field("x") > 9.0,
        ]
        simple = {str(w): [f.fragment_id for f in t.plan(where=w).fragments] for w in filters}
        datasets: list[str] = []
        real = FragmentReader._prune_simple
        monkeypatch.setattr(FragmentReader, "_prune_simple", lambda *a: None)
        arrow = {str(w): [f.fragment_id for f in t.plan(where=w).fragments] for w in filters}
        assert simple == arrow
        assert [len(v) for v in simple.values()] == [2, 1, 2, 4, 2, 0]
        monkeypatch.setattr(FragmentReader, "_prune_simple", real)
        for w in filters:
            assert t.read(where=w).num_rows == t.read().filter(w).num_rows
        monkeypatch.setattr(
            FragmentReader, "_guarantee", lambda *a: datasets.append("dataset") or pc.scalar(True)
        )
        t.plan(where=pc.field("x") < 1.5)
        assert datasets == []
        t.plan(where=pc.field("x").isin([0.5]))
        assert datasets
