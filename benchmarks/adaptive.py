"""Adaptive execution benchmark (b): a mixed plan backfilled with defaults, with settings tuned
from run history, and with a small hand-tuned grid.

The plan fuses an SQL feature (JVM), a pandas feature and a model-like pandas feature (an MLP
forward pass per batch; ``prefer="gpu"``, routed to CPU here) into one step over a table of
many small fragments (as streaming ingest leaves them). Every variant computes batch ``b2`` of
its own identical table; the tuned table first ran batch ``b1`` (same size) with defaults, which
recorded the history the tuned runs pick their settings from. Each round computes a fresh batch
of every table, variants interleaved; the report gives the median per variant. Goals (issue 17): tuned >= 1.5x
defaults, >= 0.9x the best of the grid. Spark local[2].

Run: ./dev bench adaptive [--rows N] [--fragment-rows N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
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


def _table(wh: Any, name: str, rows: int, fragment_rows: int, repeats: int = 1) -> Any:
    rng = np.random.default_rng(0)
    t = wh.create_table(name, {"x": "double"})
    for batch in [f"b{i}" for i in range(1, repeats + 2)]:
        t.append(
            pa.table({"x": rng.standard_normal(rows)}), batch, target_fragment_rows=fragment_rows
        )
    t.register(*ALL)
    return t


def _timed(t: Any, spark: Any, batch: str, **options: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    result = t.backfill(NAMES, [batch]).run(spark, **options)
    return time.perf_counter() - start, result


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable

    parser = argparse.ArgumentParser(prog="adaptive")
    parser.add_argument("--rows", type=int, default=200_000, help="rows per batch")
    parser.add_argument("--fragment-rows", type=int, default=1_000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per variant (fresh batches)")
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

    repeats = 1 if smoke() else args.repeats
    grid_settings = GRID[:1] if smoke() else GRID
    table = {
        name: _table(wh, name, args.rows, args.fragment_rows, repeats)
        for name in ["defaults", "tuned", *(f"grid{i}" for i in range(len(grid_settings)))]
    }
    history = table["tuned"].backfill(NAMES, ["b1"]).run(spark, tuning="off")  # the history
    explain = table["tuned"].backfill(NAMES, ["b2"]).explain(spark)
    times: dict[str, list[float]] = {name: [] for name in table}
    tuned = None
    for r in range(repeats):  # each round computes a fresh batch of every table, interleaved
        batch = f"b{r + 2}"
        times["defaults"].append(_timed(table["defaults"], spark, batch, tuning="off")[0])
        seconds, tuned = _timed(table["tuned"], spark, batch)
        times["tuned"].append(seconds)
        for i, (batch_rows, per_task) in enumerate(grid_settings):
            seconds, _ = _timed(table[f"grid{i}"], spark, batch, tuning="off",
                                batch_rows=batch_rows, fragments_per_task=per_task)  # fmt: skip
            times[f"grid{i}"].append(seconds)
    timed = [f"b{r + 2}" for r in range(repeats)]
    expected = table["defaults"].read(columns=NAMES, batches=timed)
    for name in table:
        got = table[name].read(columns=NAMES, batches=timed)
        assert got.equals(expected), f"{name} disagrees with the defaults"
    assert history.steps[0].settings["batch_rows"]["source"] == "default"
    assert tuned is not None
    settings = {k: (v["value"], v["source"]) for k, v in tuned.steps[0].settings.items()}
    spark.stop()
    wh.close()
    shutil.rmtree(work, ignore_errors=True)

    print(explain)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    t_default, t_tuned = med["defaults"], med["tuned"]
    grid = [
        (f"batch_rows={b}, fragments_per_task={p}", med[f"grid{i}"])
        for i, (b, p) in enumerate(grid_settings)
    ]
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
        f"fragments per run, local[2], median of {repeats} run(s)",
        rows,
    )
    return {"tuned_vs_defaults": t_default / t_tuned, "tuned_vs_best_grid": best / t_tuned}


if __name__ == "__main__":
    main()
