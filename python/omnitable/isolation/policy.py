"""Value types of record-level isolation: the policy, a record's failure, a batch's result.

Runs in: every process that isolates (the caller, and the child workers, which receive
the policy's limits and return failures). Kept apart from the engine so that the supervised
child process, the engine and the public wrapper share them without import cycles. Public names are re-exported by
:mod:`omnitable.isolation`.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal

import numpy as np
import pandas as pd

from omnitable.exceptions import ValidationError

Kind = Literal["exception", "timeout", "memory", "crash"]
Mode = Literal["auto", "inprocess", "subprocess", "off"]
MODES: tuple[str, ...] = ("auto", "inprocess", "subprocess", "off")
KINDS: tuple[str, ...] = ("exception", "timeout", "memory", "crash")


@dataclass(frozen=True)
class IsolationPolicy:
    """How one pandas function is isolated. Validated on construction.

    Attributes:
        timeout_s: per-record time budget in seconds (None: no limit). A vectorized call over
            ``n`` records may take ``n * timeout_s`` (capped by ``call_timeout_s``); a call that
            overruns is bisected, and a record is failed with kind ``timeout`` when a call of
            that record alone overruns ``timeout_s``.
        memory_mb: per-call address-space budget in MiB (None: no limit): each call may grow
            the process's virtual memory by this much (``RLIMIT_AS`` = current size + budget
            during the call). Not scaled by ``n``: a batch that needs more is bisected.
        mode: ``auto`` (in-process, child process when a previous attempt of the task died or
            when a timeout cannot be armed on this thread), ``inprocess``, ``subprocess``
            (always in the supervised child), ``off`` (call the function directly; exceptions
            propagate).
        max_failures: raise :class:`IsolationLimitError` as soon as more records than this
            failed in one batch (None: never).
        call_timeout_s: cap on the budget of any one call (None: no cap). Must be at least
            ``timeout_s``. Bounds the time lost to a record that never returns.
        split_factor: number of parts a failed call is split into (bisection is 2).
        kill_grace_s: in the child process, extra seconds after a call's budget before the
            parent kills a child that ignored its own alarm (a C call that blocks signals).
        traceback_limit_bytes: a failure keeps the last this-many bytes of its traceback.
        message_limit_bytes: a failure keeps the first this-many bytes of its message.
    """

    timeout_s: float | None = None
    memory_mb: int | None = None
    mode: Mode = "auto"
    max_failures: int | None = None
    call_timeout_s: float | None = None
    split_factor: int = 8
    kill_grace_s: float = 1.0
    traceback_limit_bytes: int = 4096
    message_limit_bytes: int = 1024

    def __post_init__(self) -> None:
        _positive("timeout_s", self.timeout_s)
        _positive("call_timeout_s", self.call_timeout_s)
        _positive("kill_grace_s", self.kill_grace_s)
        if self.memory_mb is not None and not _is_int(self.memory_mb, minimum=1):
            _bad("memory_mb", self.memory_mb, "a positive integer (MiB)")
        if self.mode not in MODES:
            _bad("mode", self.mode, f"one of {', '.join(MODES)}")
        if self.max_failures is not None and not _is_int(self.max_failures, minimum=0):
            _bad("max_failures", self.max_failures, "an integer >= 0")
        if not _is_int(self.split_factor, minimum=2):
            _bad("split_factor", self.split_factor, "an integer >= 2")
        for name in ("traceback_limit_bytes", "message_limit_bytes"):
            if not _is_int(getattr(self, name), minimum=64):
                _bad(name, getattr(self, name), "an integer >= 64")
        if (
            self.timeout_s is not None
            and self.call_timeout_s is not None
            and self.call_timeout_s < self.timeout_s
        ):
            raise ValidationError(
                "Cannot create IsolationPolicy: call_timeout_s "
                f"({self.call_timeout_s}) is shorter than timeout_s ({self.timeout_s})"
            )

    def budget_s(self, n: int) -> float | None:
        """Time budget of one call over ``n`` records: ``min(n * timeout_s, call_timeout_s)``."""
        if self.timeout_s is None:
            return self.call_timeout_s
        budget = max(n, 1) * self.timeout_s
        return budget if self.call_timeout_s is None else min(budget, self.call_timeout_s)

    @property
    def limits(self) -> tuple[int, int]:
        """(traceback, message) byte limits, as shipped to the child process."""
        return self.traceback_limit_bytes, self.message_limit_bytes


@dataclass(frozen=True)
class RecordFailure:
    """Why one record produced NULL outputs.

    Attributes:
        position: 0-based row position in the batch given to ``run_isolated``.
        kind: ``exception`` (the function raised, or returned a result of the wrong shape),
            ``timeout``, ``memory`` (``MemoryError`` under the budget, or the child process
            was killed with SIGKILL, the kernel OOM killer's signal) or ``crash`` (the child
            process died any other way).
        exception_type: exception class name, or the signal (``SIGSEGV``) / ``exit(3)``.
        message: first ``message_limit_bytes`` bytes of the message.
        traceback: last ``traceback_limit_bytes`` bytes of the traceback (for a crash: what
            ``faulthandler`` wrote, if anything).
        input_digest: :func:`input_digest` of the record's input values.
    """

    position: int
    kind: Kind
    exception_type: str
    message: str
    traceback: str
    input_digest: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class IsolationResult:
    """Outputs and failures of one batch.

    Attributes:
        columns: one pandas Series per output name, ``len(inputs)`` values in input order
            (take values by position: on the fast path this is the function's own Series, with
            its own index). Failed records hold NULL (None/NaN/NaT; integer and boolean
            columns with failures become object columns). Callers cast to their Arrow types.
        output_names: the output names, in order.
        failures: one entry per failed record, ordered by position.
        mode: where the function ran: ``inprocess``, ``subprocess`` or ``off``.
        calls: number of calls of the function (1 on the fast path).
        child_starts: child processes started for this batch (first start and respawns).
    """

    columns: list[Any]
    output_names: list[str]
    failures: list[RecordFailure] = field(default_factory=list)
    mode: str = "inprocess"
    calls: int = 0
    child_starts: int = 0

    @cached_property
    def outputs(self) -> pd.DataFrame:
        """The outputs as a DataFrame (columns = output names, RangeIndex); built on first use."""
        return to_frame(self.columns, self.output_names)

    @property
    def failed_positions(self) -> list[int]:
        return [f.position for f in self.failures]


def to_frame(columns: Sequence[Any], names: Sequence[str]) -> pd.DataFrame:
    """Output columns as a DataFrame with a RangeIndex (values by position)."""
    data = {}
    for name, col in zip(names, columns, strict=True):
        index = col.index
        if not isinstance(index, pd.RangeIndex) or index.start != 0 or index.step != 1:
            col = col.reset_index(drop=True)
        data[name] = col
    return pd.DataFrame(data)


def input_digest(values: Sequence[Any]) -> str:
    """SHA-256 (hex) of one record's input values, stable across processes and runs.

    Each value is encoded with a type tag and a length prefix: NULL (None, NaN, NaT, pd.NA) as
    one tag; integers and integral floats alike as decimal integers (so an int column that
    pandas turned into float64 because of NULLs digests the same); other floats by ``repr``;
    strings as UTF-8; bytes as is; dates/times as ISO strings; sequences and arrays
    element-wise; mappings (struct rows) item by item in their order; anything else by ``repr``.
    """
    h = hashlib.sha256()
    h.update(b"%d;" % len(values))
    for v in values:
        _encode(v, h)
    return h.hexdigest()


def _encode(v: Any, h: Any) -> None:
    if isinstance(v, (np.generic,)) and not isinstance(v, (np.datetime64, np.timedelta64)):
        v = v.item()
    if v is None or v is pd.NA or v is pd.NaT:
        h.update(b"N;")
    elif isinstance(v, bool):
        h.update(b"B1;" if v else b"B0;")
    elif isinstance(v, int):
        _tagged(h, b"I", str(v).encode())
    elif isinstance(v, float):
        if math.isnan(v):
            h.update(b"N;")
        elif v.is_integer() and abs(v) < 2**63:
            _tagged(h, b"I", str(int(v)).encode())
        else:
            _tagged(h, b"F", repr(v).encode())
    elif isinstance(v, str):
        _tagged(h, b"S", v.encode("utf-8", "surrogatepass"))
    elif isinstance(v, (bytes, bytearray, memoryview)):
        _tagged(h, b"Y", bytes(v))
    elif isinstance(v, (pd.Timestamp, _dt.datetime, _dt.date, _dt.time)):
        _tagged(h, b"T", v.isoformat().encode())
    elif isinstance(v, (np.datetime64, np.timedelta64, pd.Timedelta, _dt.timedelta)):
        _tagged(h, b"D", str(v).encode())
    elif isinstance(v, decimal.Decimal):
        _tagged(h, b"E", str(v).encode())
    elif isinstance(v, Mapping):
        h.update(b"M%d;" % len(v))
        for key, item in v.items():
            _encode(key, h)
            _encode(item, h)
    elif isinstance(v, (list, tuple, np.ndarray, pd.Series)):
        items = list(v)
        h.update(b"L%d;" % len(items))
        for item in items:
            _encode(item, h)
    else:
        _tagged(h, b"R", repr(v).encode())


def _tagged(h: Any, tag: bytes, payload: bytes) -> None:
    h.update(b"%s%d:" % (tag, len(payload)))
    h.update(payload)


def bounded_head(text: str, limit: int) -> str:
    """The first ``limit`` UTF-8 bytes of ``text`` (with an ellipsis when cut)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def bounded_tail(text: str, limit: int) -> str:
    """The last ``limit`` UTF-8 bytes of ``text`` (with an ellipsis when cut)."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return "..." + data[len(data) - limit + 3 :].decode("utf-8", "ignore")


def _is_int(value: Any, *, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _positive(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        _bad(name, value, "a positive number of seconds or None")
    if math.isinf(value):
        _bad(name, value, "finite (use None for no limit)")


def _bad(name: str, value: Any, expected: str) -> None:
    raise ValidationError(
        f"Cannot create IsolationPolicy: {name} must be {expected}, got {value!r}"
    )
