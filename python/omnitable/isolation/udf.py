"""``isolated(fn)``: a pandas function wrapped for record-level isolation, usable as the body of
a plain PySpark pandas UDF::

    from pyspark.sql.functions import pandas_udf
    from omnitable.isolation import isolated, isolated_schema

    score = pandas_udf(isolated(my_fn, timeout_s=0.5, memory_mb=512), "double")
    df.select(score("text"))                      # failed records are NULL

    checked = pandas_udf(isolated(my_fn, errors="column"), isolated_schema("double"))
    df.select(checked("text").alias("r")).select("r.value", "r.error_kind", "r.error_message")

Runs in: the process that calls the wrapped function — a Spark Python worker for a pandas UDF
(the wrapper is pickled with the UDF on the driver), or any caller of the function directly.
"""

from __future__ import annotations

import inspect
import logging
import sys
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, Literal

import pandas as pd

from omnitable.exceptions import ValidationError
from omnitable.isolation.engine import execute, validate_output_names
from omnitable.isolation.policy import IsolationPolicy, Mode, RecordFailure, to_frame

logger = logging.getLogger("omnitable.isolation")

ErrorsMode = Literal["null", "column"]
ERROR_FIELDS = ("error_kind", "error_type", "error_message", "error_digest")
"""Extra string fields of ``errors="column"`` outputs (NULL for records that succeeded)."""


