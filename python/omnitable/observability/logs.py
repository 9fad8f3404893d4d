"""Structured logs with the run id (docs/observability.md, "Logs").

While a run (ingest, backfill, upsert, ...) executes, :func:`run_context` holds its id, kind and
table in a context variable; :class:`RunContextFilter` copies them onto every log record that
passes a handler it is attached to (``record.run_id``, ``record.run_kind``, ``record.table``;
``None`` outside a run, and a value given with ``extra=`` wins). :func:`configure_logging`
installs one handler on the ``omnitable`` logger with that filter and either a text format or
JSON lines (``time``, ``level``, ``logger``, ``message``, ``run_id``, ``table``, ``kind``, and
``exception`` when one is logged). ``OMNITABLE_LOG_FORMAT=json`` in the environment configures
JSON lines when ``omnitable`` is imported.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

from omnitable.exceptions import ValidationError

LOG_FORMAT_ENV = "OMNITABLE_LOG_FORMAT"
LOG_LEVEL_ENV = "OMNITABLE_LOG_LEVEL"


@dataclass(frozen=True)
class RunInfo:
    """The run the current thread (or task) executes."""

    run_id: str
    kind: str
    table: str


_RUN: contextvars.ContextVar[RunInfo | None] = contextvars.ContextVar("omnitable_run", default=None)


def current_run() -> RunInfo | None:
    """The run executing in this context, or None."""
    return _RUN.get()


@contextmanager
def run_context(run_id: str, kind: str, table: str) -> Iterator[RunInfo]:
    """Mark the body as part of run ``run_id`` (restored on exit; nests)."""
    info = RunInfo(run_id, kind, table)
    token = _RUN.set(info)
    try:
        yield info
    finally:
        _RUN.reset(token)


class RunContextFilter(logging.Filter):
    """Adds ``run_id``, ``run_kind`` and ``table`` of the current run to each record (never
    drops one). Attach it to your own handlers to get the run id in their format strings."""

    def filter(self, record: logging.LogRecord) -> bool:
        info = _RUN.get()
        for attr, value in (
            ("run_id", info.run_id if info else None),
            ("run_kind", info.kind if info else None),
            ("table", info.table if info else None),
        ):
            if getattr(record, attr, None) is None:
                setattr(record, attr, value)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, run_id, table,
    kind, and ``exception`` (the formatted traceback) when the record has one."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "run_id": getattr(record, "run_id", None),
            "table": getattr(record, "table", None),
            "kind": getattr(record, "run_kind", None),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [run=%(run_id)s table=%(table)s] %(message)s"
_HANDLER_MARK = "_omnitable_configured"


def configure_logging(
    json: bool = False,
    level: int | str = "INFO",
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Send the ``omnitable`` loggers' records at ``level`` and above to ``stream`` (default
    stderr) as JSON lines (``json=True``) or text, each with the run id and table of the run it
    belongs to. Calling it again replaces the handler it installed before; returns the handler.

    Raises:
        ValidationError: ``level`` is not a logging level name or number.
    """
    if isinstance(level, str):
        resolved = logging.getLevelName(level.upper())
        if not isinstance(resolved, int):
            raise ValidationError(
                f"Cannot configure logging: unknown level {level!r}; use DEBUG, INFO, WARNING, "
                "ERROR or CRITICAL"
            )
        level = resolved
    logger = logging.getLogger("omnitable")
    for old in [h for h in logger.handlers if getattr(h, _HANDLER_MARK, False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(RunContextFilter())
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT))
    setattr(handler, _HANDLER_MARK, True)
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def configure_from_environment() -> logging.Handler | None:
    """Apply ``OMNITABLE_LOG_FORMAT`` (``json`` or ``text``) and ``OMNITABLE_LOG_LEVEL`` when
    the format is set; nothing otherwise."""
    fmt = os.environ.get(LOG_FORMAT_ENV, "").strip().lower()
    if not fmt:
        return None
    if fmt not in ("json", "text"):
        raise ValidationError(
            f"Cannot configure logging: {LOG_FORMAT_ENV} must be json or text, got {fmt!r}"
        )
    return configure_logging(json=fmt == "json", level=os.environ.get(LOG_LEVEL_ENV, "INFO"))
