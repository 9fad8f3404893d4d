"""Optimizer benchmark: OmniTable's Catalyst rules, each measured with vs without in one run.

Spark runs local[2]; variants are timed interleaved (medians), bytes come from Spark itself:
  (a) FuseOmniTableScans: 4 projections of one table (4 column groups) joined on
      `_ai_unique_id_` and summed — one scan vs 4 scans and 3 joins;
  (b) FusePythonUDFs: 4 pandas UDFs over one text column written as 4 `withColumn` calls with
      a filter after each of the first three — bytes sent to and received from Python
      (`pythonDataSent`, `pythonDataReceived`) and time. The 3 filter UDFs are evaluated once
      instead of twice; the 4th still runs only on the rows the filters keep, so `text` is still
      sent twice (the rule never moves a UDF below a filter);
  (c) LateMaterializeFilteredColumns: filters keeping 1 % and 10 % of the rows (uniform random
      column) and 1 % (a column clustered in runs of rows) over a table with a ~2 KB text
      payload per row — time, compressed column-chunk bytes the scans read (omnitableBytesRead)
      and bytes the tasks read from disk (inputMetrics.bytesRead); once more on a copy whose text
      files have 64 KB pages (the Python writer's pages hold >= 1,024 rows, so a 1 % random
      filter leaves no page unread).

Run: ./dev bench optimizer [--rows N] [--text-rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, time_interleaved
from omnitable.exec.scan_metrics import ScanMetrics, plan_metric_total

FUSE_SCANS = "spark.omnitable.optimizer.fuse_scans"
FUSE_UDFS = "spark.omnitable.optimizer.fuse_python_udfs"
LATE = "spark.omnitable.optimizer.late_materialization"
KEY = "_ai_unique_id_"


def _random_text(rng: np.random.Generator, rows: int, length: int) -> pa.Array:
    """`rows` strings of `length` random lower-case letters and spaces (compresses ~1.6x)."""
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      ", dtype=np.uint8)
    data = alphabet[rng.integers(0, len(alphabet), rows * length, dtype=np.uint8)]
    offsets = np.arange(0, (rows + 1) * length, length, dtype=np.int32)
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data.tobytes()))


class Meter:
    """Bytes the scans of one run read, from the jar's ScanMetricsListener."""

    def __init__(self, spark: Any) -> None:
        self.metrics = ScanMetrics(spark)

    def scan_bytes(self, run: Callable[[], Any]) -> tuple[int, int]:
        """(omnitableBytesRead, task inputMetrics.bytesRead) of one run."""
        self.metrics.reset()
        run()
        total = self.metrics.snapshot()["total"]
        return int(total["omnitableBytesRead"]), int(total["bytesRead"])


