"""Spark SQL writes benchmark (issue 14): ``INSERT INTO`` and one-column ``MERGE``.

Data: N rows (default the issue's 5,000,000) of a Spark DataFrame with 8 columns (4 integers, 3
doubles, a short string), generated and cached once so every variant writes the same rows.
Prints, measured side by side in one run (``--repeats`` interleaved rounds, medians):

  * (a) ``INSERT INTO omnitable.<t> SELECT * FROM src`` (a new batch per round, committed by the
    JVM) vs the same DataFrame written as Parquet (``df.write.parquet``) and as Delta
    (``df.write.format("delta")``); target <= 1.2x Parquet. Codecs compared like with like:
    OmniTable's default ``zstd`` against Parquet written with ``zstd``, and OmniTable with
    ``spark.omnitable.write.compression=snappy`` against Spark's default (``snappy``); both ratios
    are printed. ``Table.append(df)`` (Spark tasks running Python workers) is reported alongside
    for reference;
  * (b) setting one column of every row from a source keyed by ``_ai_unique_id_`` (``--merge-rows``
    rows, default 1,000,000): OmniTable's column-only write vs Delta's ``MERGE INTO … WHEN
    MATCHED THEN UPDATE SET quality = s.quality`` of the same statement; bytes written and time
    (goal: >= 5x fewer bytes, >= 3x faster); then the same in SQL on both sides, ``UPDATE … SET
    quality = quality + 1`` of every row. OmniTable runs the same SQL ``MERGE INTO`` (column-only
    through the session extension, docs/spark.md "MERGE INTO"); with a jar that refuses it,
    ``Table.update`` (the same column-only write from Python); the report says which ran. Every
    (b) statement runs in ``--repeats`` interleaved rounds after a full-size warm-up round
    (medians of time, JVM CPU and bytes).

Run: ./dev bench sql_writes [--rows N] [--merge-rows N] [--repeats N] [--only a,b]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report, smoke
from benchmarks.dataops_keyed import tree_size

TARGET_INSERT = 1.2
SCHEMA = {
    "a": "bigint", "b": "bigint", "c": "int", "d": "int",
    "x": "double", "y": "double", "z": "double", "s": "string",
}  # fmt: skip
SOURCE_SQL = [
    "id AS a", "id * 7 % 1000003 AS b", "CAST(id % 1000 AS INT) AS c",
    "CAST(id % 17 AS INT) AS d", "rand(1) AS x", "rand(2) AS y", "CAST(id AS DOUBLE) / 3 AS z",
    "concat('row-', CAST(id % 100000 AS STRING)) AS s",
]  # fmt: skip


def _session(wh: Any) -> Any:
    import omnitable

    spark = omnitable.spark_session(
        wh, master="local[2]", **{"spark.ui.enabled": "false",
                                  "spark.ui.showConsoleProgress": "false",
                                  "spark.driver.memory": "6g",
                                  "spark.sql.shuffle.partitions": "4"})  # fmt: skip
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _jvm_cpu_seconds(spark: Any) -> Callable[[], float]:
    """CPU seconds used so far by the Spark JVM (driver and, in local mode, every task); NaN off
    Linux. On a shared machine a write's CPU time varies far less than its wall time."""
    stat = Path(f"/proc/{spark._jvm.java.lang.ProcessHandle.current().pid()}/stat")
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def read() -> float:
        if not stat.exists():
            return math.nan
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    return read


