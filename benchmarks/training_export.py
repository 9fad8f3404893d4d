"""Training export benchmark (issue 16 (b)): ``Table.export_mmap`` throughput vs materializing
the same columns with ``read().to_numpy()``.

One table of N rows x F float features (+ a label) in fragments of R rows. Timed interleaved:

  * ``export_mmap``: streams features.bin/labels.bin + schema.json (with mean/std) to disk,
    one fragment in memory at a time;
  * ``read().to_numpy()``: reads the same columns into one Arrow table and stacks them into a
    float32 array in memory (what a job without an export does; it holds the whole table).

Reported: seconds, rows/s and MB/s of float32 output for each, and their ratio.

Run: ./dev bench training_export [--rows N] [--features F] [--fragment-rows R] [--repeats K]
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any

import numpy as np
import pyarrow as pa

import omnitable
from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, time_interleaved


def _table(wh: omnitable.Warehouse, rows: int, width: int, fragment_rows: int) -> Any:
    names = [f"f{i}" for i in range(width)]
    t = wh.create_table("samples", {**dict.fromkeys(names, "float"), "y": "float"})
    rng = np.random.default_rng(0)
    step = max(fragment_rows, 100_000)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        x = rng.standard_normal((n, width), dtype=np.float32)
        cols = {name: x[:, i] for i, name in enumerate(names)}
        t.append(pa.table({**cols, "y": x[:, 0]}), f"p{start}", target_fragment_rows=fragment_rows)
    return t


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--fragment-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    work = BENCH_DIR / "training_export"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wh = omnitable.connect(str(work / "wh"))
    t = _table(wh, args.rows, args.features, args.fragment_rows)
    features = [f"f{i}" for i in range(args.features)]
    out = work / "export.mmap"

    def export() -> None:
        t.export_mmap(out, features, label="y", overwrite=True)

    def materialize() -> None:
        table = t.read([*features, "y"])
        x = np.column_stack([table.column(c).to_numpy() for c in features]).astype(np.float32)
        y = table.column("y").to_numpy().astype(np.float32)
        assert x.shape == (args.rows, args.features) and y.shape == (args.rows,)

    times = time_interleaved({"export": export, "read": materialize}, repeats=args.repeats)
    mb = args.rows * (args.features + 1) * 4 / 2**20
    report(
        f"mmap export vs read().to_numpy(), {args.rows:,} rows x {args.features} features",
        [
            ("export_mmap (to disk)", fmt_seconds(times["export"]),
             f"{args.rows / times['export']:,.0f} rows/s, {mb / times['export']:,.0f} MB/s"),
            ("read().to_numpy() (in memory)", fmt_seconds(times["read"]),
             f"{args.rows / times['read']:,.0f} rows/s, {mb / times['read']:,.0f} MB/s"),
            ("export / read", fmt_ratio(times["export"] / times["read"]),
             "export also writes and fsyncs"),
        ],
    )  # fmt: skip
    wh.close()
    shutil.rmtree(work, ignore_errors=True)
    return {"export_s": times["export"], "read_s": times["read"]}


if __name__ == "__main__":
    main()
