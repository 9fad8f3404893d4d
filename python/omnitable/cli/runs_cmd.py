"""``omnitable runs``: ingest and backfill runs, one run's per-step metrics and failure."""

from __future__ import annotations

import datetime as dt
from typing import Any

import click
from rich.console import Console

from omnitable.catalog.catalog import RUN_STATUSES
from omnitable.cli.context import Context

# per-step metrics shown when a run records them (a field a step lacks shows as "-")
STEP_FIELDS = (
    "fragments",
    "rows",
    "files",
    "bytes_read",
    "bytes_written",
    "seconds",
    "peak_memory_bytes",
    "failures",
    "retries",
    "spills",
    "errors",
    "settings",
)


@click.command()
@click.argument("table", required=False)
@click.option("--run", "run_id", default=None, help="Show this run: its steps and failure.")
@click.option("-n", "--limit", type=int, default=None, help="Only the N newest runs.")
@click.option(
    "--status", type=click.Choice(RUN_STATUSES), default=None, help="Only runs in this status."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")
@click.pass_obj
def runs(
    ctx: Context,
    table: str | None,
    run_id: str | None,
    limit: int | None,
    status: str | None,
    as_json: bool,
) -> None:
    """Runs of TABLE (of every table when omitted), newest first; --run RUN_ID shows one."""
    if as_json:
        ctx.out.as_json = True
    if limit is not None and limit < 1:
        raise click.BadParameter("give a positive number", param_hint="--limit")
    with ctx.connect() as wh:
        if run_id is not None:
            run = wh.run(run_id)
            if table is not None and run["table"] != wh.table(table).name:
                raise click.BadParameter(f"run {run_id} is a run of table {run['table']}")
            ctx.out.result(run, lambda c: _render_run(c, run))
            return
        found = (wh.table(table).runs if table else wh.runs)(limit=limit, status=status)
    columns = ["run", *([] if table else ["table"]), "kind", "status", "started", "seconds"]
    rows = [
        [r["run_id"], *([] if table else [r["table"] or "-"]), r["kind"], r["status"],
         str(r["started_at"])[:19].replace("T", " "), _duration(r)]
        for r in found
    ]  # fmt: skip
    widths = [max(len(str(x)) for x in col) for col in zip(columns, *rows, strict=False)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    def render(console: Console) -> None:  # one line per run, its summary indented below
        if not found:
            console.print("No runs")
            return
        console.print(f"[bold]{line(columns)}[/]")
        for run, row in zip(found, rows, strict=True):
            console.print(line(row), markup=False)
            summary = _summary(run)
            if summary:
                console.print("    " + summary, markup=False)

    ctx.out.result(found, render)


def _duration(run: dict[str, Any]) -> str:
    if not run.get("finished_at"):
        return "-"
    fmt = "%Y-%m-%dT%H:%M:%S.%fZ"
    try:
        start = dt.datetime.strptime(run["started_at"], fmt)
        end = dt.datetime.strptime(run["finished_at"], fmt)
    except (TypeError, ValueError):
        return "-"
    return f"{(end - start).total_seconds():.1f}"


def _summary(run: dict[str, Any]) -> str:
    m = run.get("metrics") or {}
    if run["status"] in ("failed", "aborted") and run.get("message"):
        return _short(run["message"], 80)
    if "steps" in m:
        steps = m["steps"]
        rows = sum(int(s.get("rows", 0) or 0) for s in steps)
        return f"{len(steps)} step(s), {rows} rows, versions {m.get('versions', [])}"
    return ", ".join(f"{k}={v}" for k, v in sorted(m.items()) if not isinstance(v, dict | list))


def _render_run(console: Console, run: dict[str, Any]) -> None:
    m = run.get("metrics") or {}
    console.print(f"run {run['run_id']} ({run['kind']}) of {run['table'] or '-'}: {run['status']}")
    console.print(f"started {run['started_at']}, finished {run['finished_at'] or '-'}, "
                  f"host {run['host'] or '-'} pid {run['pid'] or '-'}")  # fmt: skip
    if run.get("message"):
        console.print(f"[red]failure:[/] {run['message']}")
    steps = m.get("steps") or []
    present = [f for f in STEP_FIELDS if any(f in s for s in steps)]
    for i, step in enumerate(steps, 1):
        console.print(f"step {i}: {', '.join(step.get('features', []))}")
        console.print("  " + ", ".join(f"{f}={_cell(step.get(f))}" for f in present))
    others = {k: v for k, v in m.items() if k != "steps"}
    for key, value in sorted(others.items()):
        if value not in (None, [], {}, ""):
            console.print(f"{key}: {value}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def _short(text: str, n: int) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= n else line[: n - 1] + "…"
