"""Per-record functions: isolated one record at a time, found without bisection.

A function wrapped by :func:`per_record` takes one record's input values and returns that
record's output(s). The isolation engine runs it in a loop of its own (:func:`run_records`), so
it always knows which record is running:

* an exception or a ``MemoryError`` fails that record alone and the loop goes on (no failed
  vectorized call, no bisection, no work lost);
* a record that runs past its budget (``IsolationPolicy.budget_s(1)``) is stopped by a
  :class:`~omnitable.isolation.guard.RecordAlarm` and failed alone;
* in the child process the loop writes the running record's position to memory shared with
  the parent (``cursor``), so when the worker dies (segfault, ``os._exit``, OOM kill, or killed
  by the parent because a record ignored its alarm) the parent blames that record at once: one
  respawn per crashing record.

Runs in: the calling process (``inprocess`` mode) and the child workers alike; imports only the
other modules of this package that run everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import pandas as pd

from omnitable.exceptions import ValidationError
from omnitable.isolation.guard import (
    CallFailure,
    Deadline,
    MemoryCap,
    RecordAlarm,
    failure_from,
    release,
    timeout_failure,
)


class PerRecord:
    """A per-record function, callable like a vectorized one (see :func:`per_record`).

    Calling it with input columns (pandas Series) maps the function over the records with no
    isolation (exceptions propagate): what ``mode="off"`` and code outside OmniTable see. The
    isolation engine instead runs :attr:`fn` through :func:`run_records`.
    """

    def __init__(self, fn: Callable[..., Any], outputs: Sequence[str] | None = None) -> None:
        if not callable(fn):
            raise ValidationError(f"Cannot make a per-record function of {fn!r}: not callable")
        names = None if outputs is None else list(outputs)
        if names is not None and (
            not names
            or not all(isinstance(n, str) and n for n in names)
            or len(set(names)) != len(names)
        ):
            raise ValidationError(
                f"Cannot make a per-record function: outputs must be unique non-empty strings, "
                f"got {outputs!r}"
            )
        self.fn = fn
        self.outputs = names
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__module__ = getattr(fn, "__module__", __name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn

    def __call__(self, *columns: Any) -> Any:
        names = self.outputs or ["value"]
        lists = input_values(columns)
        values = [self.fn(*row) for row in zip(*lists, strict=True)] if lists else []
        cols = output_columns(_split_outputs(values, len(names), names), ())
        if self.outputs is None:
            return cols[0]
        return pd.DataFrame(dict(zip(names, cols, strict=True)))

    def __repr__(self) -> str:
        return f"per_record({self.__qualname__})"


def per_record(
    fn: Callable[..., Any] | None = None, *, outputs: Sequence[str] | None = None
) -> Any:
    """Mark ``fn`` as a per-record function (also usable as ``@per_record`` or
    ``@per_record(outputs=[...])``).

    ``fn(*values)`` receives one record's input values (what ``Series.tolist()`` holds: Python
    scalars; missing values as pandas holds them, None or NaN) and returns its output; with
    several outputs a tuple in output order or a mapping by output name. ``outputs`` names them
    when the result is used as a vectorized function outside the isolation engine (several
    outputs: a DataFrame with these columns; None: one output, a Series).

    Under :func:`~omnitable.isolation.run_isolated` or :func:`~omnitable.isolation.isolated` a
    bad record is found without bisection (see the module doc).
    """
    if fn is None:
        return lambda f: PerRecord(f, outputs)
    if isinstance(fn, PerRecord):
        return fn
    return PerRecord(fn, outputs)


class RecordsOutcome(NamedTuple):
    """What a per-record call produced for its records ``lo ..`` (picklable; crosses the pipe).

    ``values``: one list per output, one value per record, None for failed records (plain
    lists: cheap to pickle; :func:`output_columns` makes the Series once per batch);
    ``failures``: (batch position, why), ordered by position.
    """

    lo: int
    values: list[list[Any]]
    failures: list[tuple[int, CallFailure]]


Emit = Callable[[RecordsOutcome], None]


def run_records(
    fn: Callable[..., Any],
    args: Sequence[list[Any]],
    lo: int,
    hi: int,
    names: Sequence[str],
    budget_s: float | None,
    memory_mb: int | None,
    limits: tuple[int, int],
    cursor: Any,
    emit: tuple[Emit, int] | None = None,
) -> RecordsOutcome:
    """Call ``fn`` on each record of rows ``[lo, hi)`` of the batch, each failure its own.

    ``args``: the batch's input values, one list per input (:func:`input_values`).
    ``cursor[0]`` is set to each record's position before its call (an ``array('q')`` here, a
    view of memory shared with the parent in a child worker). ``budget_s``: per-record time
    budget (None: none); ``memory_mb``: address-space budget of the whole call. ``emit``:
    ``(callback, size)``: the records run in parts of ``size``, each part but the last handed
    to ``callback`` as soon as it is done; the outcome returned holds the last part (all the
    records without ``emit``). Never raises for a record's own failure; KeyboardInterrupt and
    other non-``Exception`` errors propagate.
    """
    size = hi - lo if emit is None else max(1, emit[1])
    bounds = [(p, min(p + size, hi)) for p in range(lo, hi, size)] or [(lo, hi)]
    loop = _RecordLoop(fn, args, lo, hi, names, budget_s, limits, cursor, memory_mb)
    done = lo  # the records before this one were handed to emit
    cap = MemoryCap(memory_mb) if memory_mb is not None else None
    if cap is not None:
        cap.__enter__()
    try:
        try:
            if loop.alarm is not None:
                loop.alarm.__enter__()
            for plo, phi in bounds:
                loop.run_part(plo, phi)
                if emit is not None and phi < hi:
                    part = loop.outcome(plo, phi)  # takes the part's failures: asked once
                    done = phi
                    emit[0](part)
        finally:
            release(loop.alarm, cap)
    except Deadline as exc:  # the last record overran, found as the alarm was being disarmed
        release(loop.alarm, cap)
        loop.timed_out(int(cursor[0]), exc)
    return loop.outcome(done, hi)


class _RecordLoop:
    """The state of one per-record call over rows ``[lo, hi)`` of a batch (see run_records).

    ``out`` holds the call's results from ``lo``; ``failed`` is keyed by batch position."""

    def __init__(
        self,
        fn: Callable[..., Any],
        args: Sequence[list[Any]],
        lo: int,
        hi: int,
        names: Sequence[str],
        budget_s: float | None,
        limits: tuple[int, int],
        cursor: Any,
        memory_mb: int | None,
    ) -> None:
        self.fn, self.args, self.lo, self.hi, self.names = fn, args, lo, hi, names
        self.budget_s, self.limits, self.cursor = budget_s, limits, cursor
        self.prefix = "" if memory_mb is None else f"over memory_mb={memory_mb}: "
        self.out: list[Any] = [None] * (hi - lo)
        self.failed: dict[int, CallFailure] = {}
        self.alarm = RecordAlarm(budget_s, cursor) if budget_s is not None else None

    def run_part(self, plo: int, phi: int) -> None:
        """Records ``[plo, phi)``, going on past each record the alarm stops; returns with the
        cursor at -1 (between records: the alarm does not count, and a death while the part is
        sent is not blamed on its last record)."""
        p = plo
        while p < phi:
            try:
                p = self._records(p, phi)
                self.cursor[0] = -1
            except Deadline as exc:  # the alarm blamed the record at the cursor (the part's
                pos = int(self.cursor[0])  # last one included, found as its loop ended)
                self.cursor[0] = -1  # the alarm starts counting afresh
                self.timed_out(pos, exc)
                p = max(p, pos + 1)

    def timed_out(self, pos: int, exc: BaseException | None) -> None:
        if self.lo <= pos < self.hi:
            self.failed[pos] = timeout_failure(1, self.budget_s, exc, self.limits)

    def _records(self, start: int, stop: int) -> int:
        """Records ``[start, stop)`` (returns ``stop``); a Deadline propagates."""
        if len(self.args) == 1:  # the common case, without building an argument list per record
            return self._records_of(self.args[0], start, stop)
        fn, args, out, lo, cursor = self.fn, self.args, self.out, self.lo, self.cursor
        for p in range(start, stop):
            cursor[0] = p
            try:
                out[p - lo] = fn(*[a[p] for a in args])
            except Exception as exc:
                self._fail(p, exc)
        return stop

    def _records_of(self, values: list[Any], start: int, stop: int) -> int:
        """:meth:`_records` for a function of one input, ``values``."""
        fn, out, lo, cursor = self.fn, self.out, self.lo, self.cursor
        for p in range(start, stop):
            cursor[0] = p
            try:
                out[p - lo] = fn(values[p])
            except Exception as exc:
                self._fail(p, exc)
        return stop

    def _fail(self, pos: int, exc: Exception) -> None:
        """Record ``pos`` failed with ``exc`` (a MemoryError under the call's memory budget:
        of kind ``memory``)."""
        if isinstance(exc, MemoryError):
            self.failed[pos] = failure_from(exc, "memory", self.limits, prefix=self.prefix)
        else:
            self.failed[pos] = failure_from(exc, "exception", self.limits)

    def outcome(self, plo: int, phi: int) -> RecordsOutcome:
        """The outcome of records ``[plo, phi)``, asked once per range: their failures leave
        ``failed``, so that the next part's outcome does not scan them again."""
        for pos in self.alarm.blamed if self.alarm is not None else ():
            if plo <= pos < phi and pos not in self.failed:  # it swallowed the Deadline
                self.timed_out(pos, None)
        mine = {pos: f for pos, f in self.failed.items() if plo <= pos < phi}
        for pos in mine:
            del self.failed[pos]
        part = self.out[plo - self.lo : phi - self.lo]
        for pos in mine:
            part[pos - plo] = None
        values = _split_outputs(part, len(self.names), self.names, plo, mine, self.limits)
        return RecordsOutcome(plo, values, sorted(mine.items()))


