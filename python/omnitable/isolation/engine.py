"""The isolation engine: fast path, bisection down to records, reassembly of outputs.

A batch is first computed by one vectorized call. If that call fails (exception, malformed
result, time or memory budget, dead child), its rows are split into ``split_factor`` parts and
each part is called again; parts that succeed keep their outputs, parts that fail are split
again, down to single records, which are the failures. With ``f`` bad records out of ``n`` the
work is about ``n + f * n * k / (k - 1)`` rows in ``f * k * log_k(n)`` calls at most; a clean
batch costs exactly one call.

Runs in: the calling process (a Spark Python worker in a backfill or a pandas UDF). In
``subprocess`` mode each call is sent to a child worker through
:mod:`omnitable.isolation.supervisor`.
"""

from __future__ import annotations

import functools
import itertools
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from omnitable.exceptions import IsolationLimitError, ValidationError
from omnitable.isolation.guard import (
    CallFailure,
    Outcome,
    alarm_available,
    check_result,
    guarded_call,
)
from omnitable.isolation.policy import (
    IsolationPolicy,
    IsolationResult,
    RecordFailure,
    input_digest,
)
from omnitable.isolation.records import (
    PerRecord,
    RecordsOutcome,
    input_values,
    output_columns,
    run_records,
)
from omnitable.isolation.supervisor import POOL, ChildBatch, ChildSupervisor, ship

Caller = Callable[[int, int, "float | None"], Outcome]
_BATCH_IDS = itertools.count(1)


@dataclass
class Execution:
    """Outcome of :func:`execute`: one output column per name (len n), failures, counters."""

    columns: list[Any]
    failures: list[RecordFailure] = field(default_factory=list)
    mode: str = "inprocess"
    calls: int = 0
    child_starts: int = 0
    failed_calls: int = 0


GROW_AFTER_BATCHES = 4
"""A reduced call size doubles after this many batches' worth of clean records."""


