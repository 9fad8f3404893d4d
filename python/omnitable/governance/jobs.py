"""The registry of maintenance jobs: job name -> factory taking the job's keyword options
(``Table.maintain``, ``omnitable govern``; docs/governance.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from omnitable.exceptions import ValidationError
from omnitable.governance.compact import CompactJob, FoldJob
from omnitable.governance.expire import ExpireJob
from omnitable.governance.job import MaintenanceJob
from omnitable.governance.orphans import OrphanJob
from omnitable.governance.regroup import RegroupJob
from omnitable.governance.views import ViewsJob

JOBS: dict[str, Callable[..., MaintenanceJob]] = {
    "compact": CompactJob,
    "fold": FoldJob,
    "expire": ExpireJob,
    "orphans": OrphanJob,
    "regroup": RegroupJob,
    "views": ViewsJob,
}


def make_job(name: str, options: Mapping[str, Any] | None = None) -> MaintenanceJob:
    """The job ``name`` built with ``options``.

    Raises:
        ValidationError: an unknown job name (the message lists the known ones), or options the
            job does not take.
    """
    factory = JOBS.get(name)
    if factory is None:
        raise ValidationError(
            f"Unknown maintenance job {name!r}; known jobs: {', '.join(sorted(JOBS))}"
        )
    try:
        return factory(**dict(options or {}))
    except TypeError as exc:
        raise ValidationError(f"Invalid options for maintenance job {name!r}: {exc}") from exc
