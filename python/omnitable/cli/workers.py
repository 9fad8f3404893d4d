"""``omnitable backfill --workers N``: N queue worker processes on one plan, and their total."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rich.console import Console

from omnitable.catalog import queue as q
from omnitable.cli.context import Context
from omnitable.exceptions import OmniTableError
from omnitable.exec.backfill import BackfillPlan
from omnitable.exec.queue import join_queue
from omnitable.exec.runner import RunOptions
from omnitable.warehouse import Warehouse

_CHILD = "import sys; from omnitable.cli.main import main; sys.exit(main(sys.argv[1:]))"

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
WORKER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The JVM options of each worker's Spark driver, unless ``--conf`` sets them. A worker is one of
N ``local[1]`` processes on this machine, whose JVM mostly passes rows to the Python worker and
commits; by default that JVM compiles with C2 and collects garbage on every core, about 14 s of
CPU per worker (startup, then compiling as the first items run) that the other workers' Python
computation would get. The C1 compiler alone and the serial collector halve it, and one worker
is no slower (docs/benchmarks.md, "adaptive_queue")."""


_GC_OPTION = re.compile(r"-XX:[+-]Use\w*GC\b")


def worker_conf(conf: dict[str, Any], env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The Spark settings of each worker: ``conf`` (the command's ``--conf``), with
    :data:`WORKER_JAVA_OPTIONS` as the driver's JVM options unless ``conf`` gives its own (used
    as they are: JVM options can conflict). A collector chosen in ``JAVA_TOOL_OPTIONS`` or
    ``JDK_JAVA_OPTIONS`` (``env``) is kept: the JVM refuses two."""
    if DRIVER_JAVA_OPTIONS in conf:
        return dict(conf)
    options = WORKER_JAVA_OPTIONS
    if any(_GC_OPTION.search(env.get(k, "")) for k in ("JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS")):
        options = _GC_OPTION.sub("", options).strip()
    return {DRIVER_JAVA_OPTIONS: options, **conf}


def run_workers(
    ctx: Context, wh: Warehouse, plan: BackfillPlan, workers: int, args: list[str],
    checkpoint: int | None,
) -> None:  # fmt: skip
    """Create the plan's queue, start ``workers`` processes running ``omnitable --json <args>``
    (each a ``backfill --queue`` worker), show the queue's progress, and print their total.

    Raises:
        OmniTableError: a worker failed (its exit code and the end of its output).
    """
    _, pid = join_queue(plan.ctx, plan, RunOptions(checkpoint_fragments=checkpoint), plan.plan_at)
    store, tid = plan.ctx.catalog.store, plan.ctx.record.table_id
    base = [sys.executable, "-c", _CHILD] + (["-w", ctx.warehouse] if ctx.warehouse else [])
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="omnitable-workers-") as tmp, ExitStack() as files:
        procs = []
        for n in range(workers):
            out = files.enter_context(Path(tmp, f"worker{n}.out").open("w"))
            err = files.enter_context(Path(tmp, f"worker{n}.err").open("w"))
            procs.append(subprocess.Popen([*base, "--json", *args], stdout=out, stderr=err,
                                          env=os.environ.copy()))  # fmt: skip
        with ctx.out.progress() as report:
            shown = 0.0
            while any(p.poll() is None for p in procs):  # noticed within 0.1 s of the last end
                if time.monotonic() - shown >= 1.0:  # the queue's progress once a second
                    shown = time.monotonic()
                    items = q.items(store, tid, pid)
                    if items:
                        report("work items", sum(i.state == q.DONE for i in items), len(items))
                time.sleep(0.1)
        failed = [(n, p.returncode) for n, p in enumerate(procs) if p.returncode != 0]
        if failed:
            n, rc = failed[0]
            tail = Path(tmp, f"worker{n}.err").read_text()[-2000:]
            raise OmniTableError(
                f"Cannot finish backfill with {workers} workers: {len(failed)} worker(s) failed; "
                f"worker {n} exited with code {rc}: {tail}"
            )
        outputs = [Path(tmp, f"worker{n}.out").read_text() for n in range(workers)]
    _report(ctx, wh, plan, worker_runs(outputs), workers, pid, time.perf_counter() - started)


def worker_runs(outputs: list[str]) -> list[dict[str, Any]]:
    """The runs in the workers' ``--json`` outputs. A worker that planned after the others had
    done every item found nothing to do and printed its empty plan, no run."""
    docs = [json.loads(text) for text in outputs]
    return [d["run"] for d in docs if "run" in d]


def _report(
    ctx: Context, wh: Warehouse, plan: BackfillPlan, runs: list[dict[str, Any]], workers: int,
    pid: str, seconds: float,
) -> None:  # fmt: skip
    versions = sorted(v for r in runs for v in r["versions"])
    errors: dict[str, int] = {}
    for r in runs:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    warnings = [w for r in runs for w in r["warnings"]]
    total: dict[str, Any] = {
        "queue": pid,
        "workers": workers,
        "versions": versions,
        "seconds": round(seconds, 3),
        "runs": runs,
        "warnings": warnings,
        "errors": errors,
    }
    grid = wh.table(plan.table_name).branch(plan.ctx.branch).status()

    def render(console: Console) -> None:
        for w in warnings:
            console.print(f"[yellow]warning:[/] {w}")
        for r in runs:
            console.print(f"worker run {r['run_id']}: committed version(s) {r['versions']}")
        console.print(
            f"{workers} workers committed {len(versions)} version(s) in {seconds:.1f}s "
            f"(queue {pid})"
        )
        for key, count in errors.items():
            console.print(f"[yellow]{count} record(s) failed {key}[/]: see Table.errors()")
        console.print(str(grid))

    ctx.out.result({"run": total, "status": grid.to_pandas().to_dict()}, render)
