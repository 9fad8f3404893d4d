"""Run benchmarks: ``./dev bench`` (all) or ``./dev bench NAME [ARGS]``.

Each benchmark module has ``main(argv) -> dict`` and prints ratios measured side by side.

Several benchmarks with their own arguments run one after the other in this interpreter (one
JVM for all their Spark sessions) when separated by ``+``: ``./dev bench NAME [ARGS] + NAME
[ARGS]``. Each prints ``#### benchmark: NAME`` before its report; one that fails prints its
traceback and ``#### failed: NAME``, the others still run, and the exit status is 1. The Spark
session a benchmark leaves running is stopped before the next starts; JVM settings (driver
memory) are the first session's.

``--smoke`` (before the first name): every timed section runs once, without warm-up
(``benchmarks.common.smoke``); for the smoke tests, whose figures mean nothing.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BENCHMARKS = [
    "python_read",
    "python_peers",
    "spark_read",
    "backfill_fusion",
    "isolation",
    "models",
    "optimizer",
    "reader_memory",
    "metadata",
    "dataops",
    "branches",
    "sql_writes",
    "governance",
    "training_export",
    "training_stats",
    "training",
    "adaptive",
    "adaptive_queue",
]


def _runs(argv: list[str]) -> list[tuple[str, list[str]]]:
    """(name, its arguments) for each ``+``-separated part of ``argv``; every benchmark, with its
    defaults, when ``argv`` is empty."""
    if not argv:
        return [(name, []) for name in BENCHMARKS]
    runs: list[tuple[str, list[str]]] = []
    part: list[str] = []
    for arg in [*argv, "+"]:
        if arg != "+":
            part.append(arg)
        elif part:
            runs.append((part[0], part[1:]))
            part = []
    return runs


def _stop_spark() -> None:
    """Stop the Spark session a benchmark left running (the next one starts its own)."""
    if "pyspark.sql" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    session = SparkSession._instantiatedSession
    if session is not None:
        session.stop()


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        print("available:", ", ".join(BENCHMARKS))
        return 0
    if argv and argv[0] == "--smoke":
        from benchmarks.common import SMOKE_ENV

        os.environ[SMOKE_ENV] = "1"
        argv = argv[1:]
    runs = _runs(argv)
    unknown = [name for name, _ in runs if name not in BENCHMARKS]
    if unknown:
        print(
            f"unknown benchmark '{unknown[0]}'; available: {', '.join(BENCHMARKS)}", file=sys.stderr
        )
        return 2
    failed = False
    for name, rest in runs:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
            continue
        print(f"\n#### benchmark: {name}", flush=True)
        start = time.perf_counter()
        try:
            module.main(rest)
            print(f"\n({name}: {time.perf_counter() - start:.1f} s)", flush=True)
        except Exception:
            if len(runs) == 1:
                raise
            traceback.print_exc()
            print(f"\n#### failed: {name}", flush=True)
            failed = True
        finally:
            _stop_spark()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
