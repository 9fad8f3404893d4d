"""``omnitable backfill`` and ``omnitable status``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from omnitable.cli.context import Context
from omnitable.observability import ProgressEvent
from omnitable.settings import BACKFILL_MAX_ERROR_RATIO

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from omnitable.exec.runner import RunResult
    from omnitable.features.status import StatusGrid


def _split(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise click.BadParameter("give a comma-separated list")
    return items


def _spark_conf(confs: tuple[str, ...]) -> dict[str, Any]:
    """``--conf KEY=VALUE`` options as settings (a later KEY wins, as in spark-submit; keys are
    Spark's, ``spark.…``, which spark-submit alone would pass on)."""
    conf: dict[str, Any] = {}
    for item in confs:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark.") or key.strip() == "spark.":
            raise click.BadParameter(
                f"expected KEY=VALUE with a Spark setting as KEY (e.g. spark.driver.memory=4g), "
                f"got {item!r}",
                param_hint="--conf",
            )
        conf[key.strip()] = value
    return conf


def _worker_options(**given: Any) -> list[str]:
    """The command's options that each ``--workers`` worker runs with, as arguments: a flag for
    True, ``--name value`` for any other value given (``None``, ``False``, ``0``: not given)."""
    args: list[str] = []
    short = {"batches": "-b"}
    for name, value in given.items():
        flag = short.get(name, "--" + name.replace("_", "-"))
        if value is True:
            args.append(flag)
        elif value:
            args += [flag, str(value)]
    return args


@click.command()
@click.argument("table")
@click.option(
    "-f",
    "--features",
    required=True,
    help="Comma-separated features or output columns to bring up to date.",
)
@click.option("-b", "--batches", default=None, help="Comma-separated batches (default: all).")
@click.option("--explain", is_flag=True, help="Print the plan and stop.")
@click.option(
    "--checkpoint",
    type=int,
    default=None,
    help="Commit every N fragments per step (restarts skip committed work).",
)
@click.option("--retry-errors", is_flag=True, help="Recompute records that failed earlier.")
@click.option(
    "--max-error-ratio",
    type=float,
    default=None,
    help="Abort when more than this fraction of a feature's records fail "
    f"(default: the setting {BACKFILL_MAX_ERROR_RATIO.key}, {BACKFILL_MAX_ERROR_RATIO.default}).",
)
@click.option(
    "--allow-version-drift",
    is_flag=True,
    help="Run features defined in notebooks/scripts (stored pickled) although a library's "
    "major.minor version differs from the one recorded at registration.",
)
@click.option(
    "--tuning",
    type=click.Choice(["on", "off"]),
    default=None,
    help="Pick per-step settings from run history (default: the setting backfill.tuning, on).",
)
@click.option(
    "--master",
    default="local[*]",
    show_default=True,
    help="Spark master when no session is active.",
)
@click.option(
    "--engine",
    type=click.Choice(["spark", "python"]),
    default=None,
    help="spark: every step a Spark job; python: steps of pandas features run without Spark, in "
    "a local Python worker (default: the setting backfill.engine; docs/features.md, Engines).",
)
@click.option(
    "--queue",
    is_flag=True,
    help="Run as one worker of the plan's durable work queue in the catalog (join it from "
    "several shells or spark-submit jobs; docs/features.md, Work queue).",
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Start N queue workers (processes, local[1] Spark each) on the plan and wait for them.",
)
@click.option(
    "--lease",
    "lease_s",
    type=float,
    default=None,
    help="A queue item's lease in seconds (default 60): a dead worker's item is re-leased after it.",
)
@click.option(
    "--conf",
    "confs",
    multiple=True,
    metavar="KEY=VALUE",
    help="A Spark setting of the session this command starts (repeatable, as spark-submit's "
    "--conf); with --workers, of each worker's session.",
)
@click.option(
    "--path",
    "paths",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Directory to add to sys.path so stored feature modules import (repeatable).",
)
@click.pass_obj
def backfill(
    ctx: Context,
    table: str,
    features: str,
    batches: str | None,
    explain: bool,
    checkpoint: int | None,
    retry_errors: bool,
    max_error_ratio: float | None,
    allow_version_drift: bool,
    tuning: str | None,
    master: str,
    engine: str | None,
    queue: bool,
    workers: int | None,
    lease_s: float | None,
    confs: tuple[str, ...],
    paths: tuple[str, ...],
) -> None:
    """Compute what is missing or stale for FEATURES on TABLE (fused Spark jobs)."""
    conf = _spark_conf(confs)
    _check_queue_options(queue, workers, lease_s)
    for p in paths:
        sys.path.insert(0, str(Path(p).resolve()))
    targets = _split(features) or []
    out = ctx.out
    with ctx.connect() as wh:
        plan = wh.table(table).backfill(targets, _split(batches), retry_errors=retry_errors)
        text = plan.explain(engine=engine)
        out.message(text)
        if explain or plan.is_empty:
            out.result({"plan": text, "ran": False}, lambda c: None)
            return
        if workers is not None:
            from omnitable.cli.workers import run_workers, worker_conf

            args = ["backfill", table, "-f", features, "--queue", "--master", "local[1]"]
            args += _worker_options(
                batches=batches, checkpoint=checkpoint, retry_errors=retry_errors,
                max_error_ratio=max_error_ratio, allow_version_drift=allow_version_drift,
                tuning=tuning, lease=lease_s, engine=engine,
            )  # fmt: skip
            args += [a for k, v in worker_conf(conf).items() for a in ("--conf", f"{k}={v}")]
            args += [a for p in paths for a in ("--path", str(Path(p).resolve()))]
            run_workers(ctx, wh, plan, workers, args, checkpoint)
            return
        from omnitable.spark.session import spark_session

        def spark() -> SparkSession:  # made when a step or the error log needs Spark
            return spark_session(wh, master=master, **conf)

        with out.progress() as report:

            def progress(e: ProgressEvent) -> None:  # a queue worker counts every worker's
                eta = "?" if e.eta_s is None else f"{e.eta_s:.0f}s"  # done items
                report(f"step {e.step}/{e.steps} fragments", e.fragments_done,
                       e.fragments_total, f"rows {e.rows_done}/{e.rows_total}, ETA {eta}")  # fmt: skip

            result = plan.run(
                spark,
                checkpoint_fragments=checkpoint,
                max_error_ratio=max_error_ratio,
                progress=progress,
                allow_version_drift=allow_version_drift,
                tuning=tuning,
                queue=queue,
                lease_s=lease_s,
                engine=engine,
            )
        grid = wh.table(table).status()

    out.result(
        {"run": result.summary(), "status": grid.to_pandas().to_dict()},
        lambda console: _render(console, result, grid),
    )


def _check_queue_options(queue: bool, workers: int | None, lease_s: float | None) -> None:
    if workers is not None and workers < 1:
        raise click.BadParameter("give at least 1 worker", param_hint="--workers")
    if workers is not None and queue:
        raise click.BadParameter("--workers starts queue workers itself: drop --queue")
    if lease_s is not None and lease_s <= 0:
        raise click.BadParameter("give a lease of more than 0 seconds", param_hint="--lease")
    if lease_s is not None and not (queue or workers):
        raise click.BadParameter("--lease applies to queue workers: add --queue or --workers")


def _render(console: Console, result: RunResult, grid: StatusGrid) -> None:
    """The human-readable summary of a run (``--json`` prints its summary instead)."""
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {warning}")
    for i, s in enumerate(result.steps, 1):
        console.print(
            f"step {i}: {', '.join(s.features)} — {s.fragments} fragments, "
            f"{s.rows} rows, {s.files} files in {s.seconds:.1f}s"
            + (
                f"; re-run in the child process after a crash: {', '.join(s.escalated)}"
                if s.escalated
                else ""
            )
        )
    console.print(f"run {result.run_id} committed version(s) {result.versions}")
    for key, count in result.errors.items():
        console.print(f"[yellow]{count} record(s) failed {key}[/]: see Table.errors()")
    for skip in result.skipped:
        console.print(
            f"[yellow]skipped unreadable fragment {skip['fragment']}[/] "
            f"(batch {skip['batch']}): {skip['error'][:200]}"
        )
    console.print(str(grid))


@click.command()
@click.argument("table")
@click.option("--branch", default="main", show_default=True, help="Branch to report on.")
@click.pass_obj
def status(ctx: Context, table: str, branch: str) -> None:
    """Batch x derived-column grid: done / STALE / - (missing) / partial."""
    with ctx.connect() as wh:
        grid = wh.table(table).branch(branch).status()
    ctx.out.result(
        {"version": grid.version, "status": grid.to_pandas().to_dict()},
        lambda c: c.print(str(grid)),
    )
