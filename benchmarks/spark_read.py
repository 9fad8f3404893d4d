"""Spark read benchmark: the omnitable connector vs one wide Parquet table vs a 4-way key join.

Data: the foundation benchmark's (python_read.make_data): N rows (default 5,000,000) of 12 float
columns in 4 groups of 3, plus one text column. Spark runs local[2]. Prints, measured side by
side in one run (medians of interleaved repeats):
  * sum over 4 columns from 4 groups: omnitable vs the same columns in one wide Parquet table
    (target <= 1.2x) and vs a 4-way join of 4 Parquet tables on the key (target >= 5x faster);
  * a filter at 1 % selectivity projecting the wide text column, vs a full scan of the same
    columns: time and column-chunk bytes read (omnitable's scan metric), once with a predicate
    on a random column (statistics cannot help) and once on a clustered one (`_ai_unique_id_`:
    fragment and row-group statistics skip what cannot match).

Run: ./dev bench spark_read [--rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, time_interleaved
from benchmarks.python_read import GROUPS, KEY, PER_GROUP, _columns, make_data

METRIC_BYTES = "omnitableBytesRead"


def _scan_bytes(df: Any) -> int:
    """Runs `df` and returns the bytes its omnitable scan read (sum of the scan metric)."""
    df.collect()
    plan = df._jdf.queryExecution().executedPlan()
    leaves = plan.collectLeaves()
    total = 0
    for i in range(leaves.size()):
        metrics = leaves.apply(i).metrics()
        if metrics.contains(METRIC_BYTES):
            total += int(metrics.apply(METRIC_BYTES).value())
    return total


def main(argv: list[str] | None = None) -> dict[str, float]:
    from pyspark.sql import functions as F

    import omnitable

    parser = argparse.ArgumentParser(prog="spark_read")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = args.rows

    work = BENCH_DIR / "spark_read"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    data = make_data(rows)
    data = data.add_column(0, KEY, pa.array(np.arange(rows, dtype=np.int64)))
    cols = _columns()
    groups = {f"g{g}": cols[g * PER_GROUP : (g + 1) * PER_GROUP] for g in range(GROUPS)}

    print(f"writing {rows:,} rows ({fmt_bytes(data.nbytes)} in memory) three ways ...")
    wh = omnitable.connect(work / "wh")
    t = wh.create_table("bench", data.drop_columns([KEY]).schema, groups=groups)
    t.append(data, "b0")
    (work / "wide").mkdir()
    pq.write_table(
        data, str(work / "wide" / "part-0.parquet"), compression="zstd", row_group_size=131_072
    )
    for g, members in groups.items():
        (work / g).mkdir()
        pq.write_table(
            data.select([KEY, *members]),
            str(work / g / "part-0.parquet"),
            compression="zstd",
            row_group_size=131_072,
        )
    del data

    spark = omnitable.spark_session(
        wh,
        master="local[2]",
        **{
            "spark.driver.memory": "6g",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "8",
            "spark.sql.adaptive.enabled": "false",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        omni = spark.read.format("omnitable").load("bench")
        wide = spark.read.parquet(str(work / "wide"))
        parts = [spark.read.parquet(str(work / g)) for g in groups]
        wanted = [groups[f"g{g}"][0] for g in range(GROUPS)]  # one column from each group
        sums = [F.sum(c).alias(f"s{i}") for i, c in enumerate(wanted)]

        def joined() -> Any:
            out = parts[0].select(KEY, wanted[0])
            for p, c in zip(parts[1:], wanted[1:], strict=True):
                out = out.join(p.select(KEY, c), KEY)
            return out

        queries = {
            "omnitable": lambda: omni.agg(*sums).collect(),
            "wide": lambda: wide.agg(*sums).collect(),
            "join": lambda: joined().agg(*sums).collect(),
        }
        a, b, c = (queries[k]()[0] for k in ("omnitable", "wide", "join"))
        assert np.allclose(list(a), list(b)) and np.allclose(list(a), list(c)), (a, b, c)
        times = time_interleaved(queries, repeats=args.repeats)

        # 1 % selectivity with the wide text column projected, vs a full scan of the same columns
        # every variant reads the same two columns (the text and the predicate column)
        out = [F.sum(F.length("text")).alias("chars"), F.sum(wanted[0]).alias("s")]
        random_pred = F.col(wanted[0]) < 0.01  # uniform in [0, 1): no statistic can help
        clustered_pred = F.col(KEY) < int(rows * 0.01)  # ids are ordered: fragments/row groups skip
        base = omni.select(KEY, "text", wanted[0])
        scans = {
            "full scan": lambda: base.agg(*out, F.max(KEY)),
            "1% random": lambda: base.where(random_pred).agg(*out, F.max(KEY)),
            "1% clustered": lambda: base.where(clustered_pred).agg(*out, F.max(KEY)),
        }
        scan_times = time_interleaved(
            {k: (lambda f=f: f().collect()) for k, f in scans.items()}, repeats=args.repeats
        )
        scan_bytes = {k: _scan_bytes(f()) for k, f in scans.items()}
        explain = (
            omni.where(clustered_pred)
            .select("text")
            ._jdf.queryExecution()
            .executedPlan()
            .toString()
        )
    finally:
        spark.stop()
        wh.close()

    omni_vs_wide = times["omnitable"] / times["wide"]
    join_vs_omni = times["join"] / times["omnitable"]
    report(
        f"Spark local[2], {rows:,} rows, sum of 4 columns from 4 groups",
        [
            ("omnitable connector", fmt_seconds(times["omnitable"]), ""),
            ("Parquet, one wide table", fmt_seconds(times["wide"]), ""),
            ("Parquet, 4-way key join", fmt_seconds(times["join"]), ""),
            ("omnitable / wide table", fmt_ratio(omni_vs_wide), "target <= 1.2x"),
            ("key join / omnitable", fmt_ratio(join_vs_omni), "target >= 5x"),
        ],
    )
    full_t, full_b = scan_times["full scan"], scan_bytes["full scan"]
    report(
        "filter at 1% selectivity, text column projected (omnitable)",
        [
            ("full scan: time / bytes read", f"{fmt_seconds(full_t)} / {fmt_bytes(full_b)}", ""),
            *[
                (
                    f"{k}: time / bytes read",
                    f"{fmt_seconds(scan_times[k])} / {fmt_bytes(scan_bytes[k])}",
                    f"{fmt_ratio(scan_times[k] / full_t)} time, {scan_bytes[k] / max(full_b, 1):.1%} bytes",
                )
                for k in ("1% random", "1% clustered")
            ],
        ],
    )
    print("\n  EXPLAIN (clustered filter): " + explain.split("BatchScan", 1)[-1].strip()[:400])
    shutil.rmtree(work, ignore_errors=True)
    return {
        "omnitable_vs_wide": omni_vs_wide,
        "join_vs_omnitable": join_vs_omni,
        "random_filter_time_vs_full": scan_times["1% random"] / full_t,
        "clustered_filter_time_vs_full": scan_times["1% clustered"] / full_t,
        "clustered_filter_bytes_vs_full": scan_bytes["1% clustered"] / max(full_b, 1),
    }


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main(sys.argv[1:])
