"""``omnitable govern TABLE [--dry-run] [--jobs compact,fold,expire,orphans]``: one pass of maintenance jobs,
printing each plan and what it changed (docs/governance.md)."""

from __future__ import annotations

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.governance.jobs import JOBS


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
@click.pass_obj
def govern(
    ctx: Context, table: str, dry_run: bool, jobs: str, branch: str | None,
    older_than: float | None, retain_last: int | None, orphan_min_age: float | None,
) -> None:  # fmt: skip
    """Run maintenance jobs once on TABLE: each prepares a plan on the head, writes new files,
    and commits atomically (a concurrent write makes it prepare again; after 3 conflicts it is
    skipped). Nothing is rewritten with --dry-run."""
    names = [j.strip() for j in jobs.split(",") if j.strip()]
    options = {
        "expire": {k: v for k, v in (("older_than", older_than), ("retain_last", retain_last))
                   if v is not None},
        "orphans": {"min_age_s": orphan_min_age} if orphan_min_age is not None else {},
    }  # fmt: skip
    options = {job: given for job, given in options.items() if given}
    with ctx.connect() as wh:
        t = wh.table(table)
        if branch is not None:
            t = t.branch(branch)
        results = t.maintain(names, dry_run=dry_run, options=options)
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
