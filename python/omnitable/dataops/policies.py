"""Merge policies of ``Table.upsert``: what an incoming row does to the row holding its key.

- ``first_write_wins``: the stored row is kept; the incoming one is dropped.
- ``last_write_wins``: the incoming row's columns replace the stored ones (a NULL it carries is
  written; columns it does not carry are kept).
- ``append_list``: list columns become stored + incoming (a NULL side counts as empty); the other
  columns it carries are replaced, as with ``last_write_wins``.
- a custom function (a callable or an importable ``"module:function"``):
  ``fn(stored: pandas.DataFrame, incoming: pandas.DataFrame) -> pandas.DataFrame`` of the merged
  values of the incoming columns, one row per input row in order. It runs isolated like a
  feature (omnitable.isolation) under the ``isolation`` policy given to ``upsert``; by default
  in the supervised child process (the upsert runs in the caller's process, which no task retry
  stands behind): rows it fails on, even by ending its process, are rejected, not the upsert.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.exceptions import ValidationError
from omnitable.isolation.engine import run_isolated
from omnitable.isolation.policy import IsolationPolicy

BUILTIN = ("first_write_wins", "last_write_wins", "append_list")

MergeFn = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]
CHILD = IsolationPolicy(mode="subprocess")
"""The default isolation of a custom policy: the supervised child process, no budgets."""


@dataclass(frozen=True)
class MergePolicy:
    """A validated policy: one of :data:`BUILTIN`, or ``custom`` with its function."""

    name: str
    fn: MergeFn | None = None
    isolation: IsolationPolicy = field(default_factory=lambda: CHILD)

    @property
    def keeps_stored(self) -> bool:
        return self.name == "first_write_wins"

    @property
    def reads_stored(self) -> bool:
        """Whether merged values depend on the stored ones (they must be read)."""
        return self.name in ("append_list", "custom")


def resolve_policy(policy: object, isolation: IsolationPolicy | None = None) -> MergePolicy:
    """``policy`` as a :class:`MergePolicy`; a custom function runs under ``isolation``
    (default :data:`CHILD`).

    Raises:
        ValidationError: an unknown name, a reference that does not import to a callable, or
            ``isolation`` that is not an IsolationPolicy.
    """
    if isolation is not None and not isinstance(isolation, IsolationPolicy):
        raise ValidationError(
            f"Cannot upsert: isolation must be an omnitable.isolation.IsolationPolicy, got "
            f"{type(isolation).__name__}"
        )
    if isinstance(policy, str) and policy in BUILTIN:
        return MergePolicy(policy)
    if isinstance(policy, str) and ":" in policy:
        module, _, attr = policy.partition(":")
        try:
            fn = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValidationError(f"Cannot use merge policy {policy!r}: {exc}") from exc
        policy = fn
    if callable(policy):
        return MergePolicy("custom", policy, isolation or CHILD)
    raise ValidationError(
        f"Cannot upsert with policy {policy!r}: use one of {', '.join(BUILTIN)}, a function "
        "(stored, incoming) -> merged, or its 'module:function' reference"
    )


@dataclass(frozen=True)
class Merged:
    """Merged values (one row per input row, ``values``' columns) and the input rows the policy
    failed on (position, message), whose stored values are kept."""

    values: pa.Table
    failures: list[tuple[int, str]]


def merge(policy: MergePolicy, stored: pa.Table, incoming: pa.Table) -> Merged:
    """Apply ``policy`` to aligned ``stored`` and ``incoming`` rows (same columns and types)."""
    if policy.name == "last_write_wins":
        return Merged(incoming, [])
    if policy.name == "first_write_wins":
        return Merged(stored, [])
    if policy.name == "append_list":
        return Merged(_append_lists(stored, incoming), [])
    assert policy.fn is not None
    return _custom(policy.fn, stored, incoming, policy.isolation)


def _append_lists(stored: pa.Table, incoming: pa.Table) -> pa.Table:
    out = {}
    for name in incoming.column_names:
        new = incoming.column(name).combine_chunks()
        if not (pa.types.is_list(new.type) or pa.types.is_large_list(new.type)):
            out[name] = new
            continue
        old = stored.column(name).combine_chunks()
        empty = pa.scalar([], new.type)
        both = pa.Table.from_arrays(
            [pc.fill_null(old, empty), pc.fill_null(new, empty)], ["a", "b"]
        )
        rows = [a + b for a, b in zip(both.column("a").to_pylist(), both.column("b").to_pylist(), strict=True)]  # fmt: skip
        out[name] = pa.array(rows, new.type)
    return pa.table(out)


def _custom(
    fn: MergeFn, stored: pa.Table, incoming: pa.Table, isolation: IsolationPolicy
) -> Merged:
    names = incoming.column_names
    k = len(names)

    def call(*cols: pd.Series) -> pd.DataFrame:
        old = pd.DataFrame(
            {n: c.reset_index(drop=True) for n, c in zip(names, cols[:k], strict=True)}
        )
        new = pd.DataFrame({n: c.reset_index(drop=True) for n, c in zip(names, cols[k:], strict=True)})  # fmt: skip
        result = fn(old, new)
        if not isinstance(result, pd.DataFrame):
            raise TypeError(
                f"a merge policy returns a pandas DataFrame, got {type(result).__name__}"
            )
        return result

    inputs = [stored.column(n).to_pandas() for n in names] + [incoming.column(n).to_pandas() for n in names]  # fmt: skip
    result = run_isolated(call, inputs, output_names=names, policy=isolation)
    failed = {f.position: f"{f.exception_type}: {f.message}" for f in result.failures}
    frame = result.outputs
    arrays = {}
    for n in names:
        target = incoming.column(n).type
        values = frame[n].astype(object).where(frame[n].notna(), None).tolist()
        try:
            arrays[n] = pa.array(values, target, from_pandas=True)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValidationError(
                f"Cannot upsert: the merge policy returned values for '{n}' that are not "
                f"{target}: {exc}"
            ) from exc
    keep = np.array([i in failed for i in range(len(frame))], dtype=bool)
    merged = pa.table(arrays)
    if keep.any():  # failed rows keep their stored values
        mask = pa.array(keep)
        merged = pa.table({n: pc.if_else(mask, stored.column(n), merged.column(n)) for n in names})
    return Merged(merged, sorted(failed.items()))
