"""Adaptive execution benchmark (b): a mixed plan backfilled with defaults, with settings tuned
from run history, and with a small hand-tuned grid.

The plan fuses an SQL feature (JVM), a pandas feature and a model-like pandas feature (an MLP
forward pass per batch; ``prefer="gpu"``, routed to CPU here) into one step over a table of
many small fragments (as streaming ingest leaves them). Every variant computes batch ``b2`` of
its own identical table; the tuned table first ran batch ``b1`` (same size) with defaults, which
recorded the history the tuned run picks its settings from. Goals (issue 17): tuned >= 1.5x
defaults, >= 0.9x the best of the grid. Spark local[2].

Run: ./dev bench adaptive [--rows N] [--fragment-rows N]
"""

from __future__ import annotations

import argparse
import shutil
import time
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.adaptive_features import ALL
from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, smoke

GRID = [  # (batch_rows, fragments_per_task)
    (65_536, 4),
    (65_536, 16),
    (8_192, 64),
]
NAMES = [f.name for f in ALL]


def _table(wh: Any, name: str, rows: int, fragment_rows: int) -> Any:
    rng = np.random.default_rng(0)
    t = wh.create_table(name, {"x": "double"})
    for batch in ("b1", "b2"):
        t.append(
            pa.table({"x": rng.standard_normal(rows)}), batch, target_fragment_rows=fragment_rows
        )
    t.register(*ALL)
    return t


def _timed(t: Any, spark: Any, **options: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = t.backfill(NAMES, ["b2"]).run(spark, **options)
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable

    parser = argparse.ArgumentParser(prog="adaptive")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per batch")
    parser.add_argument("--fragment-rows", type=int, default=1_000)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "adaptive"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wh = omnitable.connect(work / "wh")
    spark = omnitable.spark_session(
        wh,
        master="local[2]",
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "2g",
            "spark.default.parallelism": "2",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    if not smoke():  # warm up the JVM and Python workers
        warm = _table(wh, "warm", 4_000, 1_000)
        warm.backfill(NAMES).run(spark, tuning="off")

    tuned_t = _table(wh, "tuned", args.rows, args.fragment_rows)
    history = tuned_t.backfill(NAMES, ["b1"]).run(spark, tuning="off")  # records the history
    explain = tuned_t.backfill(NAMES, ["b2"]).explain(spark)
    t_default, _ = _timed(
        _table(wh, "defaults", args.rows, args.fragment_rows), spark, tuning="off"
    )
    t_tuned, tuned = _timed(tuned_t, spark)
    grid: list[tuple[str, float]] = []
    for i, (batch_rows, per_task) in enumerate(GRID[:1] if smoke() else GRID):
        t = _table(wh, f"grid{i}", args.rows, args.fragment_rows)
        s, _ = _timed(t, spark, tuning="off", batch_rows=batch_rows, fragments_per_task=per_task)
        grid.append((f"batch_rows={batch_rows}, fragments_per_task={per_task}", s))
    expected = wh.table("defaults").read(columns=NAMES, batches=["b2"])
    assert tuned_t.read(columns=NAMES, batches=["b2"]).equals(expected), "tuned run disagrees"
    assert history.steps[0].settings["batch_rows"]["source"] == "default"
    settings = {k: (v["value"], v["source"]) for k, v in tuned.steps[0].settings.items()}
    spark.stop()
    wh.close()
    shutil.rmtree(work, ignore_errors=True)

    print(explain)
    best_name, best = min(grid, key=lambda g: g[1])
    frags = args.rows // args.fragment_rows
    rows = [
        ("defaults (tuning off)", fmt_seconds(t_default), "batch_rows=65536, 1 fragment/task"),
        ("tuned from history", fmt_seconds(t_tuned), str(settings)),
        *[(f"grid: {name}", fmt_seconds(s), "") for name, s in grid],
        ("tuned / defaults speed-up", fmt_ratio(t_default / t_tuned),
         "goal >= 1.5x: " + ("met" if t_default / t_tuned >= 1.5 else "missed")),
        ("tuned vs best grid", fmt_ratio(best / t_tuned),
         f"goal >= 0.9x of {best_name}: " + ("met" if best / t_tuned >= 0.9 else "missed")),
    ]  # fmt: skip
    report(
        f"Adaptive (b): SQL + pandas + model-like features, {args.rows:,} rows in {frags} "
        "fragments, local[2]",
        rows,
    )
    return {"tuned_vs_defaults": t_default / t_tuned, "tuned_vs_best_grid": best / t_tuned}


if __name__ == "__main__":
    main()