@dataclass
class CallSizing:
    """Adaptive call size for a stream of batches of one function (docs/isolation.md).

    ``rows`` None: one call per batch (a clean stream never leaves this state). After a batch
    in which a call failed, each batch is cut into calls of ``n // split_factor`` rows, so a
    bad record wastes a small call instead of the whole batch; after ``GROW_AFTER_BATCHES``
    batches' worth of clean records the size doubles, back to whole batches. Only where calls
    are cut changes: every record is still computed by a successful call that contains it.
    """

    rows: int | None = None
    clean_rows: int = 0

    def initial(self, n: int) -> list[tuple[int, int]]:
        """The first calls over a batch of ``n`` rows."""
        if self.rows is None or n <= self.rows:
            return [(0, n)]
        return [(lo, min(lo + self.rows, n)) for lo in range(0, n, self.rows)]

    def update(self, n: int, split_factor: int, failed: bool) -> None:
        """Account a batch of ``n`` rows in which a call failed (or none did)."""
        if failed:
            self.rows = max(1, min(self.rows or n, n // split_factor))
            self.clean_rows = 0
        elif self.rows is not None:
            self.clean_rows += n
            if self.clean_rows >= GROW_AFTER_BATCHES * n:
                self.rows, self.clean_rows = self.rows * 2, 0
                if self.rows >= n:
                    self.rows = None


def run_isolated(
    fn: Callable[..., Any],
    inputs: pd.DataFrame | Sequence[pd.Series],
    *,
    output_names: Sequence[str],
    policy: IsolationPolicy,
    previous_attempt_failed: bool = False,
    sizing: CallSizing | None = None,
) -> IsolationResult:
    """Compute ``fn`` over a batch so that failing records become NULLs, not a failed batch.

    Args:
        fn: vectorized function; receives the input columns as pandas Series (positional, in
            ``inputs``' column order) and returns a Series (one output) or a DataFrame holding
            every output name, with ``len(inputs)`` rows in input order.
        inputs: the batch: a DataFrame, or its columns as a list of Series of equal length
            (saves building a DataFrame when the caller holds the columns).
        output_names: names of the outputs (the columns of ``IsolationResult.outputs``).
        policy: budgets and mode (see :class:`IsolationPolicy`).
        previous_attempt_failed: a previous attempt of this task died (in Spark:
            ``TaskContext.get().attemptNumber() > 0``); in ``auto`` mode the batch then runs
            in the supervised child process.
        sizing: state shared by the batches of one stream (:class:`CallSizing`); None: each
            batch is first computed by one call.

    Returns:
        An :class:`IsolationResult`; with ``mode="off"`` failures are never caught.

    Raises:
        ValidationError: invalid arguments, or (mode ``off``) a malformed result.
        IsolationLimitError: more than ``policy.max_failures`` records failed.
        Exception: with ``mode="off"``, whatever ``fn`` raises.
    """
    if not callable(fn):
        raise ValidationError(f"Cannot isolate {fn!r}: it is not callable")
    if isinstance(inputs, pd.DataFrame):
        columns, n = [col for _, col in inputs.items()], len(inputs)
    else:
        columns, n = _input_columns(inputs)
    if not isinstance(policy, IsolationPolicy):
        raise ValidationError(
            f"Cannot isolate a batch: policy must be an IsolationPolicy, got {type(policy).__name__}"
        )
    names = validate_output_names(output_names)
    ex = execute(fn, columns, n, names, policy, previous_attempt_failed, sizing)
    return IsolationResult(
        columns=ex.columns,
        output_names=names,
        failures=ex.failures,
        mode=ex.mode,
        calls=ex.calls,
        child_starts=ex.child_starts,
    )


def _input_columns(inputs: Any) -> tuple[list[Any], int]:
    if isinstance(inputs, (list, tuple)) and inputs:
        columns = list(inputs)
        if all(isinstance(c, (pd.Series, pd.DataFrame)) for c in columns):
            n = len(columns[0])
            if all(len(c) == n for c in columns):
                return columns, n
            raise ValidationError(
                f"Cannot isolate a batch: input columns differ in length "
                f"({sorted({len(c) for c in columns})})"
            )
    raise ValidationError(
        "Cannot isolate a batch: inputs must be a pandas DataFrame or a non-empty list of "
        f"pandas Series, got {type(inputs).__name__}"
    )


def validate_output_names(output_names: Any) -> list[str]:
    """``output_names`` as a list, or ValidationError (non-empty, unique strings)."""
    if isinstance(output_names, str) or not isinstance(output_names, Sequence):
        raise ValidationError(
            f"Cannot isolate a batch: output_names must be a list of strings, got {output_names!r}"
        )
    names = list(output_names)
    if (
        not names
        or not all(isinstance(n, str) and n for n in names)
        or len(set(names)) != len(names)
    ):
        raise ValidationError(
            f"Cannot isolate a batch: output_names must be unique non-empty strings, got {names!r}"
        )
    return names


def resolve_mode(policy: IsolationPolicy, previous_attempt_failed: bool) -> str:
    """Where a batch runs: ``off``, ``inprocess`` or ``subprocess`` (see IsolationPolicy.mode)."""
    if policy.mode in ("off", "subprocess"):
        return policy.mode
    needs_alarm = policy.budget_s(1) is not None
    if policy.mode == "inprocess":
        if needs_alarm and not alarm_available():
            raise ValidationError(
                "Cannot enforce timeout_s in-process: the alarm needs the main thread (use "
                "mode='auto' or 'subprocess' on other threads)"
            )
        return "inprocess"
    if previous_attempt_failed or (needs_alarm and not alarm_available()):
        return "subprocess"
    return "inprocess"


def execute(
    fn: Callable[..., Any],
    columns: Sequence[Any],
    n: int,
    output_names: list[str],
    policy: IsolationPolicy,
    previous_attempt_failed: bool = False,
    sizing: CallSizing | None = None,
) -> Execution:
    """:func:`run_isolated` on input columns (Series or DataFrames of ``n`` rows)."""
    mode = resolve_mode(policy, previous_attempt_failed)
    if mode == "off":
        return Execution(check_result(fn(*columns), n, output_names), [], "off", 1)
    if isinstance(fn, PerRecord):
        return execute_records(fn, columns, n, output_names, policy, mode)
    initial = sizing.initial(n) if sizing is not None else [(0, n)]
    ex = _execute(fn, columns, n, output_names, policy, mode, initial)
    if sizing is not None:
        sizing.update(n, policy.split_factor, ex.failed_calls > 0)
    return ex


def _execute(
    fn: Callable[..., Any],
    columns: Sequence[Any],
    n: int,
    output_names: list[str],
    policy: IsolationPolicy,
    mode: str,
    initial: list[tuple[int, int]],
) -> Execution:
    """:func:`execute` in ``inprocess`` or ``subprocess`` mode, starting with ``initial`` calls."""
    if mode == "inprocess":
        first: CallFailure | None = None
        if len(initial) == 1:
            out = guarded_call(  # the fast path: one vectorized call, nothing else
                fn, columns, n, output_names, policy.budget_s(n), policy.memory_mb, policy.limits
            )
            if not isinstance(out, CallFailure):
                return Execution(out, [], "inprocess", 1)
            first = out
            if n == 0:
                empty = [pd.Series([], dtype=object) for _ in output_names]
                return Execution(empty, [], mode, 1, failed_calls=1)

        def call_here(lo: int, hi: int, budget_s: float | None) -> Outcome:
            args = columns if (lo, hi) == (0, n) else [_rows(c, lo, hi) for c in columns]
            return guarded_call(
                fn, args, hi - lo, output_names, budget_s, policy.memory_mb, policy.limits
            )

        return _search(call_here, columns, n, output_names, policy, mode, initial, first)
    return _in_child(
        fn,
        columns,
        output_names,
        policy,
        lambda sup, batch: _search(
            functools.partial(sup.call, batch), columns, n, output_names, policy, mode, initial
        ),
    )


def _in_child(
    fn: Callable[..., Any],
    columns: Sequence[Any],
    names: list[str],
    policy: IsolationPolicy,
    run: Callable[[ChildSupervisor, ChildBatch], Execution],
) -> Execution:
    """``run`` with a worker of the pool and the batch shipped to it; the worker goes back to
    the pool whatever happens, and the execution counts the worker starts it caused."""
    batch = ChildBatch(ship(fn), next(_BATCH_IDS), columns, names, policy)
    sup = POOL.acquire()
    starts = sup.starts
    try:
        ex = run(sup, batch)
    finally:
        POOL.release(sup)
    ex.child_starts = sup.starts - starts
    return ex


CHILD_RECORD_PART = 1024
"""In the child process a per-record function's batch is one call, whose results come back in
parts of this many records as they are done: a crash loses the results of the records after
the last part received, at most this many."""


def execute_records(
    fn: PerRecord,
    columns: Sequence[Any],
    n: int,
    names: list[str],
    policy: IsolationPolicy,
    mode: str,
) -> Execution:
    """:func:`execute` for a per-record function (``inprocess`` or ``subprocess`` mode): every
    failure is found by the loop that runs the records (:mod:`~omnitable.isolation.records`),
    or, for a worker that died, at the position it was running; no bisection."""
    if fn.outputs is not None and list(fn.outputs) != list(names):
        raise ValidationError(
            f"Cannot isolate {fn!r}: it was declared with outputs {fn.outputs}, called for {names}"
        )
    budget = policy.budget_s(1)
    if mode == "inprocess":
        out = run_records(
            fn.fn,
            input_values(columns),
            0,
            n,
            names,
            budget,
            policy.memory_mb,
            policy.limits,
            array("q", [-1]),
        )
        _check_limit(out.failures, columns, n, policy)
        failed = [pos for pos, _ in out.failures]
        return Execution(
            output_columns(out.values, failed), _failures(out.failures, columns), mode, 1
        )
    return _in_child(
        fn, columns, names, policy, lambda sup, batch: _records_in_child(sup, batch, n, policy)
    )


def _records_in_child(
    sup: ChildSupervisor, batch: ChildBatch, n: int, policy: IsolationPolicy
) -> Execution:
    """The batch as one call in ``sup``'s worker, its results received in parts; when the
    worker dies, the record it was running fails with the call's failure and the call resumes
    with the records not received yet (those after it, and those before it since the last
    part)."""
    budget = policy.budget_s(1)
    values: list[list[Any]] = [[None] * n for _ in batch.names]
    failed: list[tuple[int, CallFailure]] = []
    received = 0  # the records before this one (in the current call) came back

    def take(part: RecordsOutcome) -> None:
        nonlocal received
        size = len(part.values[0])
        for full, got in zip(values, part.values, strict=True):
            full[part.lo : part.lo + size] = got
        failed.extend(part.failures)
        received = part.lo + size
        _check_limit(failed, batch.columns, n, policy)

    stack = [(0, n)]
    calls = failed_calls = 0
    retried: set[tuple[int, int]] = set()
    while stack:
        lo, hi = stack.pop()
        received = lo
        out = sup.call_records(batch, lo, hi, budget, CHILD_RECORD_PART, take)
        calls += 1
        if isinstance(out, RecordsOutcome):
            take(out)
            continue
        failed_calls += 1
        pos = sup.failed_record()
        if received <= pos < hi:  # the record it was running: resume without it
            failed.append((pos, out))
            stack.extend(r for r in ((pos + 1, hi), (received, pos)) if r[0] < r[1])
        elif (received, hi) not in retried:  # it died outside any record (loading the batch,
            retried.add((received, hi))  # or sending the part from `received`): once more
            stack.append((received, hi))
        else:  # again: the part it was sending (or loading for) fails, the rest goes on
            end = min(received + CHILD_RECORD_PART, hi)
            failed.extend((p, out) for p in range(received, end))
            if end < hi:
                stack.append((end, hi))
        _check_limit(failed, batch.columns, n, policy)
    found = _failures(failed, batch.columns)
    columns = output_columns(values, [pos for pos, _ in failed])
    return Execution(columns, found, "subprocess", calls, 0, failed_calls)


def _check_limit(
    failed: list[tuple[int, CallFailure]], columns: Sequence[Any], n: int, policy: IsolationPolicy
) -> None:
    if policy.max_failures is not None and len(failed) > policy.max_failures:
        found = _failures(failed, columns)
        raise IsolationLimitError(
            f"Cannot compute the batch: more than max_failures={policy.max_failures} "
            f"of its {n} records failed; first: {found[0].kind} "
            f"{found[0].exception_type}: {found[0].message}",
            found,
        )


def _search(
    call: Caller,
    columns: Sequence[Any],
    n: int,
    names: list[str],
    policy: IsolationPolicy,
    mode: str,
    initial: list[tuple[int, int]],
    first: CallFailure | None = None,
) -> Execution:
    """Call the ``initial`` ranges (covering ``[0, n)``), bisecting failed calls until every
    record is computed or failed alone.

    ``first``: the outcome of the single initial call when the caller already made it.
    """
    if n == 0:
        out = call(0, 0, policy.budget_s(0))
        empty = [pd.Series([], dtype=object) for _ in names]
        return Execution(empty if isinstance(out, CallFailure) else out, [], mode, 1)
    pieces: list[tuple[int, int, list[Any]]] = []
    failed: list[tuple[int, CallFailure]] = []
    stack = list(reversed(initial))
    calls = failed_calls = 0
    while stack:
        lo, hi = stack.pop()
        if first is not None:
            out, first = first, None
        else:
            out = call(lo, hi, policy.budget_s(hi - lo))
        calls += 1
        if not isinstance(out, CallFailure):
            pieces.append((lo, hi, out))
            continue
        failed_calls += 1
        if hi - lo > 1:
            stack.extend(reversed(split(lo, hi, policy.split_factor)))
        else:
            failed.append((lo, out))
            _check_limit(failed, columns, n, policy)
    if not failed and len(pieces) == 1:
        return Execution(pieces[0][2], [], mode, calls, failed_calls=failed_calls)
    found = _failures(failed, columns)
    return Execution(_assemble(n, pieces, len(names)), found, mode, calls, 0, failed_calls)


def split(lo: int, hi: int, k: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ``min(k, hi - lo)`` contiguous parts of near-equal size."""
    m = hi - lo
    parts = min(k, m)
    bounds = [lo + (m * i) // parts for i in range(parts + 1)]
    return list(itertools.pairwise(bounds))


def _rows(column: Any, lo: int, hi: int) -> Any:
    return column.iloc[lo:hi].reset_index(drop=True)


def _failures(failed: list[tuple[int, CallFailure]], columns: Sequence[Any]) -> list[RecordFailure]:
    out = []
    for pos, f in sorted(failed, key=lambda item: item[0]):
        digest = input_digest([_value(c, pos) for c in columns])
        out.append(RecordFailure(pos, f.kind, f.exception_type, f.message, f.traceback, digest))
    return out


def _value(column: Any, pos: int) -> Any:
    if isinstance(column, pd.DataFrame):  # a struct input of a pandas UDF
        return column.iloc[pos].to_dict()
    return column.iloc[pos]


def _assemble(n: int, pieces: list[tuple[int, int, list[Any]]], k: int) -> list[Any]:
    """Output columns of length n from the successful pieces; other positions NULL."""
    pieces.sort(key=lambda p: p[0])
    covered = sum(hi - lo for lo, hi, _ in pieces)
    out = []
    for j in range(k):
        parts = [p[2][j].set_axis(pd.RangeIndex(p[0], p[1])) for p in pieces]
        if not parts:
            out.append(pd.Series([None] * n, dtype=object))
            continue
        values = pd.concat(parts) if len(parts) > 1 else parts[0]
        if covered < n:
            if values.dtype.kind in "iub":  # NULLs would make ints float (lossy) or bools object
                values = values.astype(object)
            values = values.reindex(pd.RangeIndex(n))
            if values.dtype == object:
                values = values.where(values.notna(), None)
        out.append(values)
    return out
