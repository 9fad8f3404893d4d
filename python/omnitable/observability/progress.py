"""Live progress of a backfill (docs/observability.md, "Progress").

The runner reports a :class:`ProgressEvent` when each step starts and after each committed
checkpoint chunk. ``progress=`` of ``BackfillPlan.run`` accepts:

- a callable taking one positional argument: it gets the :class:`ProgressEvent`;
- a callable taking four: ``progress(step, steps, fragments_done, fragments_total)`` (the
  original contract, kept);
- ``True``: a one-line progress on stderr (:class:`StderrProgress`).

Callbacks run on the driver thread between Spark jobs: keep them quick; an exception raised by
one fails the run.
"""

from __future__ import annotations

import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from omnitable.exceptions import ValidationError

LegacyProgress = Callable[[int, int, int, int], None]
EventProgress = Callable[["ProgressEvent"], None]


@dataclass(frozen=True)
class ProgressEvent:
    """Where a backfill run stands.

    Attributes:
        run_id, table: the run and its table.
        step, steps: the current step (1-based) and the plan's step count.
        fragments_done, fragments_total: fragments of the current step committed / planned.
        rows_done, rows_total: rows of the current step committed / planned.
        run_rows_done, run_rows_total: rows over all steps committed / planned (a row computed by
            two steps counts twice).
        elapsed_s: seconds since the run started.
        eta_s: estimated seconds left for the whole run, from the rate so far (rows per
            second); None until a row is done, 0.0 when every row is.
    """

    run_id: str
    table: str
    step: int
    steps: int
    fragments_done: int
    fragments_total: int
    rows_done: int
    rows_total: int
    run_rows_done: int
    run_rows_total: int
    elapsed_s: float
    eta_s: float | None

    @property
    def fraction(self) -> float:
        """Share of the run's rows done (1.0 for a run with no rows)."""
        return 1.0 if self.run_rows_total == 0 else self.run_rows_done / self.run_rows_total

    def describe(self) -> str:
        """A one-line summary: step, fragments, rows, elapsed and ETA."""
        eta = "?" if self.eta_s is None else f"{self.eta_s:.0f}s"
        return (
            f"{self.table} step {self.step}/{self.steps}: fragments "
            f"{self.fragments_done}/{self.fragments_total}, rows {self.rows_done}/"
            f"{self.rows_total} ({self.fraction:.0%} of run), {self.elapsed_s:.0f}s elapsed, "
            f"ETA {eta}"
        )


def eta(elapsed_s: float, done: int, total: int) -> float | None:
    """Seconds left at the rate so far; None when nothing is done yet, 0.0 when all is."""
    if done >= total:
        return 0.0
    if done <= 0 or elapsed_s <= 0:
        return None
    left = elapsed_s / done * (total - done)
    return left if math.isfinite(left) else None


def takes_event(callback: Callable[..., Any]) -> bool:
    """True when ``callback`` takes one positional argument (a :class:`ProgressEvent`); False
    when it takes four (the legacy form). One that takes neither is a ValidationError."""
    try:
        signature = inspect.signature(callback)
    except (TypeError, ValueError):  # a builtin without a signature: the legacy form
        return False
    for arity, event in ((4, False), (1, True)):
        try:
            signature.bind(*range(arity))
        except TypeError:
            continue
        return event
    raise ValidationError(
        "Cannot report backfill progress: progress must be True, a callable taking a "
        "ProgressEvent, or one taking (step, steps, fragments_done, fragments_total)"
    )


def dispatcher(
    progress: bool | Callable[..., Any] | None,
) -> Callable[[ProgressEvent], None] | None:
    """What the runner calls with each event, from a ``progress=`` argument (see the module
    doc); None when there is nothing to report to.

    Raises:
        ValidationError: ``progress`` is none of the accepted forms.
    """
    if progress is None or progress is False:
        return None
    if progress is True:
        return StderrProgress()
    if not callable(progress):
        raise ValidationError(
            f"Cannot report backfill progress: progress must be True, False, None or a "
            f"callable, got {type(progress).__name__}"
        )
    if takes_event(progress):
        return progress
    legacy: LegacyProgress = progress
    return lambda e: legacy(e.step, e.steps, e.fragments_done, e.fragments_total)


class StderrProgress:
    """Writes :meth:`ProgressEvent.describe` to ``stream`` (default stderr): rewriting one line
    on a terminal, one line per event (at most one every ``min_interval_s``, plus the last of
    each step) otherwise."""

    def __init__(self, stream: IO[str] | None = None, min_interval_s: float = 1.0) -> None:
        self.stream = stream
        self.min_interval_s = min_interval_s
        self._last = -math.inf

    def __call__(self, event: ProgressEvent) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        now = time.monotonic()
        done = event.fragments_done >= event.fragments_total
        if not done and now - self._last < self.min_interval_s:
            return
        self._last = now
        if stream.isatty():
            end = "\n" if done and event.step == event.steps else ""
            stream.write("\r\x1b[K" + event.describe() + end)
        else:
            stream.write(event.describe() + "\n")
        stream.flush()
