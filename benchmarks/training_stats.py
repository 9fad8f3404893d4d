"""Training data plane: statistics from metadata, fitted preprocessing reused (issue 16 (c), (d)).

Data: N rows (default 2,000,000) of 6 float columns, one integer and one string column (1,000
distinct values), appended in fragments of 100,000 rows. Prints, measured side by side:
  * (c) ``Table.stats`` count/nulls/min/max of every column from the catalog's file statistics
    vs a full scan computing the same with pyarrow (``read`` + ``count``/``min_max``) — goal
    >= 20x; the full statistics scan (mean, std, quantiles, histogram, distinct) for reference;
  * (d) one epoch's preprocessing with the fitted parameters reused (``preprocess.load`` +
    ``apply`` on the epoch's batches) vs refitted every epoch (``preprocess.fit`` + ``apply``)
    — HE3ML measured 23x.

Run: ./dev bench training_stats [--rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, time_interleaved

FLOATS = [f"f{i}" for i in range(6)]
COLUMNS = [*FLOATS, "n", "city"]
SPEC = {
    "f0": "standardize", "f1": "standardize", "f2": "standardize", "f3": "min_max",
    "f4": {"op": "bucketize", "num_buckets": 10}, "n": "min_max",
    "city": {"op": "vocabulary", "top_k": 100},
}  # fmt: skip


def make_data(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    data: dict[str, object] = {c: rng.normal(size=rows) for c in FLOATS}
    data["n"] = rng.integers(0, 1_000_000, rows)
    cities = np.array([f"city{i}" for i in range(1000)], dtype=object)
    data["city"] = pa.array(cities[rng.zipf(1.3, rows) % 1000])
    return pa.table(data)


def full_scan(t: object) -> dict[str, tuple[int, object, object]]:
    """count, min, max of every column the way a reader without metadata must: read it all."""
    table = t.read(COLUMNS)  # type: ignore[attr-defined]
    out = {}
    for c in COLUMNS:
        mm = pc.min_max(table.column(c))
        out[c] = (pc.count(table.column(c)).as_py(), mm["min"].as_py(), mm["max"].as_py())
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    import omnitable
    import omnitable.preprocess as pp

    parser = argparse.ArgumentParser(prog="training_stats")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--fragment-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "training_stats"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    wh = omnitable.connect(work / "wh")
    data = make_data(args.rows)
    t = wh.create_table("bench", data.schema)
    t.append(data, "b0", target_fragment_rows=args.fragment_rows)
    del data

    def from_metadata() -> dict[str, tuple[int, object, object]]:
        st = t.stats(COLUMNS)
        assert st.files_opened == 0
        return {c: (st[c].count, st[c].min, st[c].max) for c in COLUMNS}

    assert from_metadata() == full_scan(t)
    times = time_interleaved(
        {"metadata": from_metadata, "scan": lambda: full_scan(t),
         "stats scan": lambda: t.stats(COLUMNS).to_pandas()},
        repeats=args.repeats,
    )  # fmt: skip
    meta_speedup = times["scan"] / times["metadata"]
    report(
        f"(c) statistics of {len(COLUMNS)} columns, {args.rows:,} rows",
        [
            ("count/nulls/min/max from metadata", fmt_seconds(times["metadata"]), ""),
            ("the same by a full pyarrow scan", fmt_seconds(times["scan"]), ""),
            ("all statistics (one scan)", fmt_seconds(times["stats scan"]), "reference"),
            ("full scan / metadata", fmt_ratio(meta_speedup), "goal >= 20x"),
        ],
    )

    batches = t.read(list(SPEC)).to_batches(max_chunksize=65_536)
    pp.fit(t, SPEC, name="bench")

    def reused() -> int:
        fitted = pp.load(t, "bench")
        return sum(fitted.apply(b).num_rows for b in batches)

    def refitted() -> int:
        fitted = pp.fit(t, SPEC, name="bench")
        return sum(fitted.apply(b).num_rows for b in batches)

    assert reused() == refitted() == args.rows
    ptimes = time_interleaved(
        {"reused": reused, "refitted": refitted,
         "load": lambda: pp.load(t, "bench"), "fit": lambda: pp.fit(t, SPEC, name="bench")},
        repeats=args.repeats,
    )  # fmt: skip
    reuse_speedup = ptimes["refitted"] / ptimes["reused"]
    report(
        f"(d) one epoch's preprocessing of {len(SPEC)} columns, {args.rows:,} rows",
        [
            ("reused: load + apply", fmt_seconds(ptimes["reused"]), ""),
            ("refitted: fit + apply", fmt_seconds(ptimes["refitted"]), ""),
            ("load alone", fmt_seconds(ptimes["load"]), ""),
            ("fit alone", fmt_seconds(ptimes["fit"]), ""),
            ("refitted / reused (per epoch)", fmt_ratio(reuse_speedup), "HE3ML: 23x"),
            ("fit / load", fmt_ratio(ptimes["fit"] / ptimes["load"]), ""),
        ],
    )
    wh.close()
    shutil.rmtree(work, ignore_errors=True)
    return {"stats_metadata_speedup": meta_speedup, "preprocess_reuse_speedup": reuse_speedup}


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
