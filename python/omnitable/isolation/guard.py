"""One guarded call of a pandas function: time alarm, memory cap, result check, classification.

Runs in: the calling process (``inprocess`` mode, and the fast path) and inside the forked
child workers (``subprocess`` mode) alike; it must stay free of parent-only state.

* Time: ``signal.setitimer(ITIMER_REAL)`` delivers SIGALRM at the call's budget; the handler
  raises :class:`Deadline` (a ``BaseException``, so ``except Exception`` in user code does not
  swallow it) and re-fires every 50 ms until the call returns. Works on the main thread only,
  and interrupts Python code and C calls that let signals through (``time.sleep``, ``re``); a
  C call that blocks signals is only stopped by killing the child process. A timer armed by
  someone else (pytest-timeout) keeps working: its handler is called when it is due and its
  remaining time is re-armed after the call.
* Memory: ``RLIMIT_AS`` (soft) is lowered to the process's current virtual size plus the
  budget for the duration of the call, so an over-budget allocation raises ``MemoryError``
  instead of taking memory; the previous limit is restored afterwards.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, NamedTuple

import pandas as pd

from omnitable.exceptions import ValidationError
from omnitable.isolation.policy import Kind, bounded_head, bounded_tail

try:  # signal.getsignal maps the handler to an enum through an exception: 4 µs, vs 0.1 µs
    from _signal import getsignal as _raw_getsignal
except ImportError:  # pragma: no cover - not CPython
    _raw_getsignal = signal.getsignal

_REFIRE_S = 0.05
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Deadline(BaseException):
    """Raised inside a guarded call when its time budget is spent; never escapes the guard."""


class CallFailure(NamedTuple):
    """Why one call failed (picklable; crosses the pipe from the child)."""

    kind: Kind
    exception_type: str
    message: str
    traceback: str


Outcome = list[Any] | CallFailure
"""A guarded call's outcome: the output columns (pandas Series), or why it failed."""


