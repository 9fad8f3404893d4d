"""Work-queue benchmark (issue 17, benchmark c): two queue workers vs one on the same plan.

Identical tables get the same backfill of a CPU-bound pandas feature (a Python loop per
record) through ``omnitable backfill TABLE --workers N --engine E`` (N worker processes sharing
the plan's work items through the catalog; on the ``spark`` engine each runs Spark local[1], on
the ``python`` engine its local Python worker and no Spark): one worker on one table, two on
another, for each engine asked. Wall times are end to end (process and Spark start included).
Prints the ratios (goal >= 1.7x) with the machine's load average, since the cores are shared,
and each engine's time against the other's. Checks that every table holds the right values and
that every work item was committed exactly once.

Run: ./dev bench adaptive_queue [--rows N] [--fragment-rows N] [--ceiling-loops N]
     [--engine spark|python|both] [--java-options STR]
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
    warehouse: Path,
    table: str,
    workers: int,
    engine: str,
    java_options: str | None = None,
) -> tuple[float, dict]:
    """``omnitable backfill TABLE --workers N --engine E --checkpoint 1`` (``java_options``:
    the workers' driver JVM options instead of the command's default); (wall seconds, its JSON
    result)."""
    cmd = [sys.executable, "-c", _CLI, "-w", str(warehouse), "--json", "backfill", table,
           "-f", "heavy", "--workers", str(workers), "--checkpoint", "1", "--engine", engine,
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


def _runs(args: argparse.Namespace, r: int) -> list[tuple[str, int]]:
    """The (engine, workers) runs of round ``r``, interleaved; the order flips each round."""
    engines = ["spark", "python"] if args.engine == "both" else [args.engine]
    counts = [2] if args.two_only else [1, 2]
    runs = [(e, n) for n in counts for e in engines]
    return runs[::-1] if r % 2 == 1 else runs


def _round(work: Path, x: pa.Table, args: argparse.Namespace, r: int) -> dict[str, float]:
    """One round: a fresh table per run (:func:`_runs`), each run's wall and work phase."""
    import omnitable
    from benchmarks.queue_features import heavy

    names = {(e, n): f"{e}{n}_{r}" for e, n in _runs(args, r)}
    with omnitable.connect(str(work)) as wh:
        for name in names.values():
            t = wh.create_table(name, {"x": "double"})
            t.append(x, "b1", target_fragment_rows=args.fragment_rows)
            t.register(heavy)
        fragments = len(wh.table(next(iter(names.values()))).snapshot().fragments)
    out: dict[str, float] = {"fragments": fragments}
    for (engine, n), name in names.items():
        out[f"wall_{engine}{n}"], run = _backfill(work, name, n, engine, args.java_options)
        assert len(run["versions"]) == fragments, run["versions"]
        routes = {route for w in run["runs"] for s in w["steps"] for route in s["routes"].values()}
        want = "python-local" if engine == "python" else "python-cpu"
        assert routes == {want}, f"{name}: routes {routes}, expected {want}"
        if n == 2:
            out[f"per_worker_{engine}"] = [len(w["versions"]) for w in run["runs"]]  # type: ignore[assignment]
    with omnitable.connect(str(work)) as wh:
        for (engine, n), name in names.items():
            values = wh.table(name).read(columns=["heavy"]).column("heavy").to_pylist()
            sample = x.column("x").to_pandas()[:: max(1, len(x) // 200)]  # every n-th row
            want = heavy(sample).tolist()
            assert values[:: max(1, len(x) // 200)] == want, f"{name}: wrong values"
            commits = sum(c.op == "backfill" for c in wh.table(name).history())
            assert commits == fragments, f"{name}: {commits} commits for {fragments} items"
            out[f"work_{engine}{n}"] = _work_phase(wh, name)
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
        "--engine",
        choices=["spark", "python", "both"],
        default="both",
        help="the workers' engine (both: each, interleaved, and one against the other)",
    )
    parser.add_argument(
        "--java-options",
        default=None,
        help="the Spark workers' driver JVM options (default: what --workers gives them; '' for "
        "the JVM's own defaults)",
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
    engines = ["spark", "python"] if args.engine == "both" else [args.engine]
    ratios: dict[str, float] = {}
    for engine in engines:
        rows += _engine_rows(rounds, engine, args.two_only, ratios)
    if len(engines) == 2:
        for n in [2] if args.two_only else [1, 2]:
            speed = _median(rounds, f"wall_spark{n}") / _median(rounds, f"wall_python{n}")
            rows.append((f"python vs spark engine, {n} worker(s)", fmt_ratio(speed),
                         "(end to end: spark time / python time)"))  # fmt: skip
    report(
        f"work queue: {args.rows} rows, {int(rounds[0]['fragments'])} items, "
        f"{os.cpu_count()} cores, load average {load_before:.1f} before / {load_after:.1f} after, "
        f"median of {args.rounds} round(s)"
        + ("" if args.java_options is None else f", worker JVM options {args.java_options!r}"),
        rows,
    )
    return ratios


def _median(rounds: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rounds)


def _engine_rows(
    rounds: list[dict[str, float]], engine: str, two_only: bool, ratios: dict[str, float]
) -> list[tuple[str, str, str]]:
    """The report's rows of one engine; its ratios (end to end, work phase) into ``ratios``."""
    rows = []
    if not two_only:
        rows += [(f"{engine}: 1 worker, end to end", fmt_seconds(_median(rounds, f"wall_{engine}1")), ""),
                 (f"{engine}: 1 worker, work phase", fmt_seconds(_median(rounds, f"work_{engine}1")),
                  "(first run start to last commit)")]  # fmt: skip
    split = [r[f"per_worker_{engine}"] for r in rounds]
    rows += [(f"{engine}: 2 workers, end to end", fmt_seconds(_median(rounds, f"wall_{engine}2")),
              f"items per worker {split}"),
             (f"{engine}: 2 workers, work phase", fmt_seconds(_median(rounds, f"work_{engine}2")),
              "")]  # fmt: skip
    if not two_only:
        ratio = _median(rounds, f"wall_{engine}1") / _median(rounds, f"wall_{engine}2")
        work = _median(rounds, f"work_{engine}1") / _median(rounds, f"work_{engine}2")
        met = "met" if ratio >= GOAL else "missed"
        rows += [(f"{engine}: speedup 2 vs 1 (end to end)", fmt_ratio(ratio), f"goal >= {GOAL}x: {met}"),
                 (f"{engine}: speedup 2 vs 1 (work phase)", fmt_ratio(work), "")]  # fmt: skip
        ratios[f"{engine}_ratio"], ratios[f"{engine}_work_ratio"] = ratio, work
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
