"""``omnitable govern TABLE [--dry-run] [--jobs compact,fold,expire,orphans] [--interval 10m]``:
one pass of maintenance jobs, or a service running them every interval under leases, printing
each plan or round and what it changed (docs/governance.md)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.exceptions import NotFoundError, ValidationError
from omnitable.governance.jobs import JOBS
from omnitable.governance.service import GovernService, RoundReport
from omnitable.table import Table


@click.command()
@click.argument("table")
@click.option("--dry-run", is_flag=True, help="Only prepare: print what each job would do.")
@click.option(
    "--jobs",
    default="compact",
    show_default=True,
    help=f"Comma-separated jobs to run in order (known: {', '.join(sorted(JOBS))}).",
)
@click.option("--branch", default=None, help="Branch to maintain (default main).")
@click.option(
    "--older-than",
    type=float,
    default=None,
    help="expire: expire versions older than this many seconds.",
)
@click.option(
    "--retain-last",
    type=int,
    default=None,
    help="expire: keep at least the newest N versions of each branch.",
)
@click.option(
    "--orphan-min-age",
    type=float,
    default=None,
    help="orphans: only remove files older than this many seconds "
    "(default: the governance.orphan_min_age_s setting).",
)
@click.option(
    "--option",
    "job_options",
    multiple=True,
    metavar="JOB.KEY=VALUE",
    help="A job's option, repeatable (e.g. regroup.min_group_columns=4, compact.target_fragment_rows=100000, "
    'regroup.groups=\'{"hot": ["a", "b"]}\'); VALUE is JSON, else a string.',
)
@click.option(
    "--interval",
    default=None,
    help="Run as a service: a round of the jobs every INTERVAL (30s, 10m, 1h) until "
    "SIGINT/SIGTERM, each job under a lease.",
)
@click.option("--rounds", type=int, default=None, help="With --interval: stop after N rounds.")
@click.option(
    "--lease-ttl",
    type=float,
    default=None,
    help="Lease TTL in seconds of each job (default: the governance.lease_ttl_s setting).",
)
@click.pass_obj
def govern(
    ctx: Context, table: str, dry_run: bool, jobs: str, branch: str | None,
    older_than: float | None, retain_last: int | None, orphan_min_age: float | None,
    job_options: tuple[str, ...], interval: str | None, rounds: int | None, lease_ttl: float | None,
) -> None:  # fmt: skip
    """Run maintenance jobs on TABLE: each prepares a plan on the head, writes new files, and
    commits atomically (a concurrent write makes it prepare again; after 3 conflicts it is
    skipped). Each job runs under its catalog lease: one another service or run holds is
    reported `leased` and not run. Nothing is rewritten with --dry-run. With --interval, runs
    them every interval as a service."""
    names = [j.strip() for j in jobs.split(",") if j.strip()]
    options = {
        "expire": {k: v for k, v in (("older_than", older_than), ("retain_last", retain_last))
                   if v is not None},
        "orphans": {"min_age_s": orphan_min_age} if orphan_min_age is not None else {},
    }  # fmt: skip
    for job, key, value in (_job_option(o) for o in job_options):
        if job not in names:
            raise ValidationError(f"--option {job}.{key}: job {job!r} is not in --jobs {jobs!r}")
        options.setdefault(job, {})[key] = value
    options = {job: given for job, given in options.items() if given}
    if interval is None and rounds is not None:
        raise ValidationError("--rounds needs --interval (the service mode)")
    if interval is not None and dry_run:
        raise ValidationError("--dry-run runs once: give it without --interval")
    with ctx.connect() as wh:
        t = wh.table(table)
        if branch is not None:
            t = t.branch(branch)
        if interval is not None:
            _serve(ctx, t, names, options, interval, rounds, lease_ttl)
            return
        results = t.maintain(names, dry_run=dry_run, options=options, lease_ttl_s=lease_ttl)
    data = [
        {"job": r.job, "outcome": r.outcome, "version": r.version, "plan": r.plan.to_dict(),
         "summary": dict(r.summary)}
        for r in results
    ]  # fmt: skip

    def render(console: Console) -> None:
        for r in results:
            console.print(r.plan.describe(), markup=False, highlight=False)
            done = f"version {r.version}" if r.version is not None else "no commit"
            console.print(f"{r.job}: {r.outcome} ({done}) {dict(r.summary)}", markup=False)

    ctx.out.result(data, render)


def _job_option(text: str) -> tuple[str, str, Any]:
    """``JOB.KEY=VALUE`` -> (job, key, value): VALUE parsed as JSON, else kept as a string."""
    target, eq, raw = text.partition("=")
    job, dot, key = target.partition(".")
    if not eq or not dot or not job.strip() or not key.strip():
        raise ValidationError(
            f"Invalid --option {text!r}: give JOB.KEY=VALUE, e.g. regroup.min_group_columns=4"
        )
    try:
        value: Any = json.loads(raw)
    except ValueError:
        value = raw
    return job.strip(), key.strip(), value


def _serve(
    ctx: Context, t: Table, names: list[str], options: dict[str, Any], interval: str,
    rounds: int | None, lease_ttl: float | None,
) -> None:  # fmt: skip
    """The service: progress lines (stderr with --json), one summary per round (a JSON line
    with --json); a dropped table ends it (NotFoundError, exit code 3)."""
    service = t.governor(names, interval=interval, rounds=rounds, options=options,
                         ttl_s=lease_ttl, progress=lambda line: ctx.out.message(line))  # fmt: skip
    ctx.out.message(f"governing {t.name} every {service.interval_s:g}s as {service.owner}")

    def summary(report: RoundReport) -> None:
        if ctx.out.as_json:
            sys.stdout.write(json.dumps(report.to_dict(), default=str) + "\n")
            sys.stdout.flush()
            return
        counts: dict[str, int] = {}
        for j in report.jobs:
            counts[j.outcome] = counts.get(j.outcome, 0) + 1
        ctx.out.message(f"round {report.round} done: {counts}")

    with _stopped_by_signals(service):
        reports = service.run(on_round=summary)
    if reports and reports[-1].dropped:
        raise NotFoundError(f"Table '{t.name}' was dropped while governed; stopped governing it")


@contextmanager
def _stopped_by_signals(service: GovernService) -> Iterator[None]:
    """SIGINT/SIGTERM stop the service after the job in flight (a second SIGINT interrupts
    it: the job removes what it wrote and releases its lease)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        service.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
