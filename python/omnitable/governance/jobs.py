"""The registry of maintenance jobs: name -> factory taking the job's keyword options
(docs/governance.md). ``Table.maintain`` and ``omnitable govern`` build jobs from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omnitable.governance.expire import ExpireJob
from omnitable.governance.job import MaintenanceJob
from omnitable.governance.orphans import OrphanJob

JOBS: dict[str, Callable[..., MaintenanceJob]] = {
    "expire": ExpireJob,
    "orphans": OrphanJob,
}


def build(name: str, **options: Any) -> MaintenanceJob:
    return JOBS[name](**options)