def _interleaved(
    variants: dict[str, Any], repeats: int, cpu: Callable[[], float]
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and JVM CPU seconds per variant; each call gets its round number (a fresh
    batch or path)."""
    wall: dict[str, list[float]] = {k: [] for k in variants}
    used: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(1 if smoke() else 0, repeats + 1):  # round 0 warms up
        for name, fn in variants.items():
            start, cpu_start = time.perf_counter(), cpu()
            fn(i)
            if i:
                wall[name].append(time.perf_counter() - start)
                used[name].append(cpu() - cpu_start)
    return {k: statistics.median(v) for k, v in wall.items()}, {
        k: statistics.median(v) for k, v in used.items()
    }


def insert_part(spark: Any, wh: Any, root: Path, rows: int, repeats: int) -> list[Any]:
    """(a): INSERT INTO vs Parquet and Delta writes of one cached DataFrame."""
    src = spark.range(rows, numPartitions=4).selectExpr(*SOURCE_SQL).cache()
    src.count()
    src.createOrReplaceTempView("bench_src")
    table = wh.create_table("ins", SCHEMA)

    def parquet(i: int) -> None:  # Spark's default codec, snappy
        src.write.mode("overwrite").parquet(str(root / "parquet"))

    def parquet_zstd(i: int) -> None:
        src.write.mode("overwrite").option("compression", "zstd").parquet(str(root / "parquet_z"))

    def delta(i: int) -> None:
        src.write.format("delta").mode("overwrite").save(str(root / "delta"))

    def insert(i: int) -> None:  # OmniTable's default codec, zstd
        spark.conf.set("spark.omnitable.write.appendName", f"sql{i}")
        spark.sql("INSERT INTO omnitable.ins SELECT * FROM bench_src")

    def insert_snappy(i: int) -> None:
        spark.conf.set("spark.omnitable.write.appendName", f"sqls{i}")
        spark.conf.set("spark.omnitable.write.compression", "snappy")
        try:
            spark.sql("INSERT INTO omnitable.ins SELECT * FROM bench_src")
        finally:
            spark.conf.unset("spark.omnitable.write.compression")

    def python_append(i: int) -> None:
        table.append(src, f"py{i}")

    variants = {"parquet": parquet, "parquet_zstd": parquet_zstd, "delta": delta, "insert": insert,
                "insert_snappy": insert_snappy, "append": python_append}  # fmt: skip
    t, cpu = _interleaved(variants, repeats, _jvm_cpu_seconds(spark))
    rounds = repeats + (0 if smoke() else 1)  # with the warm-up round
    assert table.count() == 3 * rounds * rows, "INSERT INTO lost or duplicated rows"
    src.unpersist()
    return _insert_report(rows, t, cpu)


def _insert_report(rows: int, t: dict[str, float], cpu: dict[str, float]) -> list[Any]:
    def both(k: str) -> str:
        return f"{fmt_seconds(t[k])} (JVM CPU {fmt_seconds(cpu[k])})"

    def ratio(a: str, b: str) -> str:
        return f"{fmt_ratio(t[a] / t[b])} (JVM CPU {fmt_ratio(cpu[a] / cpu[b])})"

    target = f"target <= {TARGET_INSERT}x"
    return [
        ("(a) rows", f"{rows:,}", ""),
        ("Parquet write (snappy, Spark's default)", both("parquet"), ""),
        ("Parquet write (zstd)", both("parquet_zstd"), ""),
        ("Delta write (snappy)", both("delta"), ""),
        ("INSERT INTO omnitable (zstd, the default)", both("insert"), ""),
        ("INSERT INTO omnitable (snappy)", both("insert_snappy"), ""),
        ("Table.append(df) (Python workers, zstd)", fmt_seconds(t["append"]), "reference"),
        ("INSERT INTO / Parquet, both zstd", ratio("insert", "parquet_zstd"), target),
        ("INSERT INTO / Parquet, both snappy", ratio("insert_snappy", "parquet"), target),
        ("INSERT INTO (zstd) / Parquet (snappy)", ratio("insert", "parquet"), ""),
        ("INSERT INTO / Delta, both snappy", ratio("insert_snappy", "delta"), ""),
    ]


def _sql_merge_supported(spark: Any) -> bool:
    """Whether the connector runs ``MERGE INTO`` (issue 14's row-level DML)."""
    spark.sparkContext.setLogLevel("OFF")  # a refusal is an answer here, not an error to log
    try:
        spark.sql(
            "MERGE INTO omnitable.mrg t USING (SELECT CAST(-1 AS BIGINT) AS _ai_unique_id_, "
            "0.0D AS quality) s ON t._ai_unique_id_ = s._ai_unique_id_ "
            "WHEN MATCHED THEN UPDATE SET quality = s.quality"
        )
    except Exception:  # any refusal means: not supported
        return False
    finally:
        spark.sparkContext.setLogLevel("ERROR")
    return True


def merge_part(spark: Any, wh: Any, root: Path, rows: int, repeats: int = 1) -> list[Any]:
    """(b): one column of every row, OmniTable column-only write vs Delta MERGE, then SQL UPDATE on
    both; each statement runs in ``repeats`` interleaved rounds after a warm-up round of the same
    size (one JVM: both engines' code is compiled by then), medians of time and bytes."""
    src = spark.range(rows, numPartitions=4).selectExpr(*SOURCE_SQL, "rand(3) AS quality")
    table = wh.create_table("mrg", {**SCHEMA, "quality": "double"}, groups={"q": ["quality"]})
    table.append(src, "base")
    ids = table.to_spark(spark).select("_ai_unique_id_")
    scores = ids.selectExpr("_ai_unique_id_", "rand(4) AS quality").cache()
    scores.count()
    scores.createOrReplaceTempView("scores")
    delta_path = root / "delta_mrg"
    table.to_spark(spark).write.format("delta").save(str(delta_path))
    omni_dir = root / "wh"
    sql_merge = _sql_merge_supported(spark)
    merge_sql = ("MERGE INTO {t} t USING scores s ON t._ai_unique_id_ = s._ai_unique_id_ "
                 "WHEN MATCHED THEN UPDATE SET quality = s.quality")  # fmt: skip
    written: dict[str, list[int]] = {}

    def statement(name: str, path: Path, run: Callable[[], Any]) -> Callable[[int], None]:
        def go(i: int) -> None:
            before = tree_size(path)
            run()
            if i:  # not the warm-up round
                written.setdefault(name, []).append(tree_size(path) - before)

        return go

    def omni_merge() -> None:
        if sql_merge:
            spark.sql(merge_sql.format(t="omnitable.mrg"))
        else:
            table.update(spark.table("scores").toArrow(), columns=["quality"])

    delta_t = f"delta.`{delta_path}`"
    variants = {
        "omni": statement("omni", omni_dir, omni_merge),
        "delta": statement("delta", delta_path, lambda: spark.sql(merge_sql.format(t=delta_t))),
        "omni_upd": statement("omni_upd", omni_dir,
                              lambda: spark.sql("UPDATE omnitable.mrg SET quality = quality + 1")),
        "delta_upd": statement("delta_upd", delta_path,
                               lambda: spark.sql(f"UPDATE {delta_t} SET quality = quality + 1")),
    }  # fmt: skip
    t, cpu = _interleaved(variants, repeats, _jvm_cpu_seconds(spark))
    scores.unpersist()
    b = {k: statistics.median(v) for k, v in written.items()}
    how = "SQL MERGE INTO" if sql_merge else "Table.update (SQL MERGE not available)"
    return [
        ("(b) rows, rounds", f"{rows:,}, {repeats}" + ("" if smoke() else " (+1 warm-up)"), ""),
        ("OmniTable runs", how, ""),
        *_merge_rows("", ("omni", "delta"), b, t, cpu),
        *_merge_rows("SQL UPDATE ", ("omni_upd", "delta_upd"), b, t, cpu),
    ]


def _merge_rows(
    what: str,
    keys: tuple[str, str],
    written: dict[str, float],
    t: dict[str, float],
    cpu: dict[str, float],
) -> list[Any]:
    """Report rows of one (b) statement: OmniTable (``keys[0]``) vs Delta (``keys[1]``)."""
    o, d = keys
    return [
        (f"{what}bytes written, OmniTable", fmt_bytes(int(written[o])), ""),
        (f"{what}bytes written, Delta", fmt_bytes(int(written[d])), ""),
        (f"{what}bytes Delta / OmniTable", fmt_ratio(written[d] / max(written[o], 1)), "goal >= 5x"),
        (f"{what}time, OmniTable", f"{fmt_seconds(t[o])} (JVM CPU {fmt_seconds(cpu[o])})", ""),
        (f"{what}time, Delta", f"{fmt_seconds(t[d])} (JVM CPU {fmt_seconds(cpu[d])})", ""),
        (f"{what}speed-up vs Delta", f"{fmt_ratio(t[d] / t[o])} (JVM CPU {fmt_ratio(cpu[d] / cpu[o])})",
         "goal >= 3x"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="bench sql_writes")
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--merge-rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="a,b", help="parts to run: a, b or a,b")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts or parts - {"a", "b"}:
        parser.error(f"--only takes a, b or a,b; got {args.only!r}")
    import omnitable

    root = BENCH_DIR / "sql_writes"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    wh = omnitable.connect(str(root / "wh"))
    spark = _session(wh)
    try:
        if "a" in parts:
            report("sql_writes (a): INSERT INTO vs Parquet / Delta", insert_part(
                spark, wh, root, args.rows, args.repeats))  # fmt: skip
        if "b" in parts:
            report("sql_writes (b): one column of every row vs Delta MERGE", merge_part(
                spark, wh, root, args.merge_rows, args.repeats))  # fmt: skip
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return {}
