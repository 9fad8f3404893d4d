"""Work-queue benchmark (issue 17, benchmark c): two queue workers vs one on the same plan.

Two identical tables get the same backfill of a CPU-bound pandas feature (a Python loop per
record) through ``omnitable backfill TABLE --workers N`` (N worker processes, Spark local[1]
each, sharing the plan's work items through the catalog): one worker on the first table, two
on the second. Wall times are end to end (process and Spark start included). Prints the ratio
(goal >= 1.7x) with the machine's load average, since the cores are shared. Checks that both
tables hold the same values and that every work item was committed exactly once.

Run: ./dev bench adaptive_queue [--rows N] [--fragment-rows N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


def _backfill(warehouse: Path, table: str, workers: int, checkpoint: int) -> tuple[float, dict]:
    """``omnitable backfill TABLE --workers N``; (wall seconds, its JSON result)."""
    cmd = [sys.executable, "-c", _CLI, "-w", str(warehouse), "--json", "backfill", table,
           "-f", "heavy", "--workers", str(workers), "--checkpoint", str(checkpoint),
           "--path", str(ROOT)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "python"), str(ROOT)]))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"backfill --workers {workers} failed: {proc.stderr[-3000:]}")
    return seconds, json.loads(proc.stdout)["run"]


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable
    from benchmarks.queue_features import heavy

    parser = argparse.ArgumentParser(prog="adaptive_queue")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--fragment-rows", type=int, default=20_000)
    parser.add_argument(
        "--two-only", action="store_true", help="only the 2-worker run (the smoke test's)"
    )
    args = parser.parse_args(argv)
    work = BENCH_DIR / "adaptive_queue"
    shutil.rmtree(work, ignore_errors=True)
    x = pa.table({"x": pa.array(np.random.default_rng(0).random(args.rows) * 100)})
    with omnitable.connect(str(work)) as wh:
        for name in ("one", "two"):
            t = wh.create_table(name, {"x": "double"})
            t.append(x, "b1", target_fragment_rows=args.fragment_rows)
            t.register(heavy)
        fragments = len(wh.table("one").snapshot().fragments)
    load_before = os.getloadavg()[0]
    names = ("two",) if args.two_only else ("one", "two")
    one_s = float("nan") if args.two_only else _backfill(work, "one", 1, 1)[0]
    two_s, two = _backfill(work, "two", 2, 1)
    load_after = os.getloadavg()[0]
    with omnitable.connect(str(work)) as wh:
        values = [wh.table(n).read(columns=["heavy"]).column("heavy").to_pylist() for n in names]
        commits = [sum(c.op == "backfill" for c in wh.table(n).history()) for n in names]
    expected = [heavy(x.column("x").to_pandas()).tolist()] if args.two_only else values[:1]
    assert values[-1] == expected[0] and None not in values[-1], "the two backfills differ"
    assert commits == [fragments] * len(names), f"items committed {commits}, not once each"
    assert len(two["versions"]) == fragments
    per_worker = [len(r["versions"]) for r in two["runs"]]
    ratio = one_s / two_s
    met = "met" if ratio >= GOAL else "missed"
    report(
        f"work queue: {args.rows} rows, {fragments} items, {os.cpu_count()} cores, "
        f"load average {load_before:.1f} before / {load_after:.1f} after",
        [
            ("1 worker", fmt_seconds(one_s), ""),
            ("2 workers", fmt_seconds(two_s), f"items per worker {per_worker}"),
            ("speedup 2 vs 1", fmt_ratio(ratio), f"goal >= {GOAL}x: {met}"),
        ],
    )
    return {"one_s": one_s, "two_s": two_s, "ratio": ratio}


if __name__ == "__main__":
    main(sys.argv[1:])
