"""The one contract of every maintenance job: Prepare -> Execute -> Commit (docs/governance.md).

- ``prepare(ctx)`` reads one snapshot (the head of ``ctx.branch``) and decides. It returns a
  :class:`MaintenancePlan` (printable, JSON-able) and writes nothing anywhere.
- ``execute(ctx, plan)`` writes new files under the table location (fresh unique names), while
  readers and writers keep using the old layout. It writes nothing to the catalog and returns an
  :class:`Executed` naming every file it wrote.
- ``commit(ctx, plan, executed)`` switches atomically: one catalog commit (or none, for jobs that
  only delete unreachable files) that re-validates against everything committed since
  ``plan.base_version`` and raises :class:`~omnitable.exceptions.CommitConflict` when a
  concurrent write touched what the plan rewrote.

:func:`run_job` drives the phases. A failed or conflicting commit removes the files ``execute``
wrote (after another error, those no catalog row references: it may have come after the commit
landed), so nothing is left behind and the old layout keeps serving; a conflict re-prepares from
the new head, and after ``attempts`` conflicts the job is skipped (never forced).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from omnitable._failpoints import failpoint
from omnitable.catalog.references import still_referenced
from omnitable.context import TableContext
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.format.fs import delete_quietly

log = logging.getLogger(__name__)

OUTCOMES = ("committed", "nothing_to_do", "dry_run", "skipped")
"""How a job ended: its commit landed, its plan was empty, only planned, or given up after
conflicts. A job run under a lease (governance/service.py) may also end ``leased`` (another
owner holds it: not run) or ``lease_lost`` (taken mid-job: nothing committed)."""


@dataclass(frozen=True)
class MaintenancePlan:
    """What a job decided on one snapshot.

    ``actions``: one JSON-able mapping per unit of work (a run of fragments to compact, a version
    to expire, a file to remove, ...); empty when there is nothing to do. ``summary``: totals a
    user reads before running it (files, bytes, rows).
    """

    job: str
    table: str
    branch: str
    base_version: int
    actions: tuple[Mapping[str, Any], ...] = ()
    summary: Mapping[str, Any] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.actions

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "table": self.table,
            "branch": self.branch,
            "base_version": self.base_version,
            "summary": dict(self.summary),
            "actions": [dict(a) for a in self.actions],
        }

    def describe(self) -> str:
        """One header line, then one line per action."""
        head = f"{self.job} {self.table}@{self.branch} v{self.base_version}: "
        head += json.dumps(dict(self.summary), sort_keys=True, default=str)
        return "\n".join([head, *(f"  {json.dumps(dict(a), default=str)}" for a in self.actions)])


@dataclass(frozen=True)
class Executed:
    """What ``execute`` wrote: ``paths`` (relative to the table location) are removed when the
    commit fails; ``payload`` is the job's own hand-over to its commit."""

    paths: tuple[str, ...] = ()
    payload: Any = None


@dataclass(frozen=True)
class MaintenanceResult:
    """How one job ended (``outcome`` in :data:`OUTCOMES`). ``version``: the commit it made, or
    None when the catalog was not changed. ``summary``: what changed (files rewritten, bytes
    written and freed, ...); for ``skipped``, the last conflict under ``"conflict"``."""

    job: str
    outcome: str
    version: int | None
    plan: MaintenancePlan
    summary: Mapping[str, Any] = field(default_factory=dict)


class MaintenanceJob(Protocol):
    """One kind of maintenance (compact, fold, expire, orphans, ...)."""

    name: str

    def prepare(self, ctx: TableContext) -> MaintenancePlan: ...

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed: ...

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult: ...


def run_job(
    ctx: TableContext, job: MaintenanceJob, *, dry_run: bool = False, attempts: int = 3
) -> MaintenanceResult:
    """Prepare, execute and commit ``job`` on ``ctx.branch``.

    A dry run returns after Prepare. A :class:`CommitConflict` removes what Execute wrote and
    starts over from a fresh Prepare, at most ``attempts`` times in all; then the job is
    ``skipped``. Any other error removes what Execute wrote that no catalog row references (the
    error may come after the commit landed; all is kept when the catalog cannot be asked) and
    propagates.

    Raises:
        ValidationError: ``attempts`` is below 1.
    """
    if attempts < 1:
        raise ValidationError(f"attempts must be at least 1, got {attempts}")
    last: CommitConflict | None = None
    plan: MaintenancePlan | None = None
    for attempt in range(1, attempts + 1):
        plan = job.prepare(ctx)
        failpoint("governance.after_prepare")
        if dry_run:
            return MaintenanceResult(job.name, "dry_run", None, plan, plan.summary)
        if plan.empty:
            return MaintenanceResult(job.name, "nothing_to_do", None, plan, plan.summary)
        executed = job.execute(ctx, plan)
        try:
            failpoint("governance.after_execute")
            return job.commit(ctx, plan, executed)
        except CommitConflict as exc:
            _remove(ctx, executed)
            last = exc
            log.info("%s on %s: conflict on attempt %d: %s", job.name, ctx.name, attempt, exc)
        except BaseException:
            _remove_unreferenced(ctx, executed)
            raise
    assert plan is not None
    return MaintenanceResult(job.name, "skipped", None, plan, {"conflict": str(last)})


def _remove(ctx: TableContext, executed: Executed) -> None:
    delete_quietly(ctx.location.fs, [ctx.location.child_path(p) for p in executed.paths])


def _remove_unreferenced(ctx: TableContext, executed: Executed) -> None:
    """After a failure that may have come after the commit landed (a connection lost during
    COMMIT, an interrupt or a crash after it): remove only the files no catalog row references.
    When the catalog cannot tell, keep them all (the orphan job removes them later)."""
    if not executed.paths:
        return
    try:
        with ctx.catalog.store.read() as conn:
            kept = still_referenced(conn, ctx.record.table_id, executed.paths)
    except Exception as exc:  # the catalog is unreachable: the commit may have landed
        log.warning("%s: keeping %d written files: %s", ctx.name, len(executed.paths), exc)
        return
    gone = [p for p in executed.paths if p not in kept]
    delete_quietly(ctx.location.fs, [ctx.location.child_path(p) for p in gone])
