"""Record-level isolation of pandas feature functions (DESIGN.md §9; docs/isolation.md).

Every pandas feature runs inside this wrapper: the whole batch is computed by one vectorized
call (the fast path); when that call raises, returns a malformed result, overruns its time or
memory budget, or kills the process it runs in, the batch is bisected until the offending
records are isolated; they get NULL outputs and a :class:`RecordFailure`, the rest is computed.
Hard crashes (segfault, ``os._exit``, abort, OOM kill) are contained by running the function in
a supervised child process, used when asked (``mode="subprocess"``) or, in ``auto`` mode, when a
previous attempt of the Spark task died.

Public API:

* :func:`run_isolated` — one batch (a DataFrame) → :class:`IsolationResult` (the backfill
  runner's entry point);
* :func:`isolated` — a callable for plain PySpark pandas UDFs, with :func:`isolated_schema` and
  :func:`failure_counter`;
* :class:`IsolationPolicy`, :class:`RecordFailure`, :class:`IsolationResult`,
  :class:`IsolationLimitError`, :func:`input_digest`.
"""

from __future__ import annotations

from omnitable.exec.isolation_engine import CallSizing, run_isolated
from omnitable.exec.isolation_types import (
    KINDS,
    MODES,
    IsolationLimitError,
    IsolationPolicy,
    IsolationResult,
    Kind,
    Mode,
    RecordFailure,
    input_digest,
)
from omnitable.exec.isolation_udf import (
    ERROR_FIELDS,
    IsolatedFunction,
    failure_counter,
    isolated,
    isolated_schema,
)

__all__ = [
    "ERROR_FIELDS",
    "KINDS",
    "MODES",
    "CallSizing",
    "IsolatedFunction",
    "IsolationLimitError",
    "IsolationPolicy",
    "IsolationResult",
    "Kind",
    "Mode",
    "RecordFailure",
    "failure_counter",
    "input_digest",
    "isolated",
    "isolated_schema",
    "run_isolated",
]
