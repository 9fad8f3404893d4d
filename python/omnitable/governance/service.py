"""A long-running governance service: rounds of maintenance jobs on one table, each job under a
lease so two services never run the same job at once (docs/governance.md, "Running as a
service"; ``omnitable govern TABLE --interval 10m``).

Every round runs the jobs in order. For each job the service takes the job's lease on the table
(catalog/lease.py; absent, expired or already its own), renews it every third of its TTL from a
background thread while the job runs, and releases it at the end. A job whose lease another
service holds is reported ``leased`` and not run. Every commit of the job re-checks the lease
inside its transaction (``check_held``): a job whose lease expired and was taken meanwhile
commits nothing, its files are removed (``run_job``), and it is reported ``lease_lost``.

A table dropped while governed: the job in flight commits nothing, removes its files, is
reported ``dropped``, and the service stops. Any other error of a job is reported ``failed``
(with the error) and the service goes on with the next job. :meth:`GovernService.stop` (the CLI
calls it on SIGINT/SIGTERM) ends the service after the job in flight.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import socket
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from omnitable.catalog.lease import Holder, Lease, LeaseLost, acquire, holding, release, renew
from omnitable.context import TableContext
from omnitable.exceptions import NotFoundError, ValidationError
from omnitable.governance.job import MaintenancePlan, MaintenanceResult, run_job
from omnitable.governance.jobs import make_job
from omnitable.settings import GOVERNANCE_LEASE_TTL_S

log = logging.getLogger(__name__)

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_interval(value: str | float) -> float:
    """Seconds in ``value``: a number of seconds, or a number with a unit ``s``, ``m``, ``h`` or
    ``d`` (``"30s"``, ``"10m"``, ``"1.5h"``).

    Raises:
        ValidationError: not such a value, or not positive.
    """
    if isinstance(value, bool):
        raise ValidationError(f"Invalid interval {value!r}: give seconds or e.g. 30s, 10m, 1h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*", str(value).lower())
        if found is None:
            raise ValidationError(
                f"Invalid interval {value!r}: give seconds or a number with a unit s, m, h or d "
                "(e.g. 30s, 10m, 1h)"
            )
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
    if not seconds > 0:
        raise ValidationError(f"Invalid interval {value!r}: it must be positive")
    return seconds


@dataclass(frozen=True)
class JobReport:
    """How one job of a round ended: ``outcome`` is a :data:`~omnitable.governance.job.OUTCOMES`
    value, or ``leased`` (another service holds its lease: ``holder``), ``lease_lost``,
    ``dropped`` or ``failed`` (``error`` says why)."""

    job: str
    outcome: str
    version: int | None = None
    summary: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    holder: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "outcome": self.outcome, "version": self.version,
                "summary": dict(self.summary), "error": self.error, "holder": self.holder}  # fmt: skip

    def describe(self) -> str:
        done = f"version {self.version}" if self.version is not None else "no commit"
        extra = self.error or (f"held by {self.holder}" if self.holder else dict(self.summary))
        return f"{self.job}: {self.outcome} ({done}) {extra}"


@dataclass(frozen=True)
class RoundReport:
    """One round: its number (from 1), start time (UTC, ISO) and one report per job run."""

    round: int
    started: str
    jobs: tuple[JobReport, ...]

    @property
    def dropped(self) -> bool:
        return any(j.outcome == "dropped" for j in self.jobs)

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.round, "started": self.started,
                "jobs": [j.to_dict() for j in self.jobs]}  # fmt: skip


class _Renewer:
    """Renews a lease every third of its TTL until stopped; ``lost`` once it was taken."""

    def __init__(self, ctx: TableContext, lease: Lease, ttl_s: float) -> None:
        self.ctx, self.lease, self.ttl_s = ctx, lease, ttl_s
        self.lost = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.job}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.ttl_s / 3):
            try:
                renewed = renew(self.ctx.catalog.store, self.lease, self.ttl_s)
            except Exception as exc:  # a failed renewal is retried; the commit checks
                log.warning("cannot renew the %s lease: %s", self.lease.job, exc)
                continue
            if renewed is None:
                self.lost = True
                return
            self.lease = renewed

    def stop(self) -> Lease:
        self._done.set()
        self._thread.join()
        return self.lease


class GovernService:
    """Run ``jobs`` (names, with ``options``: job -> keyword options) on ``ctx``'s table and
    branch every ``interval`` (seconds or ``"10m"``), ``rounds`` times (None: until
    :meth:`stop`). ``owner`` names this service in its leases (default host:pid:random);
    ``ttl_s`` is the lease TTL (default: the ``governance.lease_ttl_s`` setting).
    ``progress(line)`` is called as each job starts and ends.

    Raises:
        ValidationError: unknown jobs or options, a bad interval, TTL or number of rounds.
    """

    def __init__(
        self,
        ctx: TableContext,
        jobs: Sequence[str],
        *,
        interval: str | float,
        rounds: int | None = None,
        options: Mapping[str, Mapping[str, Any]] | None = None,
        ttl_s: float | None = None,
        owner: str | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        if isinstance(jobs, str) or not jobs:
            raise ValidationError("Cannot govern: give a non-empty list of job names")
        stray = sorted(set(options or {}) - set(jobs))
        if stray:
            raise ValidationError(f"Options given for job(s) not run: {', '.join(stray)}")
        for name in jobs:
            make_job(name, (options or {}).get(name))  # validates names and options now
        if rounds is not None and (isinstance(rounds, bool) or not isinstance(rounds, int)
                                   or rounds < 1):  # fmt: skip
            raise ValidationError(f"rounds must be a positive integer or None, got {rounds!r}")
        if ttl_s is not None:
            GOVERNANCE_LEASE_TTL_S.check(ttl_s, "govern", "ttl_s")
        self.ctx, self.jobs, self.options = ctx, list(jobs), dict(options or {})
        self.interval_s = parse_interval(interval)
        self.rounds = rounds
        self.ttl_s = float(ctx.settings.resolve(GOVERNANCE_LEASE_TTL_S, ttl_s))
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.progress = progress or (lambda line: None)
        self._stop = threading.Event()

    def stop(self) -> None:
        """End the service after the job in flight (safe from a signal handler or thread)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, on_round: Callable[[RoundReport], None] | None = None) -> list[RoundReport]:
        """Run rounds until :meth:`stop`, the number of rounds, or the table is dropped; returns
        the reports (``on_round`` gets each as it ends)."""
        reports: list[RoundReport] = []
        while not self._stop.is_set():
            report = self.run_round(len(reports) + 1)
            reports.append(report)
            if on_round is not None:
                on_round(report)
            if report.dropped or (self.rounds is not None and len(reports) >= self.rounds):
                break
            self._stop.wait(self.interval_s)
        return reports

    def run_round(self, number: int = 1) -> RoundReport:
        """One round: every job in order, each under its lease (stops early when stopped or
        the table was dropped)."""
        started = dt.datetime.now(dt.timezone.utc).isoformat()
        done: list[JobReport] = []
        for name in self.jobs:
            if self._stop.is_set() and done:
                break
            self.progress(f"round {number}: {name} on {self.ctx.name}@{self.ctx.branch} ...")
            report = self.run_one(name)
            self.progress(f"round {number}: {report.describe()}")
            done.append(report)
            if report.outcome == "dropped":
                break
        return RoundReport(number, started, tuple(done))

    def run_one(self, name: str) -> JobReport:
        """Run job ``name`` once under its lease."""
        try:
            got = self.run_leased(name)
        except LeaseLost as exc:
            return JobReport(name, "lease_lost", error=str(exc))
        except Exception as exc:  # reported, the service goes on
            return self._failed(name, exc)
        if isinstance(got, Holder):
            return JobReport(name, "leased", holder=got.owner)
        return _report(got)

    def run_leased(self, name: str) -> MaintenanceResult | Holder:
        """Run job ``name`` once under its lease: take it (else return its :class:`Holder`,
        running nothing), renew it while the job runs, release it at the end (also on error).

        Raises:
            LeaseLost: the lease was taken while the job ran; nothing was committed.
        """
        store, table_id = self.ctx.catalog.store, self.ctx.record.table_id
        got = acquire(store, table_id, name, self.owner, self.ttl_s)
        if isinstance(got, Holder):
            return got
        renewer = _Renewer(self.ctx, got, self.ttl_s)
        try:
            with holding(got):
                return run_job(self.ctx, make_job(name, self.options.get(name)))
        finally:
            held = renewer.stop()
            try:
                release(store, held)
            except Exception as exc:  # the lease then expires by itself
                log.warning("cannot release the %s lease: %s", name, exc)

    def run_once(self, name: str) -> MaintenanceResult:
        """Run job ``name`` once under its lease, as a one-shot ``Table.maintain`` /
        ``omnitable govern`` does: a lease another owner holds gives outcome ``leased``
        (``summary``: ``holder``, ``expires``), a lease lost mid-job gives ``lease_lost``
        (``summary['error']``); neither committed anything. Other errors propagate."""
        try:
            got = self.run_leased(name)
        except LeaseLost as exc:
            return self._not_run(name, "lease_lost", {"error": str(exc)})
        if isinstance(got, Holder):
            expires = dt.datetime.fromtimestamp(got.expires, dt.timezone.utc).isoformat()
            return self._not_run(name, "leased", {"holder": got.owner, "expires": expires})
        return got

    def _not_run(self, name: str, outcome: str, summary: dict[str, Any]) -> MaintenanceResult:
        try:
            version = self.ctx.head_version()
        except Exception:  # a dropped table: the version no longer matters
            version = -1
        plan = MaintenancePlan(name, self.ctx.name, self.ctx.branch, version)
        return MaintenanceResult(name, outcome, None, plan, summary)

    def _failed(self, name: str, exc: Exception) -> JobReport:
        if self._dropped():
            return JobReport(name, "dropped", error=f"table '{self.ctx.name}' was dropped: {exc}")
        log.warning("%s on %s failed: %s", name, self.ctx.name, exc)
        return JobReport(name, "failed", error=f"{type(exc).__name__}: {exc}")

    def _dropped(self) -> bool:
        try:
            return self.ctx.catalog.get_table(self.ctx.name).table_id != self.ctx.record.table_id
        except NotFoundError:
            return True
        except Exception:  # the catalog cannot tell: not known to be dropped
            return False


def maintain_once(
    ctx: TableContext,
    jobs: Sequence[str],
    *,
    dry_run: bool = False,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    owner: str | None = None,
    ttl_s: float | None = None,
) -> list[MaintenanceResult]:
    """Run ``jobs`` once, in order, each under its catalog lease like a service's job
    (:meth:`GovernService.run_once`; a dry run takes none): a job whose lease another owner
    holds is ``leased``, one whose lease was lost mid-job ``lease_lost``, and the other jobs
    still run. ``owner`` defaults to ``maintain:<host>:<pid>:<random>``.

    Raises:
        ValidationError: unknown jobs or options, or a bad TTL.
    """
    if isinstance(jobs, str) or not jobs:
        raise ValidationError("Cannot maintain: give a non-empty list of job names")
    owner = owner or f"maintain:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    service = GovernService(ctx, jobs, interval=1, rounds=1, options=options, ttl_s=ttl_s,
                            owner=owner)  # fmt: skip
    if dry_run:
        return [run_job(ctx, make_job(n, service.options.get(n)), dry_run=True) for n in jobs]
    return [service.run_once(name) for name in jobs]


def _report(result: MaintenanceResult) -> JobReport:
    return JobReport(result.job, result.outcome, result.version, dict(result.summary))
