"""Fusion benchmark: 8 pandas features reading the same text column.

One fused backfill (one scan of ``text`` per fragment, one Spark job) vs 8 separate backfills
(one per feature), on identical fresh tables, in Spark local[2]. Prints the wall-time ratio
(target >= 3x; the source system reports 2.7x end to end) and the input bytes read (target 8 -> 1),
measured by Spark's task input metrics through the jar's ScanMetricsListener.

Run: ./dev bench backfill_fusion [--rows N]
"""

from __future__ import annotations

import argparse
import shutil
import time

import numpy as np
import pyarrow as pa

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, smoke
from benchmarks.fusion_features import ALL
from omnitable.exec.scan_metrics import ScanMetrics

WORDS = np.array(
    [
        "The",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "lazy",
        "dog",
        "http://x.io",
        "2026",
        "data",
        "Spark",
        "table",
        "column",
        "omni",
        "wide.",
    ]
)


def make_text(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    picks = WORDS[rng.integers(0, len(WORDS), size=(rows, 12))]
    return pa.table({"text": pa.array([" ".join(r) for r in picks])})


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable

    parser = argparse.ArgumentParser(prog="backfill_fusion")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--fragment-rows", type=int, default=250_000)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "backfill_fusion"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = make_text(args.rows)
    wh = omnitable.connect(work / "wh")
    tables = {}
    for name in ("separate", "fused"):
        t = wh.create_table(name, {"text": "string"})
        t.append(data, "b0", target_fragment_rows=args.fragment_rows)
        t.register(*ALL)
        tables[name] = t
    print(
        f"{args.rows:,} rows of text ({fmt_bytes(data.nbytes)}), "
        f"{len(tables['fused'].snapshot(with_files=False).fragments)} fragments, 8 features"
    )
    spark = omnitable.spark_session(
        wh,
        master="local[2]",
        **{
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.memory": "4g",
            "spark.sql.shuffle.partitions": "2",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    meter = ScanMetrics(spark)  # the backfill runner installs the same listener
    if not smoke():  # warm up the JVM and Python workers on a tiny table
        warm = wh.create_table("warm", {"text": "string"})
        warm.append(make_text(1000), "b0")
        warm.register(*ALL)
        warm.backfill([f.name for f in ALL]).run(spark)

    meter.reset()
    start = time.perf_counter()
    est_separate = 0
    for f in ALL:
        plan = tables["separate"].backfill(f.name)
        est_separate += sum(s.estimated_input_bytes for s in plan.steps)
        plan.run(spark)
    t_separate = time.perf_counter() - start
    bytes_separate = int(meter.snapshot()["total"]["bytesRead"])

    meter.reset()
    start = time.perf_counter()
    plan = tables["fused"].backfill([f.name for f in ALL])
    assert len(plan.steps) == 1 and len(plan.steps[0].features) == 8
    est_fused = plan.steps[0].estimated_input_bytes
    plan.run(spark)
    t_fused = time.perf_counter() - start
    bytes_fused = int(meter.snapshot()["total"]["bytesRead"])

    a = tables["separate"].read(columns=[f.name for f in ALL])
    b = tables["fused"].read(columns=[f.name for f in ALL])
    assert a.equals(b), "fused and separate backfills disagree"
    spark.stop()
    wh.close()
    shutil.rmtree(work, ignore_errors=True)

    rows = [
        ("8 separate backfills", fmt_seconds(t_separate), ""),
        ("1 fused backfill", fmt_seconds(t_fused), ""),
        ("separate / fused wall time", fmt_ratio(t_separate / t_fused), "target >= 3x"),
        ("planned input bytes, separate", fmt_bytes(est_separate), ""),
        ("planned input bytes, fused", fmt_bytes(est_fused), "target 8 -> 1"),
        ("Spark bytesRead, separate", fmt_bytes(bytes_separate), ""),
        ("Spark bytesRead, fused", fmt_bytes(bytes_fused), ""),
        ("scans: separate / fused bytes", fmt_ratio(bytes_separate / bytes_fused), "target 8x"),
    ]
    report(f"Fusion: 8 pandas features on `text`, {args.rows:,} rows, local[2]", rows)
    return {
        "time_ratio": t_separate / t_fused,
        "bytes_ratio": bytes_separate / bytes_fused,
    }


if __name__ == "__main__":
    main()