def alarm_available() -> bool:
    """Whether an in-process alarm can be armed here (SIGALRM exists, on the main thread)."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


class Alarm:
    """SIGALRM-based deadline for one call (see the module doc). Use as a context manager.

    The first alarm installs :func:`_dispatch` as the SIGALRM handler and leaves it installed
    (installing a handler costs more than arming a timer); between calls it forwards signals
    to the handler that was there before, and a timer armed by someone else is re-armed with
    its remaining time after each call.
    """

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.active = False
        self.fired = False
        self._armed = False
        self._outer: Alarm | None = None
        self._prev_due: float | None = None
        self._prev_interval = 0.0
        self._prev_called = False
        self._deadline = 0.0
        self._interval = _REFIRE_S

    def __enter__(self) -> Alarm:
        global _ACTIVE, _PREV_HANDLER
        if _raw_getsignal(signal.SIGALRM) is not _dispatch:
            _PREV_HANDLER = signal.signal(signal.SIGALRM, _dispatch)
        now = time.monotonic()
        self._deadline = now + self.budget_s
        self._outer, _ACTIVE = _ACTIVE, self
        self._armed = self.active = True
        prev_delay, self._prev_interval = signal.setitimer(
            signal.ITIMER_REAL, self.budget_s, self._interval
        )
        if prev_delay > 0:  # someone else's timer: keep it, and let it fire first if due first
            self._prev_due = now + prev_delay
            if prev_delay < self.budget_s:
                signal.setitimer(signal.ITIMER_REAL, prev_delay, self._interval)
        return self

    def __exit__(self, *exc: object) -> None:
        self.disarm()

    def disarm(self) -> None:
        """Stop the alarm and re-arm the previous timer with its remaining time. Idempotent."""
        global _ACTIVE
        if not self._armed:
            return
        self.active = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        _ACTIVE = self._outer
        self._armed = False
        if self._prev_due is not None and not self._prev_called:
            remaining = max(self._prev_due - time.monotonic(), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, remaining, self._prev_interval)

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self._prev_due is not None and not self._prev_called and now >= self._prev_due:
            self._prev_called = True
            if self.active:
                signal.setitimer(signal.ITIMER_REAL, self._next_delay(now), self._interval)
            if self._outer is not None:
                self._outer.on_alarm(signum, frame)
            else:
                _forward(signum, frame)
        if self.active and self._due(now):
            self.fired = True
            raise Deadline()

    def _next_delay(self, now: float) -> float:
        """Seconds until this alarm must fire next (re-arming after someone else's timer)."""
        return max(self._deadline - now, 1e-6)

    def _due(self, now: float) -> bool:
        """Whether the call has overrun its budget (checked at each SIGALRM)."""
        return now >= self._deadline - 1e-3


RECORD_TICKS = 8
"""A :class:`RecordAlarm` ticks this many times per record budget."""


class RecordAlarm(Alarm):
    """Per-record deadline of a per-record loop (:mod:`omnitable.isolation.records`).

    The loop writes the position of the record it runs to ``cursor[0]``. The alarm ticks every
    ``budget_s / RECORD_TICKS`` seconds and raises :class:`Deadline` when it finds the same
    record running at ``RECORD_TICKS + 1`` consecutive ticks: that record has run at least
    ``budget_s`` and less than ``budget_s * (1 + 1 / RECORD_TICKS)``. It raises again every
    ``budget_s`` while that record keeps running (its code may swallow the first). ``blamed``
    lists the positions it raised in, each once.
    """

    def __init__(self, budget_s: float, cursor: Any) -> None:
        super().__init__(budget_s / RECORD_TICKS)
        self._interval = budget_s / RECORD_TICKS
        self.record_budget_s = budget_s
        self.cursor = cursor
        self.blamed: list[int] = []
        self._seen: int | None = None
        self._strikes = 0

    def _next_delay(self, now: float) -> float:
        return self._interval

    def _due(self, now: float) -> bool:
        pos = int(self.cursor[0])
        if pos < 0 or pos != self._seen:  # a new record, or between records
            self._seen, self._strikes = pos, 0
            return False
        self._strikes += 1
        if self._strikes < RECORD_TICKS:
            return False
        self._strikes = 0  # the loop moves on within a tick; a record that swallows it gets
        if not self.blamed or self.blamed[-1] != pos:  # another one a budget later
            self.blamed.append(pos)
        return True


_ACTIVE: Alarm | None = None
_PREV_HANDLER: Any = None


def _dispatch(signum: int, frame: FrameType | None) -> None:
    """The SIGALRM handler: to the active alarm, else to the handler found at install time."""
    alarm = _ACTIVE
    if alarm is not None:
        alarm.on_alarm(signum, frame)
    else:
        _forward(signum, frame)


def _forward(signum: int, frame: FrameType | None) -> None:
    prev = _PREV_HANDLER
    if callable(prev):
        prev(signum, frame)
    elif prev in (signal.SIG_DFL, None):  # the default action: terminate, as it would have
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


class MemoryCap:
    """Lower ``RLIMIT_AS`` to current virtual size + ``budget_mb`` MiB while in the block."""

    def __init__(self, budget_mb: int) -> None:
        self.budget = budget_mb * 1024 * 1024
        self._saved: tuple[int, int] | None = None

    def __enter__(self) -> MemoryCap:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = virtual_size() + self.budget
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, soft)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        self._saved = (soft, hard)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            resource.setrlimit(resource.RLIMIT_AS, self._saved)
            self._saved = None


_STATM_FD: int | None = None


def virtual_size() -> int:
    """This process's virtual memory size in bytes (Linux ``/proc/self/statm``, kept open)."""
    global _STATM_FD
    if _STATM_FD is None:
        _STATM_FD = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
    return int(os.pread(_STATM_FD, 128, 0).split()[0]) * _PAGE


def _reopen_statm_after_fork() -> None:
    global _STATM_FD
    if _STATM_FD is not None:  # it names the parent's /proc entry
        os.close(_STATM_FD)
        _STATM_FD = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reopen_statm_after_fork)


