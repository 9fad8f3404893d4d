"""Observability: live progress events, structured logs carrying the run id, and optional
Prometheus metrics (docs/observability.md).

A vocabulary-level unit (standard library only, no OmniTable imports below it) so that the
catalog's run lifecycle and the backfill runner can report into it.
"""

from omnitable.observability import metrics
from omnitable.observability.logs import configure_logging, current_run, run_context
from omnitable.observability.progress import ProgressEvent

__all__ = ["ProgressEvent", "configure_logging", "current_run", "metrics", "run_context"]
