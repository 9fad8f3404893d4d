"""Record-level isolation of pandas feature functions (DESIGN.md §9; docs/isolation.md).

Every pandas feature runs inside this wrapper: the whole batch is computed by one vectorized
call (the fast path); when that call raises, returns a malformed result, overruns its time or
memory budget, or kills the process it runs in, the batch is bisected until the offending
records are isolated; they get NULL outputs and a :class:`RecordFailure`, the rest is computed.
Hard crashes (segfault, ``os._exit``, abort, OOM kill) are contained by running the function in
a supervised child process, used when asked (``mode="subprocess"``) or, in ``auto`` mode, when a
previous attempt of the Spark task died.

Layout, by where the code runs:

* :mod:`~omnitable.isolation.policy` — value types and digests (everywhere);
* :mod:`~omnitable.isolation.guard` — one guarded call: alarm, memory cap, result check (in the
  calling process on the fast path, and inside the child workers);
* :mod:`~omnitable.isolation.engine` — bisection and reassembly (calling process);
* :mod:`~omnitable.isolation.records` — per-record functions: the loop that runs them record
  by record (calling process and child workers);
* :mod:`~omnitable.isolation.supervisor` — PARENT side of the child processes (calling process);
* :mod:`~omnitable.isolation.child` — the zygote and its workers (CHILD processes only);
* :mod:`~omnitable.isolation.udf` — :func:`isolated`, the body of a pandas UDF (Spark Python
  workers, or wherever the wrapped function is called).

The package imports nothing of OmniTable but :mod:`omnitable.exceptions`.

Public API:

* :func:`run_isolated` — one batch (a DataFrame) → :class:`IsolationResult` (the backfill
  runner's entry point);
* :func:`isolated` — a callable for plain PySpark pandas UDFs, with :func:`isolated_schema` and
  :func:`failure_counter`;
* :func:`per_record` — marks a function of one record, isolated without bisection;
* :class:`IsolationPolicy`, :class:`RecordFailure`, :class:`IsolationResult`,
  :class:`IsolationLimitError`, :func:`input_digest`.
"""

from __future__ import annotations

from omnitable.exceptions import IsolationLimitError
from omnitable.isolation.engine import CallSizing, run_isolated
from omnitable.isolation.policy import (
    KINDS,
    MODES,
    IsolationPolicy,
    IsolationResult,
    Kind,
    Mode,
    RecordFailure,
    input_digest,
)
from omnitable.isolation.records import PerRecord, per_record
from omnitable.isolation.udf import (
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
    "PerRecord",
    "RecordFailure",
    "failure_counter",
    "input_digest",
    "isolated",
    "isolated_schema",
    "per_record",
    "run_isolated",
]