def input_values(columns: Sequence[Any]) -> list[list[Any]]:
    """A batch's input columns as the lists of values a per-record function receives."""
    return [_values(c, 0, len(c)) for c in columns]


def output_columns(values: list[list[Any]], failed: Iterable[int]) -> list[pd.Series]:
    """One Series per output from per-output value lists; ``failed``: positions that failed."""
    bad = set(failed)
    return [_column(v, bad) for v in values]


def _values(column: Any, lo: int, hi: int) -> list[Any]:
    """Rows ``[lo, hi)`` of an input column as a list (a DataFrame: one dict per row)."""
    part = column.iloc[lo:hi]
    if isinstance(part, pd.DataFrame):  # a struct input of a pandas UDF
        return part.to_dict("records")
    return part.tolist()


def _split_outputs(
    values: list[Any],
    k: int,
    names: Sequence[str],
    lo: int = 0,
    failed: dict[int, CallFailure] | None = None,
    limits: tuple[int, int] = (4096, 1024),
) -> list[list[Any]]:
    """Per-output value lists from per-record results; with ``failed`` given, a record whose
    result has the wrong shape becomes a failure of kind ``exception`` (else ValidationError)."""
    if k == 1:
        return [values]
    cols: list[list[Any]] = [[None] * len(values) for _ in range(k)]
    for j, v in enumerate(values):
        if failed is not None and lo + j in failed:
            continue
        try:
            row = _record_outputs(v, k, names)
        except ValidationError as exc:
            if failed is None:
                raise
            failed[lo + j] = failure_from(exc, "exception", limits)
            continue
        for c, x in zip(cols, row, strict=True):
            c[j] = x
    return cols


def _record_outputs(v: Any, k: int, names: Sequence[str]) -> Sequence[Any]:
    if isinstance(v, Mapping):
        missing = [n for n in names if n not in v]
        if not missing:
            return [v[n] for n in names]
        raise ValidationError(
            f"Cannot use the record's result: the mapping lacks output(s) {missing}"
        )
    if isinstance(v, (tuple, list)) and len(v) == k:
        return v
    raise ValidationError(
        f"Cannot use the record's result: expected a tuple of {k} values or a mapping of "
        f"{list(names)}, got {type(v).__name__}"
    )


def _column(values: list[Any], failed: set[int] | frozenset[int] = frozenset()) -> pd.Series:
    """One output as a Series, dtype inferred from the values as ``Series.map`` would; where
    failures left NULLs in integer or boolean values, an object column (no rounding)."""
    if not failed:
        return pd.Series(values)
    good = pd.Series([v for j, v in enumerate(values) if j not in failed])
    if len(good) and good.dtype.kind in "iub":
        return pd.Series(values, dtype=object)
    if len(good):
        with contextlib.suppress(TypeError, ValueError):
            return pd.Series(values, dtype=good.dtype)
    return pd.Series(values, dtype=object)