def check_result(result: Any, n: int, output_names: Sequence[str]) -> list[Any]:
    """The output columns of a function's return value, or ValidationError if malformed.

    One output: a pandas Series, or a DataFrame holding that column. Several outputs: a
    DataFrame holding every output name. Always exactly ``n`` rows; values are taken by
    position (the index is ignored).
    """
    if isinstance(result, pd.Series) and len(output_names) == 1:
        cols: list[Any] = [result]
    elif isinstance(result, pd.DataFrame):
        missing = [c for c in output_names if c not in result.columns]
        if missing:
            raise ValidationError(
                f"Cannot use the function's result: the DataFrame lacks output column(s) "
                f"{missing} (it has {list(result.columns)[:10]})"
            )
        cols = [result[c] for c in output_names]
    else:
        expected = (
            "a pandas Series"
            if len(output_names) == 1
            else f"a pandas DataFrame with columns {list(output_names)}"
        )
        raise ValidationError(
            f"Cannot use the function's result: expected {expected}, got {type(result).__name__}"
        )
    if len(result) != n:
        raise ValidationError(
            f"Cannot use the function's result: it has {len(result)} rows for {n} input rows"
        )
    return cols


def guarded_call(
    fn: Callable[..., Any],
    args: Sequence[Any],
    n: int,
    output_names: Sequence[str],
    budget_s: float | None,
    memory_mb: int | None,
    limits: tuple[int, int],
) -> Outcome:
    """Call ``fn(*args)`` over ``n`` records under the budgets; never raises for the call's
    own failures (KeyboardInterrupt and other non-``Exception`` errors still propagate).

    Args:
        budget_s: time budget, or None. Requires :func:`alarm_available`.
        memory_mb: address-space budget in MiB, or None.
        limits: (traceback bytes, message bytes) kept in a failure.
    """
    alarm = Alarm(budget_s) if budget_s is not None else None
    cap = MemoryCap(memory_mb) if memory_mb is not None else None
    if cap is not None:
        cap.__enter__()
    if alarm is not None:
        try:
            alarm.__enter__()
        except BaseException:
            release(alarm, cap)
            raise
    try:
        try:
            result = fn(*args)
        finally:
            release(alarm, cap)
        if alarm is not None and alarm.fired:  # the user's code swallowed our Deadline
            return timeout_failure(n, budget_s, None, limits)
        return check_result(result, n, output_names)
    except Deadline as exc:  # may also come from the finally above: release again
        release(alarm, cap)
        return timeout_failure(n, budget_s, exc, limits)
    except MemoryError as exc:
        release(alarm, cap)
        prefix = "" if memory_mb is None else f"over memory_mb={memory_mb}: "
        return failure_from(exc, "memory", limits, prefix=prefix)
    except Exception as exc:
        return failure_from(exc, "exception", limits)


def release(alarm: Alarm | None, cap: MemoryCap | None) -> None:
    """Disarm ``alarm`` and lift ``cap`` (each may be None); idempotent."""
    if alarm is not None:
        alarm.disarm()
    if cap is not None:
        cap.__exit__()


def timeout_failure(
    n: int, budget_s: float | None, exc: BaseException | None, limits: tuple[int, int]
) -> CallFailure:
    what = "the record" if n == 1 else f"a call of {n} records"
    tb = "" if exc is None else _format_tb(exc, limits[0])
    return CallFailure(
        "timeout", "TimeoutError", f"{what} exceeded its time budget of {budget_s:.6g} s", tb
    )


def failure_from(
    exc: BaseException, kind: Kind, limits: tuple[int, int], prefix: str = ""
) -> CallFailure:
    """A :class:`CallFailure` for an exception raised by the function."""
    message = prefix + (str(exc) or type(exc).__name__)
    return CallFailure(
        kind, type(exc).__name__, bounded_head(message, limits[1]), _format_tb(exc, limits[0])
    )


def _format_tb(exc: BaseException, limit: int) -> str:
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next  # drop guarded_call's own frame
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    return bounded_tail(text, limit)
