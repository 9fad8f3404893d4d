"""One run's lifecycle in the catalog, shared by ingest and backfill (docs/catalog.md, runs)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from omnitable.catalog.catalog import Catalog
from omnitable.catalog.records import TableRecord
from omnitable.observability import metrics
from omnitable.observability.logs import RunInfo, run_context

log = logging.getLogger("omnitable.runs")


class RunScope:
    """``with RunScope(catalog, table, kind, plan) as run:`` records a run of ``kind``.

    On entry the run is started (``running``, with this process's host, pid and a heartbeat);
    on a clean exit it is finished ``succeeded`` with :attr:`metrics`; when the body raises,
    it is recorded ``aborted`` (for exceptions of ``abort_on``) or ``failed`` with the exception's
    message and the metrics so far, and the exception propagates. A run whose process dies is
    shown ``abandoned`` once its heartbeat is overdue.

    While the body runs, log records carry the run id and table (docs/observability.md) and
    the process's run metrics count it.
    """

    def __init__(
        self,
        catalog: Catalog,
        table: TableRecord,
        kind: str,
        plan: dict[str, Any] | None = None,
        *,
        abort_on: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._catalog, self._table, self._kind, self._plan = catalog, table, kind, plan
        self._abort_on = abort_on
        self.run_id = ""
        self.metrics: Callable[[], dict[str, Any] | None] = lambda: None
        """What the run reports when it ends; set by the body (evaluated at exit)."""
        self._context: AbstractContextManager[RunInfo] | None = None

    def __enter__(self) -> RunScope:
        self.run_id = self._catalog.start_run(self._table, self._kind, self._plan)
        self._context = run_context(self.run_id, self._kind, self._table.name)
        self._context.__enter__()
        metrics.run_started(self._kind)
        log.info("%s run %s of %s started", self._kind, self.run_id, self._table.name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        status = "succeeded"
        try:
            if exc is None:
                self._catalog.finish_run(self.run_id, status, self.metrics())
                return
            status = "aborted" if isinstance(exc, self._abort_on) else "failed"
            self._catalog.fail_run(self.run_id, exc, self.metrics(), status)
        finally:
            metrics.run_finished(self._kind, status)
            log.info("%s run %s of %s %s%s", self._kind, self.run_id, self._table.name, status,
                     "" if exc is None else f": {str(exc)[:500]}")  # fmt: skip
            if self._context is not None:
                self._context.__exit__(None, None, None)
                self._context = None
