"""Filters of the simplest shape evaluated by compute kernels, without an Acero plan.

A read's ``where`` is a pyarrow ``Expression``; evaluating one through Acero (``Table.filter``)
costs a fixed 0.3-1.3 ms per fragment on 2 cores (a plan, its threads, a copy of the inputs),
which is most of a selective read of a few thousand rows. Filters of the everyday shape,
comparisons of a numeric column with a number joined by ``&`` and ``|``, are evaluated here by
the same compute functions Acero would call (``less``, ``and_kleene``, ...; Arrow applies the
same implicit casts to both), in microseconds.

An ``Expression`` cannot be taken apart in Python, so its text is parsed and the parse is
rebuilt into an ``Expression``: only when the rebuilt one ``equals`` the original (same fields,
functions, literal types and values) is it evaluated here. Anything else (other functions,
literals of other types, string columns, nested fields, a name the parse cannot read back) gets
None, and the caller evaluates the filter through Acero as before.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_MAX_COMPARISONS = 8  # more are rare; each costs a parse and a kernel call

_Pair = tuple[Callable[..., Any], Callable[..., Any]]  # (Expression operator, compute function)
_COMPARE: dict[str, _Pair] = {
    "<": (operator.lt, pc.less),
    "<=": (operator.le, pc.less_equal),
    ">": (operator.gt, pc.greater),
    ">=": (operator.ge, pc.greater_equal),
    "==": (operator.eq, pc.equal),
    "!=": (operator.ne, pc.not_equal),
}
_JOIN: dict[str, _Pair] = {
    "and": (operator.and_, pc.and_kleene),
    "or": (operator.or_, pc.or_kleene),
}
_NUMBER = r"-?(?:\d+(?:\.\d*)?(?:e[+-]?\d+)?|inf|nan)"
_LEAF = re.compile(rf"^\((?P<name>[^()\s]+) (?P<op><=|>=|==|!=|<|>) (?P<lit>{_NUMBER})\)$")


@dataclass(frozen=True)
class _Compare:
    name: str
    op: str
    literal: str


@dataclass(frozen=True)
class _Join:
    op: str
    left: _Node
    right: _Node


_Node = _Compare | _Join


def survivors(
    where: pc.Expression, arrays: Mapping[str, pa.Array | pa.ChunkedArray]
) -> np.ndarray | None:
    """Sorted positions of the rows of ``arrays`` (equal lengths) where ``where`` is true (NULL
    counts as false), as Acero's filter would keep them; None when ``where`` is not of the
    simple shape (module docstring) or names a column that is not a numeric one of
    ``arrays``."""
    parsed = _simple(where)
    if parsed is None:
        return None
    tree, as_float = parsed
    if not all(_numeric(arrays.get(name)) for name in (leaf.name for leaf in _leaves(tree))):
        return None
    exact = _evaluate_exact(tree, arrays, as_float)
    if exact is not None:
        return np.flatnonzero(exact)
    mask = _evaluate(tree, arrays, as_float)
    return pc.indices_nonzero(mask).to_numpy().astype(np.int64, copy=False)


@dataclass(frozen=True)
class Bounds:
    """What a fragment's statistics say of one column: ``lo`` and ``hi`` (Python values of the
    column's type) bound its values that are neither NULL nor NaN (None: unknown);
    ``all_null``: every value is NULL; ``nulls``: some value may be NULL."""

    lo: Any = None
    hi: Any = None
    all_null: bool = False
    nulls: bool = False


def pruner(
    where: pc.Expression, types: Mapping[str, pa.DataType]
) -> Callable[[Mapping[str, Bounds]], bool] | None:
    """A check of ``where`` against one fragment's bounds of its columns (of ``types``): False
    only when no row can match. None when ``where`` is not of the simple shape or compares a
    column in a way Python's comparison of the bounds would not decide as Arrow does
    (:data:`_PRUNABLE`; the caller prunes through Arrow's guarantees). Statistics leave NaN
    out, and NaN compares false but for ``!=``, which is never ruled out. ``where`` is parsed
    once, for every fragment."""
    parsed = _simple(where)
    if parsed is None:
        return None
    tree, as_float = parsed
    for leaf in _leaves(tree):
        kinds = _PRUNABLE.get(types[leaf.name]) if leaf.name in types else None
        value = _literal_value(leaf.literal, as_float)
        if kinds is None or type(value) not in kinds:
            return None
        if type(value) is int and float in kinds and abs(value) > _EXACT_INTS_IN_DOUBLE:
            return None  # Arrow refuses to cast it to a double (the read reports it)
    return functools.partial(_may, tree, as_float=as_float)


_PRUNABLE: dict[pa.DataType, tuple[type, ...]] = {
    pa.float64(): (float, int),  # Arrow casts an int literal to a double, exactly up to 2**53
    pa.float32(): (float,),  # Arrow widens the column to double; its bounds widen exactly
    pa.int64(): (int,),
}  # column type -> literal types its bounds compare with in Python as Arrow compares its values
_EXACT_INTS_IN_DOUBLE = 2**53


def _may(tree: _Node, bounds: Mapping[str, Bounds], as_float: bool) -> bool:
    if isinstance(tree, _Join):
        left = _may(tree.left, bounds, as_float)
        if tree.op == "and":
            return left and _may(tree.right, bounds, as_float)
        return left or _may(tree.right, bounds, as_float)
    b = bounds[tree.name]
    if b.all_null:
        return False  # a comparison with NULL is NULL: no row passes
    lo, hi = b.lo, b.hi
    if lo is None or hi is None or lo != lo or hi != hi or tree.op == "!=":
        return True  # unknown (or NaN) bounds; NaN != c holds
    c = _literal_value(tree.literal, as_float)
    return {
        "<": lo < c, "<=": lo <= c, ">": hi > c, ">=": hi >= c, "==": lo <= c <= hi,
    }[tree.op]  # fmt: skip


def _simple(where: pc.Expression) -> tuple[_Node, bool] | None:
    """``where``'s comparison tree and whether its literals are floats, when the tree rebuilt
    is ``where`` itself; else None."""
    tree = _parse(str(where))
    if tree is None:
        return None
    for as_float in (False, True):  # ``x < 1.0`` prints as ``(x < 1)``
        rebuilt = _expression(tree, as_float)
        if rebuilt is not None and rebuilt.equals(where):
            return tree, as_float
    return None


def _leaves(tree: _Node) -> list[_Compare]:
    if isinstance(tree, _Compare):
        return [tree]
    return _leaves(tree.left) + _leaves(tree.right)


@functools.lru_cache(maxsize=256)
def _parse(text: str) -> _Node | None:
    """The comparison tree ``text`` prints, or None when it is not one (at most
    ``_MAX_COMPARISONS`` comparisons)."""
    tree = _node(text)
    return tree if tree is not None and len(_leaves(tree)) <= _MAX_COMPARISONS else None


def _node(text: str) -> _Node | None:
    leaf = _LEAF.match(text)
    if leaf is not None:
        return _Compare(leaf["name"], leaf["op"], leaf["lit"])
    if not (text.startswith("(") and text.endswith(")")):
        return None
    inner, depth = text[1:-1], 0
    for i, ch in enumerate(inner):  # the join at depth 0 between two parenthesized operands
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and ch == ")":
            for op in _JOIN:
                sep = f" {op} "
                if inner.startswith(sep, i + 1):
                    left, right = _node(inner[: i + 1]), _node(inner[i + 1 + len(sep) :])
                    if left is None or right is None:
                        return None
                    return _Join(op, left, right)
            return None
    return None


def _literal(text: str, as_float: bool) -> pa.Scalar:
    if not as_float and re.fullmatch(r"-?\d+", text):
        return pa.scalar(int(text))
    return pa.scalar(float(text))


@functools.lru_cache(maxsize=1024)
def _literal_value(text: str, as_float: bool) -> Any:
    """``_literal``'s Python value (checked once per fragment or row group: worked out once)."""
    return _literal(text, as_float).as_py()


def _expression(tree: _Node, as_float: bool) -> pc.Expression | None:
    if isinstance(tree, _Compare):
        try:
            literal = _literal(tree.literal, as_float)
        except (OverflowError, ValueError, pa.ArrowInvalid):
            return None
        return _COMPARE[tree.op][0](pc.field(tree.name), literal)
    left, right = _expression(tree.left, as_float), _expression(tree.right, as_float)
    if left is None or right is None:
        return None
    return _JOIN[tree.op][0](left, right)


def _numeric(values: pa.Array | pa.ChunkedArray | None) -> bool:
    if values is None:
        return False
    t = values.type
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _evaluate(
    tree: _Node, arrays: Mapping[str, pa.Array | pa.ChunkedArray], as_float: bool
) -> pa.Array | pa.ChunkedArray:
    if isinstance(tree, _Compare):
        return _COMPARE[tree.op][1](arrays[tree.name], _literal(tree.literal, as_float))
    left = _evaluate(tree.left, arrays, as_float)
    right = _evaluate(tree.right, arrays, as_float)
    return _JOIN[tree.op][1](left, right)


_EXACT = {pa.float64(): float, pa.int64(): int}  # column type -> literal type, no cast between
_NUMPY_COMPARE: dict[str, Callable[..., Any]] = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
                  "==": np.equal, "!=": np.not_equal}  # fmt: skip


def _evaluate_exact(
    tree: _Node, arrays: Mapping[str, pa.Array | pa.ChunkedArray], as_float: bool
) -> np.ndarray | None:
    """The mask by numpy (a third of the kernels' time: they spend most of it turning a mask
    into positions) where no cast and no NULL is involved: every column compared is float64
    against a float or int64 against an int, without NULLs; then Arrow's and numpy's answers are
    the same IEEE or integer comparisons (NaN compares false but for ``!=``), and Kleene's logic
    is Boole's. None otherwise."""
    if isinstance(tree, _Join):
        left = _evaluate_exact(tree.left, arrays, as_float)
        right = None if left is None else _evaluate_exact(tree.right, arrays, as_float)
        if left is None or right is None:
            return None
        return (left & right) if tree.op == "and" else (left | right)
    values = arrays[tree.name]
    literal = _literal(tree.literal, as_float).as_py()
    if _EXACT.get(values.type) is not type(literal) or values.null_count:
        return None
    numbers = values.to_numpy()  # zero-copy for one chunk
    return np.asarray(_NUMPY_COMPARE[tree.op](numbers, literal), dtype=bool)