def _with(spark: Any, key: str, value: bool, fn: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        spark.conf.set(key, str(value).lower())
        try:
            return fn()
        finally:
            spark.conf.unset(key)

    return run


def bench_scan_fusion(spark: Any, wh: Any, rows: int, repeats: int) -> dict[str, float]:
    from pyspark.sql import functions as F

    rng = np.random.default_rng(1)
    cols = {f"g{g}_{i}": "double" for g in range(4) for i in range(3)}
    t = wh.create_table(
        "wide", cols, groups={f"g{g}": [f"g{g}_{i}" for i in range(3)] for g in range(4)}
    )
    t.append(pa.table({c: rng.random(rows) for c in cols}), "b0", target_fragment_rows=500_000)
    df = spark.read.format("omnitable").load("wide")

    def query() -> Any:
        parts = [df.select(KEY, *[f"g{g}_{i}" for i in range(3)]) for g in range(4)]
        joined = parts[0]
        for p in parts[1:]:
            joined = joined.join(p, KEY)
        return joined.agg(*[F.sum(f"g{g}_0") for g in range(4)]).collect()

    fused, separate = _with(spark, FUSE_SCANS, True, query), _with(spark, FUSE_SCANS, False, query)
    a, b = fused()[0], separate()[0]
    assert all(abs(x - y) <= 1e-9 * abs(y) for x, y in zip(a, b, strict=True)), (
        a,
        b,
    )  # sum order differs
    times = time_interleaved({"fused": fused, "separate": separate}, repeats=repeats)
    report(
        f"(a) FuseOmniTableScans: 4 projections joined on the key, {rows:,} rows, local[2]",
        [
            ("4 projections joined, fused (1 scan)", fmt_seconds(times["fused"]), ""),
            ("4 projections joined, not fused", fmt_seconds(times["separate"]), ""),
            (
                "not fused / fused",
                fmt_ratio(times["separate"] / times["fused"]),
                "higher is better",
            ),
        ],
    )
    return {"scan_fusion_speedup": times["separate"] / times["fused"]}


def bench_udf_fusion(spark: Any, wh: Any, rows: int, repeats: int) -> dict[str, float]:
    from pyspark.sql.functions import pandas_udf

    rng = np.random.default_rng(2)
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": _random_text(rng, rows, 300)}), "b0", target_fragment_rows=rows // 4)

    @pandas_udf("double")  # type: ignore[call-overload]
    def letters(s: pd.Series) -> pd.Series:
        return s.str.count("[a-z]").astype(float)

    @pandas_udf("double")  # type: ignore[call-overload]
    def vowels(s: pd.Series) -> pd.Series:
        return s.str.count("[aeiou]").astype(float)

    @pandas_udf("double")  # type: ignore[call-overload]
    def spaces(s: pd.Series) -> pd.Series:
        return s.str.count(" ").astype(float)

    @pandas_udf("double")  # type: ignore[call-overload]
    def words(s: pd.Series) -> pd.Series:
        return s.str.count(r"\S+").astype(float)

    df = spark.read.format("omnitable").load("docs")

    def frame() -> Any:  # each filter keeps roughly 70-90 % of the rows
        return (
            df.withColumn("letters", letters("text"))
            .filter("letters > 240")
            .withColumn("vowels", vowels("text"))
            .filter("vowels > 45")
            .withColumn("spaces", spaces("text"))
            .filter("spaces < 70")
            .withColumn("words", words("text"))
            .selectExpr("sum(letters)", "sum(vowels)", "sum(spaces)", "sum(words)", "count(*)")
        )

    def metric(on: bool, name: str) -> int:
        return int(_with(spark, FUSE_UDFS, on, lambda: plan_metric_total(frame(), name))())

    fused_bytes, separate_bytes = metric(True, "pythonDataSent"), metric(False, "pythonDataSent")
    fused_back = metric(True, "pythonDataReceived")
    separate_back = metric(False, "pythonDataReceived")
    fused = _with(spark, FUSE_UDFS, True, lambda: frame().collect())
    separate = _with(spark, FUSE_UDFS, False, lambda: frame().collect())
    assert fused() == separate(), "UDF fusion changed the result"
    times = time_interleaved({"fused": fused, "separate": separate}, repeats=repeats)
    report(
        f"(b) FusePythonUDFs: 4 pandas UDFs on `text` with 3 filters between, {rows:,} rows",
        [
            ("bytes sent to Python, fused", fmt_bytes(fused_bytes), ""),
            ("bytes sent to Python, not fused", fmt_bytes(separate_bytes), ""),
            ("bytes: not fused / fused", fmt_ratio(separate_bytes / max(fused_bytes, 1)), ""),
            ("bytes received from Python, fused", fmt_bytes(fused_back), ""),
            ("bytes received from Python, not fused", fmt_bytes(separate_back), ""),
            ("time, fused", fmt_seconds(times["fused"]), ""),
            ("time, not fused", fmt_seconds(times["separate"]), ""),
            (
                "time: not fused / fused",
                fmt_ratio(times["separate"] / times["fused"]),
                "higher is better",
            ),
        ],
    )
    return {
        "udf_fusion_bytes_ratio": separate_bytes / max(fused_bytes, 1),
        "udf_fusion_received_ratio": separate_back / max(fused_back, 1),
        "udf_fusion_speedup": times["separate"] / times["fused"],
    }


def _small_pages(t: Any, group: str) -> None:
    """Rewrites `group`'s files of `t` with the same rows in 64 KB pages (what a writer option for
    wide groups would produce; the Python writer uses pyarrow's 1 MB / 1,024-row pages)."""
    import pyarrow.parquet as pq

    snap = t.snapshot()
    for frag in snap.fragments:
        for f in snap.files_by_fragment[frag.fragment_id]:
            if f.group_name == group:
                path = t.location.child_path(f.path)
                data = pq.read_table(path)
                pq.write_table(
                    data,
                    path,
                    compression="zstd",
                    row_group_size=data.num_rows,
                    data_page_size=64 * 1024,
                    write_batch_size=32,
                    write_page_index=True,
                )


def bench_late_materialization(
    spark: Any, wh: Any, rows: int, repeats: int, meter: Meter
) -> dict[str, float]:
    rng = np.random.default_rng(3)
    data = pa.table(
        {
            "k": rng.integers(0, 1000, rows),  # uniform: k < 10 keeps 1 %, k < 100 keeps 10 %
            "run": np.arange(rows) * 100 // rows,  # 100 runs of rows/100 rows: run = 7 keeps 1 %
            "text": _random_text(rng, rows, 2000),
        }
    )
    schema = {"k": "bigint", "run": "bigint", "text": "string"}
    for name in ("payload", "payload_pages"):
        t = wh.create_table(name, schema, groups={"wide": ["text"]})
        t.append(data, "b0", target_fragment_rows=rows // 4)
    _small_pages(wh.table("payload_pages"), "wide")
    out: dict[str, float] = {}
    lines: list[tuple[str, str, str]] = []
    cases = [
        ("1 % random", "payload", "k < 10"),
        ("10 % random", "payload", "k < 100"),
        ("1 % clustered", "payload", "run = 7"),
        ("1 % random, 64 KB pages", "payload_pages", "k < 10"),
        ("10 % random, 64 KB pages", "payload_pages", "k < 100"),
    ]
    for name, table, where in cases:
        df = spark.read.format("omnitable").load(table)

        def query(df: Any = df, where: str = where) -> Any:
            return df.where(where).selectExpr("sum(length(text))", "count(*)").collect()

        on, off = _with(spark, LATE, True, query), _with(spark, LATE, False, query)
        assert on() == off(), f"late materialization changed the result of {where}"
        plan = df.where(where).select("text")._jdf.queryExecution().executedPlan().toString()
        assert "LateMaterializeFilteredColumns: on" in plan, plan
        chunk_on, disk_on = meter.scan_bytes(on)
        chunk_off, disk_off = meter.scan_bytes(off)
        times = time_interleaved({"on": on, "off": off}, repeats=repeats)
        speedup = times["off"] / times["on"]
        lines += [
            (
                f"{name}: time with / without",
                f"{fmt_seconds(times['on'])} / {fmt_seconds(times['off'])}",
                "",
            ),
            (f"{name}: without / with", fmt_ratio(speedup), "higher is better"),
            (
                f"{name}: chunk bytes with / without",
                f"{fmt_bytes(chunk_on)} / {fmt_bytes(chunk_off)}",
                "",
            ),
            (
                f"{name}: disk bytes with / without",
                f"{fmt_bytes(disk_on)} / {fmt_bytes(disk_off)}",
                "",
            ),
        ]
        key = name.replace(" % ", "pct_").replace(", 64 KB pages", "_small_pages").replace(" ", "_")
        out[f"late_{key}_speedup"] = speedup
        out[f"late_{key}_bytes_ratio"] = chunk_on / max(chunk_off, 1)
    report(f"(c) LateMaterializeFilteredColumns: ~2 KB text per row, {rows:,} rows", lines)
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable

    parser = argparse.ArgumentParser(prog="optimizer")
    parser.add_argument("--rows", type=int, default=4_000_000, help="rows of the (a) table")
    parser.add_argument("--udf-rows", type=int, default=400_000, help="rows of the (b) table")
    parser.add_argument("--text-rows", type=int, default=200_000, help="rows of the (c) table")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "optimizer"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wh = omnitable.connect(work / "wh")
    conf: dict[str, Any] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.adaptive.enabled": "false",
    }
    spark = omnitable.spark_session(wh, master="local[2]", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    meter = Meter(spark)
    results: dict[str, float] = {}
    try:
        results.update(bench_scan_fusion(spark, wh, args.rows, args.repeats))
        results.update(bench_udf_fusion(spark, wh, args.udf_rows, args.repeats))
        results.update(bench_late_materialization(spark, wh, args.text_rows, args.repeats, meter))
    finally:
        spark.stop()
        wh.close()
    return results
