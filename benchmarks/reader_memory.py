"""Reader memory benchmark: peak memory of a Spark read, before vs after byte-capped row groups.

Spark's Parquet reader fetches every requested column chunk of a row group at once, for every
file the connector zips, so a row group capped by rows only (131,072) holds ~260 MB of a 2 KB
text column, or of 2,500 double columns. Two tables, each written twice into one warehouse:
``WriteOptions(row_group_bytes=None)`` (before: rows-only cap) and the default byte cap (after):

  * ``wide``: N rows of 2,500 double columns in one column group;
  * ``text``: M rows of one ~2 KB text column (random, so it compresses about as real text does).

Each read (a full scan of every column into Spark's ``noop`` sink) runs in a fresh Spark
``local[1]`` driver JVM with a small young generation, measured on a second run (so planning
and code generation for thousands of columns are not counted):
peak heap used (sum of the heap pools' peaks, garbage not yet collected included) and peak
RSS of the JVM process over its life (``VmHWM``), side by side with the largest compressed row
group one file holds (what the reader fetches at once per file). A smoke run
(``run.py --smoke``) reads the four tables once each in one worker JVM.

Run: ./dev bench reader_memory [--wide-rows N] [--wide-columns C] [--text-rows M]
     [--row-group-bytes B]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, report, smoke

WIDE_COLUMNS = 2500
TEXT_BYTES = 2000
VARIANTS = ("before", "after")


def _wide(rows: int, columns: int) -> pa.Table:
    rng = np.random.default_rng(1)
    values = rng.random((columns, rows))
    return pa.table({f"c{i:04d}": values[i] for i in range(columns)})


def _text(rows: int) -> pa.Table:
    rng = np.random.default_rng(2)
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz      etaoin", dtype=np.uint8)
    chars = alphabet[rng.integers(0, len(alphabet), rows * TEXT_BYTES)].tobytes()
    text = [chars[i * TEXT_BYTES : (i + 1) * TEXT_BYTES].decode() for i in range(rows)]
    return pa.table({"text": text})


def _write(work: Path, args: argparse.Namespace) -> None:
    """One warehouse, tables ``<data>_<variant>``: before without, after with the byte cap."""
    import omnitable
    from omnitable.format.writer import WriteOptions

    for variant in VARIANTS:
        options = WriteOptions(row_group_bytes=None)
        if variant == "after":
            cap = args.row_group_bytes
            options = WriteOptions() if cap is None else WriteOptions(row_group_bytes=cap)
        wh = omnitable.connect(work / "wh", write_options=options)
        tables = (
            ("wide", _wide(args.wide_rows, args.wide_columns)),
            ("text", _text(args.text_rows)),
        )
        for name, data in tables:
            t = wh.create_table(f"{name}_{variant}", data.schema, groups={"g": data.column_names})
            t.append(data, "b0")
        wh.close()


def _largest_row_group(work: Path, table: str) -> tuple[int, int]:
    """(largest compressed row group of one file, row groups) over the table's files."""
    import omnitable

    wh = omnitable.connect(work / "wh")
    t = wh.table(table)
    snap = t.snapshot()
    largest, groups = 0, 0
    for frag in snap.fragments:
        for f in snap.files_by_fragment[frag.fragment_id]:
            meta = pq.read_metadata(t.location.child_path(f.path))
            groups += meta.num_row_groups
            for i in range(meta.num_row_groups):
                rg = meta.row_group(i)
                largest = max(
                    largest, sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
                )
    wh.close()
    return largest, groups


def _measure(work: Path, tables: list[str]) -> dict[str, dict[str, Any]]:
    """Worker (a fresh process and JVM): full scan of each table, its peak heap and the RSS."""
    import omnitable

    spark = omnitable.spark_session(
        work / "wh",
        master="local[1]",
        **{
            "spark.driver.memory": "3g",
            "spark.driver.extraJavaOptions": "-Xmn48m -XX:+UseG1GC",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.adaptive.enabled": "false",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return {table: _scan_peaks(spark, table) for table in tables}
    finally:
        spark.stop()


def _scan_peaks(spark: Any, table: str) -> dict[str, Any]:
    """Peak heap of a full scan of ``table`` (its second, in a smoke run its only one) and the
    JVM's peak RSS so far."""
    df = spark.read.format("omnitable").load(table)
    query = df.select([c for c in df.columns if not c.startswith("_ai_")])
    jvm = spark.sparkContext._jvm
    pools = [
        p
        for p in jvm.java.lang.management.ManagementFactory.getMemoryPoolMXBeans()
        if str(p.getType()) == "Heap memory"
    ]
    scan = query.write.format("noop").mode("overwrite")
    if not smoke():
        scan.save()  # warm-up: planning and code generation for thousands of columns stay out
    jvm.java.lang.System.gc()
    for p in pools:
        p.resetPeakUsage()
    scan.save()  # every row, nothing kept
    heap = sum(int(p.getPeakUsage().getUsed()) for p in pools)
    pid = spark.sparkContext._gateway.proc.pid
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    rss = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    return {"heap": heap, "rss": rss}


def _measure_in_workers(tables: list[str]) -> dict[str, dict[str, Any]]:
    """table -> its peaks, each table read in a worker process of its own (a smoke run reads
    them all in one: one JVM start instead of one per table)."""
    found: dict[str, dict[str, Any]] = {}
    for batch in [tables] if smoke() else [[table] for table in tables]:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.reader_memory", "--worker", ",".join(batch)],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"reading {batch} failed:\n{proc.stderr[-3000:]}")
        found.update(json.loads(proc.stdout.strip().splitlines()[-1]))
    return found


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="reader_memory")
    parser.add_argument("--wide-rows", type=int, default=8_000)
    parser.add_argument("--wide-columns", type=int, default=WIDE_COLUMNS)
    parser.add_argument("--text-rows", type=int, default=100_000)
    parser.add_argument(
        "--row-group-bytes", type=int, default=None, help="after: the cap (default: WriteOptions')"
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    work = BENCH_DIR / "reader_memory"
    if args.worker:
        print(json.dumps(_measure(work, args.worker.split(","))))
        return {}
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(
        f"writing {args.wide_rows:,} rows x {args.wide_columns} doubles and {args.text_rows:,} "
        "rows x ~2 KB text, twice ..."
    )
    _write(work, args)
    out: dict[str, float] = {}
    peaks = _measure_in_workers(
        [f"{data}_{variant}" for data in ("wide", "text") for variant in VARIANTS]
    )
    for data in ("wide", "text"):
        rows = []
        found = {}
        for variant in VARIANTS:
            table = f"{data}_{variant}"
            found[variant] = dict(peaks[table])
            largest, groups = _largest_row_group(work, table)
            found[variant].update(largest=largest, groups=groups)
            m = found[variant]
            rows.append(
                (
                    f"{variant}: heap / RSS / largest row group (compressed, {groups} groups)",
                    f"{fmt_bytes(m['heap'])} / {fmt_bytes(m['rss'])} / {fmt_bytes(largest)}",
                    "",
                )
            )
        ratio = found["before"]["heap"] / found["after"]["heap"]
        rows.append(("peak heap before / after", fmt_ratio(ratio), ""))
        report(f"{data}: full scan, one Spark reader", rows)
        out[f"{data}_heap_ratio"] = ratio
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