class IsolatedFunction:
    """A pandas function under isolation; call it like the function (one batch per call).

    Attributes:
        fn: the wrapped function.
        policy: its :class:`IsolationPolicy`.
        output_names: output names (``["value"]`` for a single output).
        errors: ``"null"`` (return only the outputs) or ``"column"`` (also return
            :data:`ERROR_FIELDS`).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        policy: IsolationPolicy,
        output_names: list[str],
        errors: ErrorsMode,
        counter: Any = None,
        keep_failures: int = 1000,
    ) -> None:
        self.fn = fn
        self.policy = policy
        self.output_names = output_names
        self.errors = errors
        self.counter = counter
        self.keep_failures = keep_failures
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self.__qualname__ = getattr(fn, "__qualname__", self.__name__)
        self.__doc__ = getattr(fn, "__doc__", None)
        # No annotations: pandas_udf then treats the callable as a scalar pandas UDF.
        self.__signature__ = inspect.Signature(
            [inspect.Parameter("columns", inspect.Parameter.VAR_POSITIONAL)]
        )
        self._init_log()

    def _init_log(self) -> None:
        self._lock = threading.Lock()
        self._log: deque[RecordFailure] = deque(maxlen=self.keep_failures)
        self._counts: Counter[str] = Counter()
        self.batches = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_lock", "_log", "_counts", "batches"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_log()

    def __call__(self, *columns: Any) -> Any:
        """Compute one batch: a Series (one output, ``errors="null"``) or a DataFrame."""
        if not columns:
            raise ValidationError(f"Cannot call {self.__name__}: it needs at least one column")
        n = len(columns[0])
        ex = execute(
            self.fn, columns, n, self.output_names, self.policy, _previous_attempt_failed()
        )
        self.batches += 1
        if ex.failures:
            self._record(ex.failures)
        if self.errors == "null":
            if len(self.output_names) == 1:
                return ex.columns[0]
            return to_frame(ex.columns, self.output_names)
        frame = to_frame(ex.columns, self.output_names)
        fields: dict[str, list[Any]] = {name: [None] * n for name in ERROR_FIELDS}
        for f in ex.failures:
            for name, value in zip(
                ERROR_FIELDS, (f.kind, f.exception_type, f.message, f.input_digest), strict=True
            ):
                fields[name][f.position] = value
        for name, values in fields.items():
            frame[name] = pd.Series(values, dtype=object)
        return frame

    @property
    def failures(self) -> list[RecordFailure]:
        """Failures seen by this object in this process (the last ``keep_failures``).

        Positions are relative to the batch they occurred in. Inside Spark each Python worker
        holds its own copy; use ``counter`` (:func:`failure_counter`) for job-wide counts.
        """
        with self._lock:
            return list(self._log)

    @property
    def failure_counts(self) -> dict[str, int]:
        """Failed records by kind, in this process, since creation or :meth:`clear_failures`."""
        with self._lock:
            return dict(self._counts)

    def clear_failures(self) -> None:
        with self._lock:
            self._log.clear()
            self._counts.clear()

    def _record(self, failures: list[RecordFailure]) -> None:
        kinds = Counter(f.kind for f in failures)
        with self._lock:
            self._log.extend(failures)
            self._counts.update(kinds)
        for f in failures[:20]:
            logger.warning(
                "isolated %s: record %d of a batch failed (%s, %s: %s); input digest %s",
                self.__name__,
                f.position,
                f.kind,
                f.exception_type,
                f.message.splitlines()[0] if f.message else "",
                f.input_digest,
            )
        if len(failures) > 20:
            logger.warning("isolated %s: %d more failed records", self.__name__, len(failures) - 20)
        if self.counter is not None:
            self.counter.add(dict(kinds))


def isolated(
    fn: Callable[..., Any] | None = None,
    *,
    timeout_s: float | None = None,
    memory_mb: int | None = None,
    mode: Mode = "auto",
    errors: ErrorsMode = "null",
    output_names: list[str] | None = None,
    max_failures: int | None = None,
    call_timeout_s: float | None = None,
    counter: Any = None,
    keep_failures: int = 1000,
    **policy: Any,
) -> Any:
    """Wrap a vectorized pandas function so that failing records become NULLs.

    Usable as a decorator (``@isolated(timeout_s=1)``) and as the body of a pandas UDF
    (``pandas_udf(isolated(fn), "double")``). Semantics: see ``docs/isolation.md``.

    Args:
        fn: the function; takes pandas Series, returns a Series (one output) or a DataFrame
            holding ``output_names``.
        timeout_s: per-record time budget; a call over n records gets ``n * timeout_s``.
        memory_mb: per-call address-space budget in MiB.
        mode: ``auto`` | ``inprocess`` | ``subprocess`` | ``off``. In ``auto`` mode a Spark task
            whose previous attempt failed runs in the supervised child process.
        errors: ``"null"``: return the outputs only. ``"column"``: return a DataFrame with the
            outputs (``value`` for one output) followed by :data:`ERROR_FIELDS`; declare the UDF
            with :func:`isolated_schema`.
        output_names: names of several outputs (the UDF returns a struct of them).
        max_failures: fail the batch (IsolationLimitError) past this many failed records.
        call_timeout_s: cap on one call's budget (bounds the cost of a record that hangs).
        counter: a Spark accumulator from :func:`failure_counter` (counts failures by kind).
        keep_failures: how many failures :attr:`IsolatedFunction.failures` keeps.
        **policy: further :class:`IsolationPolicy` fields (``split_factor``, ``kill_grace_s``,
            ``traceback_limit_bytes``, ``message_limit_bytes``).

    Returns:
        An :class:`IsolatedFunction`, or a decorator when ``fn`` is omitted.

    Raises:
        ValidationError: invalid arguments.
    """
    unknown = set(policy) - {
        "split_factor",
        "kill_grace_s",
        "traceback_limit_bytes",
        "message_limit_bytes",
    }
    if unknown:
        raise ValidationError(f"Cannot isolate a function: unknown option(s) {sorted(unknown)}")
    pol = IsolationPolicy(
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        mode=mode,
        max_failures=max_failures,
        call_timeout_s=call_timeout_s,
        **policy,
    )
    if errors not in ("null", "column"):
        raise ValidationError(
            f"Cannot isolate a function: errors must be 'null' or 'column', got {errors!r}"
        )
    names = validate_output_names(output_names) if output_names is not None else ["value"]
    clash = set(names) & set(ERROR_FIELDS)
    if errors == "column" and clash:
        raise ValidationError(
            f"Cannot isolate a function: output name(s) {sorted(clash)} are reserved"
        )
    if not isinstance(keep_failures, int) or keep_failures < 0:
        raise ValidationError(
            f"Cannot isolate a function: keep_failures must be >= 0, got {keep_failures!r}"
        )

    def wrap(f: Callable[..., Any]) -> IsolatedFunction:
        if isinstance(f, IsolatedFunction) or not callable(f):
            raise ValidationError(f"Cannot isolate {f!r}: expected a plain callable")
        return IsolatedFunction(f, pol, names, errors, counter, keep_failures)

    return wrap if fn is None else wrap(fn)


def isolated_schema(value_type: str | None = None, /, **outputs: str) -> str:
    """Spark DDL of an ``errors="column"`` UDF's struct: outputs, then the error fields.

    ``isolated_schema("double")`` is ``"value double, error_kind string, error_type string,
    error_message string, error_digest string"``; ``isolated_schema(a="double", b="string")``
    declares two outputs ``a`` and ``b`` (pass ``output_names=["a", "b"]`` to isolated).
    """
    if (value_type is None) == (not outputs):
        raise ValidationError(
            "Cannot build an isolated schema: give either one value type or named output types"
        )
    fields = {"value": value_type} if value_type is not None else outputs
    parts = [f"`{name}` {ddl}" for name, ddl in fields.items()]
    parts += [f"{name} string" for name in ERROR_FIELDS]
    return ", ".join(parts)


class KindCountsParam:
    """Spark AccumulatorParam (duck-typed): dicts of failure counts by kind, summed."""

    def zero(self, value: dict[str, int]) -> dict[str, int]:
        return {}

    def addInPlace(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        for kind, count in b.items():
            a[kind] = a.get(kind, 0) + count
        return a


def failure_counter(spark: Any) -> Any:
    """A Spark accumulator of failed records by kind, to pass as ``isolated(..., counter=)``.

    Read ``counter.value`` on the driver after an action, e.g. ``{"exception": 3}``. Spark's
    accumulator rules apply: updates inside transformations may count again when a task or
    stage is re-executed.

    Args:
        spark: a classic SparkSession or its SparkContext. Spark Connect has no accumulators:
            count failures from the error fields of the UDF's output instead
            (``df.groupBy("out.error_kind").count()``).

    Raises:
        ValidationError: ``spark`` is a Spark Connect session.
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        from omnitable.exceptions import ValidationError

        raise ValidationError(
            "Cannot create a failure counter: Spark Connect has no accumulators; count the "
            'failures from the UDF\'s error_kind field instead (errors="column" outputs)'
        )
    sc = getattr(spark, "sparkContext", spark)  # classic only: accumulators live there
    return sc.accumulator({}, KindCountsParam())


def _previous_attempt_failed() -> bool:
    """True inside a Spark task whose attempt number is above 0 (an earlier attempt failed)."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx is not None and ctx.attemptNumber() > 0
