"""Work-queue benchmark (issue 17, benchmark c): two queue workers vs one on the same plan.

Two identical tables get the same backfill of a CPU-bound pandas feature (a Python loop per
record) through ``omnitable backfill TABLE --workers N`` (N worker processes, Spark local[1]
each, sharing the plan's work items through the catalog): one worker on the first table, two
on the second. Wall times are end to end (process and Spark start included). Prints the ratio
(goal >= 1.7x) with the machine's load average, since the cores are shared. Checks that both
tables hold the same values and that every work item was committed exactly once.

Run: ./dev bench adaptive_queue [--rows N] [--fragment-rows N] [--ceiling-loops N]
     [--java-options STR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report

ROOT = Path(__file__).resolve().parent.parent
GOAL = 1.7
_CLI = "import sys; from omnitable.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _backfill(
    warehouse: Path, table: str, workers: int, checkpoint: int, java_options: str | None = None
) -> tuple[float, dict]:
    """``omnitable backfill TABLE --workers N`` (``java_options``: the workers' driver JVM
    options instead of the command's default); (wall seconds, its JSON result)."""
    cmd = [sys.executable, "-c", _CLI, "-w", str(warehouse), "--json", "backfill", table,
           "-f", "heavy", "--workers", str(workers), "--checkpoint", str(checkpoint),
           "--path", str(ROOT)]  # fmt: skip
    if java_options is not None:
        cmd += ["--conf", f"spark.driver.extraJavaOptions={java_options}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"backfill --workers {workers} failed: {proc.stderr[-3000:]}")
    return seconds, json.loads(proc.stdout)["run"]


def _work_phase(wh: object, table: str) -> float:
    """Seconds from the first worker's run start (its Spark session up) to the last one's end."""
    from datetime import datetime

    runs = [r for r in wh.table(table).runs() if r["kind"] == "backfill"]  # type: ignore[attr-defined]
    start = min(datetime.fromisoformat(r["started_at"]) for r in runs)
    end = max(datetime.fromisoformat(r["finished_at"]) for r in runs)
    return (end - start).total_seconds()


_BURN = "import math, sys\ns = 0\nfor i in range(int(sys.argv[1])): s += math.sqrt(i)"


def _ceiling(loops: int) -> float:
    """The machine's CPU parallelism now: throughput of two pure-Python processes vs one, each
    taking ``loops`` square roots (what other users of the cores leave; 2.0 on two idle cores)."""

    def burn(n: int) -> float:
        start = time.perf_counter()
        cmd = [sys.executable, "-c", _BURN, str(loops)]
        procs = [subprocess.Popen(cmd) for _ in range(n)]
        for p in procs:
            p.wait()
        return time.perf_counter() - start

    return 2 * burn(1) / burn(2)


def _round(work: Path, x: pa.Table, args: argparse.Namespace, r: int) -> dict[str, float]:
    """One round: fresh tables, 1 worker and 2 workers (in turn: the order flips each round)."""
    import omnitable
    from benchmarks.queue_features import heavy

    names = {2: f"two{r}"} if args.two_only else {1: f"one{r}", 2: f"two{r}"}
    with omnitable.connect(str(work)) as wh:
        for name in names.values():
            t = wh.create_table(name, {"x": "double"})
            t.append(x, "b1", target_fragment_rows=args.fragment_rows)
            t.register(heavy)
        fragments = len(wh.table(names[2]).snapshot().fragments)
    out: dict[str, float] = {"fragments": fragments}
    for n in sorted(names, reverse=r % 2 == 1):
        out[f"wall{n}"], run = _backfill(work, names[n], n, 1, args.java_options)
        assert len(run["versions"]) == fragments, run["versions"]
        if n == 2:
            out["per_worker"] = [len(w["versions"]) for w in run["runs"]]  # type: ignore[assignment]
    with omnitable.connect(str(work)) as wh:
        for n, name in names.items():
            values = wh.table(name).read(columns=["heavy"]).column("heavy").to_pylist()
            sample = x.column("x").to_pandas()[:: max(1, len(x) // 200)]  # every n-th row
            want = heavy(sample).tolist()
            assert values[:: max(1, len(x) // 200)] == want, f"{name}: wrong values"
            commits = sum(c.op == "backfill" for c in wh.table(name).history())
            assert commits == fragments, f"{name}: {commits} commits for {fragments} items"
            out[f"work{n}"] = _work_phase(wh, name)
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="adaptive_queue")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--fragment-rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--two-only", action="store_true", help="only the 2-worker run (the smoke test's)"
    )
    parser.add_argument(
        "--ceiling-loops",
        type=int,
        default=4_000_000,
        help="square roots per process of the CPU ceiling measure (a smaller figure: a rougher one)",
    )
    parser.add_argument(
        "--java-options",
        default=None,
        help="the workers' driver JVM options (default: what --workers gives them; '' for the "
        "JVM's own defaults)",
    )
    args = parser.parse_args(argv)
    work = BENCH_DIR / "adaptive_queue"
    shutil.rmtree(work, ignore_errors=True)
    x = pa.table({"x": pa.array(np.random.default_rng(0).random(args.rows) * 100)})
    load_before = os.getloadavg()[0]
    ceiling = [_ceiling(args.ceiling_loops)]
    rounds = [_round(work, x, args, r) for r in range(args.rounds)]
    ceiling.append(_ceiling(args.ceiling_loops))
    load_after = os.getloadavg()[0]
    rows = [("CPU ceiling: 2 processes vs 1", " / ".join(fmt_ratio(c) for c in ceiling),
             "(pure Python, before / after: what the shared cores allow)")]  # fmt: skip
    ratio = work_ratio = float("nan")
    if not args.two_only:
        one_s = statistics.median(r["wall1"] for r in rounds)
        one_w = statistics.median(r["work1"] for r in rounds)
        rows += [("1 worker: end to end", fmt_seconds(one_s), ""),
                 ("1 worker: work phase", fmt_seconds(one_w), "(Spark up to last commit)")]  # fmt: skip
    two_s = statistics.median(r["wall2"] for r in rounds)
    two_w = statistics.median(r["work2"] for r in rounds)
    rows += [("2 workers: end to end", fmt_seconds(two_s), f"items per worker "
              f"{[r['per_worker'] for r in rounds]}"),
             ("2 workers: work phase", fmt_seconds(two_w), "")]  # fmt: skip
    if not args.two_only:
        ratio, work_ratio = one_s / two_s, one_w / two_w
        met = "met" if ratio >= GOAL else "missed"
        rows += [("speedup 2 vs 1 (end to end)", fmt_ratio(ratio), f"goal >= {GOAL}x: {met}"),
                 ("speedup 2 vs 1 (work phase)", fmt_ratio(work_ratio), "")]  # fmt: skip
    report(
        f"work queue: {args.rows} rows, {int(rounds[0]['fragments'])} items, "
        f"{os.cpu_count()} cores, load average {load_before:.1f} before / {load_after:.1f} after, "
        f"median of {args.rounds} round(s)"
        + ("" if args.java_options is None else f", worker JVM options {args.java_options!r}"),
        rows,
    )
    return {"ratio": ratio, "work_ratio": work_ratio}


if __name__ == "__main__":
    main(sys.argv[1:])
