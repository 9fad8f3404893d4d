"""Governance (issue 15): what compaction buys.

* (a) a batch of ``--rows`` rows (default 50,000; text and two numbers) written as
  ``--fragments`` tiny fragments (default 1,000), against the same rows after
  ``Table.maintain(["compact"])`` (one fragment): a full read in Python (median of 5 x
  ``--repeats``, interleaved) and a one-batch backfill of a SQL feature on Spark (local[2],
  warmed up; ``--repeats`` each, a new feature per run, so each run computes every row). Both
  tables read back equal (checked). Goal: >= 5x faster after. The compaction's own time is
  reported too.

Run: ./dev bench governance [--fragments 1000] [--rows 50000] [--repeats 1] [--no-spark]
"""

from __future__ import annotations

import argparse
import shutil
import time
import uuid
from typing import Any

from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, time_interleaved


def _tables(fragments: int, rows: int) -> tuple[Any, Any, Any, Any, float]:
    """A warehouse with ``tiny`` (``fragments`` fragments) and ``compacted`` (the same rows,
    then compacted); returns the compaction time too."""
    import pyarrow as pa

    import omnitable

    path = BENCH_DIR / f"governance-{uuid.uuid4().hex[:6]}"
    wh = omnitable.connect(str(path))
    data = pa.table({
        "text": [f"row {i} " + "lorem ipsum " * (i % 7) for i in range(rows)],
        "a": list(range(rows)),
        "b": [float(i) / 3 for i in range(rows)],
    })  # fmt: skip
    per_fragment = max(1, -(-rows // fragments))
    tables = []
    for name in ("tiny", "compacted"):
        t = wh.create_table(name, {"text": "string", "a": "bigint", "b": "double"})
        t.append(data, "batch", target_fragment_rows=per_fragment)
        tables.append(t)
    tiny, compacted = tables
    start = time.perf_counter()
    (result,) = compacted.maintain(["compact"])
    took = time.perf_counter() - start
    assert result.outcome == "committed", result
    assert tiny.batches()[0].fragments == fragments and compacted.batches()[0].fragments == 1
    assert tiny.read().equals(compacted.read())
    return path, wh, tiny, compacted, took


def _backfills(tiny: Any, compacted: Any, repeats: int) -> dict[str, float]:
    import omnitable

    spark = omnitable.spark_session(
        tiny.warehouse,
        master="local[2]",
        **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )
    counter = iter(range(10_000))

    def backfill(t: Any) -> None:
        name = f"len_{next(counter)}"
        t.register(omnitable.sql_feature(name, "length(text)", "int", "1"))
        t.backfill(name, batches=["batch"]).run(spark)

    backfill(compacted)  # warms Spark up (a 1-fragment backfill)
    return time_interleaved(
        {"tiny": lambda: backfill(tiny), "compacted": lambda: backfill(compacted)},
        repeats=repeats,
        warmup=0,
    )


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="./dev bench governance")
    parser.add_argument("--fragments", type=int, default=1000)
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=1, help="backfills (reads: 5x this)")
    parser.add_argument("--no-spark", action="store_true", help="skip the backfill (Spark)")
    args = parser.parse_args(argv)
    path, wh, tiny, compacted, took = _tables(args.fragments, args.rows)
    out: dict[str, float] = {}
    try:
        reads = time_interleaved(
            {"tiny": lambda: tiny.read(), "compacted": lambda: compacted.read()},
            repeats=5 * args.repeats,
        )
        out["read_ratio"] = reads["tiny"] / reads["compacted"]
        rows = [
            (f"(a) compaction of {args.fragments:,} fragments ({args.rows:,} rows)",
             fmt_seconds(took), ""),
            (f"(a) full read, {args.fragments:,} fragments", fmt_seconds(reads["tiny"]), ""),
            ("(a) full read, compacted", fmt_seconds(reads["compacted"]), ""),
            ("(a) full read: before / after", fmt_ratio(out["read_ratio"]), ">= 5x"),
        ]  # fmt: skip
        if not args.no_spark:
            fills = _backfills(tiny, compacted, args.repeats)
            out["backfill_ratio"] = fills["tiny"] / fills["compacted"]
            rows += [
                (f"(a) one-batch backfill, {args.fragments:,} fragments",
                 fmt_seconds(fills["tiny"]), ""),
                ("(a) one-batch backfill, compacted", fmt_seconds(fills["compacted"]), ""),
                ("(a) backfill: before / after", fmt_ratio(out["backfill_ratio"]), ">= 5x"),
            ]  # fmt: skip
        report("governance", rows)
    finally:
        wh.close()
        shutil.rmtree(path, ignore_errors=True)
    return out
