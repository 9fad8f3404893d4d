"""Every benchmark runs end to end at a tiny scale through ``benchmarks/run.py``.

This guards the one-command benchmarks against rot; the figures printed at this scale mean
nothing and nothing here checks a timing. Each benchmark asserts its own correctness checks
(equal results across variants, the expected failures in the dirty isolation run).

All of them run in one child process (``run.py --smoke A ARGS + B ARGS ...``: one Python start,
one JVM for every Spark session, each timed section once); each test checks its benchmark's
part of the output: it ran, did not fail, and printed its report.

The child's Spark gets defaults suited to tiny data (``SMOKE_SPARK``, through spark-submit, so a
benchmark's own settings win): Delta's snapshot state in 2 partitions instead of 50 (the Delta
variants spent most of their smoke time there), 2 shuffle partitions, no UI. ``./dev bench``
never sees them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TINY = {
    "python_read": "--rows 20000 --repeats 1",
    "python_peers": "--rows 5000 --wide-rows 500 --repeats 1",
    "isolation": (
        "--rows 20000 --batch 5000 --repeats 1 --moderate-rows 5000 --dirty-batch 5000 "
        "--spark-rows 4000"
    ),
    "spark_read": "--rows 20000 --repeats 1",
    "models": "--rows 20000 --per-row-rows 300 --fragment-rows 5000 --repeats 1",
    "backfill_fusion": "--rows 4000 --fragment-rows 2000",
    "optimizer": "--rows 5000 --udf-rows 2000 --text-rows 2000 --repeats 1",
    "reader_memory": "--wide-rows 500 --wide-columns 50 --text-rows 2000 --row-group-bytes 1000000",
    "metadata": "--sizes 60x3x6 120x3x6 --fragments-per-batch 10 --repeats 1",
    "dataops": "--rows 5000 --update-rows 1000 --upsert-base 5000 --upsert-rows 1000 --repeats 1",
    "branches": "--sizes 100 300 --real-fragments 4 --merge-fragments 200 --repeats 1",
    "sql_writes": "--rows 5000 --merge-rows 2000 --repeats 1",
    "governance": (
        "--fragments 8 --rows 2000 --repeats 1 --columns 60 --wide-rows 40 --view-batches 2"
    ),
    "training_export": "--rows 20000 --features 4 --fragment-rows 5000 --repeats 1",
    "training_stats": "--rows 20000 --fragment-rows 5000 --repeats 1",
    "training": "--rows 20000 --workers 2 --repeats 1",
    "adaptive": "--rows 4000 --fragment-rows 1000",
    "adaptive_queue": "--rows 200 --fragment-rows 100 --two-only --ceiling-loops 100000",
}

SMOKE_SPARK = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
}


def test_every_benchmark_has_a_tiny_scale() -> None:
    sys.path.insert(0, str(ROOT))
    from benchmarks.run import BENCHMARKS

    assert sorted(TINY) == sorted(BENCHMARKS)


@pytest.fixture(scope="module")
def smoke_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """stdout and stderr of every benchmark's tiny run, all in one ``run.py --smoke`` process."""
    submit = " ".join(f"--conf {k}={v}" for k, v in SMOKE_SPARK.items())
    env = {
        **os.environ,
        "OMNITABLE_BENCH_DIR": str(tmp_path_factory.mktemp("bench")),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_SUBMIT_ARGS": f"{submit} pyspark-shell",
    }
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    args = [arg for name, tiny in TINY.items() for arg in ("+", name, *tiny.split())]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", *args[1:]],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
        cwd=ROOT,
    )
    return proc.stdout + "\n#### stderr\n" + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TINY))
def test_benchmark_runs(name: str, smoke_output: str) -> None:
    head = f"\n#### benchmark: {name}\n"
    assert head in smoke_output, smoke_output[-6000:]
    part = smoke_output.split(head, 1)[1].split("\n#### ", 1)[0]
    assert f"#### failed: {name}" not in smoke_output, part[-3000:] + smoke_output[-6000:]
    assert f"skipping {name}" not in smoke_output
    assert "\n== " in part, part[-3000:]  # its report
