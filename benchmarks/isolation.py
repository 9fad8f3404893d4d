"""Record-level isolation: overhead on clean data, cost of the child process, a dirty run.

Data: ROWS records (default 600,000) of short texts, cut in batches of BATCH (default 65,536,
the batch a backfill task hands to a pandas feature; ``--batch 10000`` is Spark's default Arrow
batch for plain pandas UDFs, where the fixed per-call cost weighs more). Two pandas features:
  * cheap: ``text.str.len()`` (vectorized, well under 1 µs a record);
  * moderate: per-record Python (lower-case, regex tokenize, distinct-token ratio), a few µs.
Prints, measured side by side in one run:
  1. overhead of the isolation wrapper on clean data, in-process, with a timeout and a memory
     budget armed: ``run_isolated`` and ``isolated(fn)`` vs calling the function (target <= 3 %);
  2. the subprocess mode: cost per batch vs in-process, zygote start and worker respawn;
  3. ROWS records with BAD_RATE (default 0.005 %) bad records of mixed kinds (exception,
     timeout, crash) through the moderate feature in one call sequence (subprocess mode: a
     crash needs the child), vs the clean run; plus the same without the hanging records.
     These run in batches of DIRTY_BATCH (default 10,000): a call's deadline
     (``call_timeout_s`` 0.25 s) must exceed the time a clean call takes, or clean batches
     would time out and be split too.

Run: ./dev bench isolation [--rows N] [--batch N] [--repeats N] [--bad-rate R] [--dirty-batch N]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import re
import time
import timeit
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.common import fmt_ratio, fmt_seconds, report

_WORD = re.compile(r"\w+")
_WORDS = ("the quick brown fox jumps over a lazy dog omni table spark arrow data record").split()  # noqa: SIM905


def cheap(text: pd.Series) -> pd.Series:
    return text.str.len()


def moderate(text: pd.Series) -> pd.Series:
    return text.map(_quality)


def _quality(doc: str) -> float:
    if doc.startswith("#"):  # injected bad records
        if doc.startswith("#raise"):
            raise ValueError("unparseable document")
        if doc.startswith("#sleep"):
            time.sleep(3600)
        if doc.startswith("#segv"):
            ctypes.string_at(0)
    tokens = _WORD.findall(doc.lower())
    return len(set(tokens)) / (1 + len(tokens))


def make_batches(rows: int, batch: int, seed: int = 0) -> list[pd.DataFrame]:
    rng = np.random.default_rng(seed)
    words = np.array(_WORDS, dtype=object)
    lengths = rng.integers(5, 30, rows)
    flat = words[rng.integers(0, len(words), int(lengths.sum()))]
    cuts = np.cumsum(lengths)[:-1]
    texts = [" ".join(p) for p in np.split(flat, cuts)]
    frame = pd.DataFrame({"text": pd.Series(texts, dtype="str")})
    return [frame.iloc[i : i + batch].reset_index(drop=True) for i in range(0, rows, batch)]


def plant(batches: list[pd.DataFrame], rate: float, seed: int = 1) -> dict[int, str]:
    """Overwrite about rate * rows records with bad ones, kinds in turn; returns row -> kind."""
    rows = sum(len(b) for b in batches)
    count = max(3, round(rows * rate))
    rng = np.random.default_rng(seed)
    kinds = ["raise", "sleep", "segv"]
    planted: dict[int, str] = {}
    for i, row in enumerate(sorted(rng.choice(rows, count, replace=False).tolist())):
        kind = kinds[i % len(kinds)]
        b, pos = divmod(row, len(batches[0]))
        batches[b].loc[pos, "text"] = f"#{kind} record {row}"
        planted[row] = kind
    return planted


def main(argv: list[str] | None = None) -> dict[str, float]:
    from omnitable.exec.isolation import IsolationPolicy, isolated, run_isolated
    from omnitable.exec.isolation_child import POOL, ChildSupervisor
    from omnitable.exec.isolation_worker import ZYGOTE

    parser = argparse.ArgumentParser(prog="isolation")
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--batch", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bad-rate", type=float, default=0.00005)
    parser.add_argument("--dirty-batch", type=int, default=10_000,
                        help="batch size of the dirty run (a clean call must beat 0.25 s)")  # fmt: skip
    parser.add_argument("--moderate-rows", type=int, default=100_000,
                        help="rows for the moderate feature's overhead measure")  # fmt: skip
    args = parser.parse_args(argv)

    batches = make_batches(args.rows, args.batch)
    guarded = IsolationPolicy(timeout_s=1.0, memory_mb=2048)
    out: dict[str, float] = {}

    # 1. overhead on clean data, in-process
    bare = IsolationPolicy()
    for name, fn, rows in (("cheap", cheap, args.rows), ("moderate", moderate, args.moderate_rows)):
        sample = batches[: max(1, rows // args.batch)]
        udf = isolated(fn, timeout_s=1.0, memory_mb=2048)
        times = paired(
            {
                "direct": lambda b, f=fn: f(*[c for _, c in b.items()]),
                "no budgets": lambda b, f=fn: run_isolated(f, b, output_names=["y"], policy=bare),
                "run_isolated": lambda b, f=fn: run_isolated(
                    f, b, output_names=["y"], policy=guarded
                ),
                "isolated(fn)": lambda b, u=udf: u(b["text"]),
            },
            sample,
            args.repeats,
        )
        n = sum(len(b) for b in sample)
        rows_out = [("direct call", fmt_seconds(times["direct"]), "")]
        for variant, label in (
            ("no budgets", "run_isolated, no budgets"),
            ("run_isolated", "run_isolated, timeout_s + memory_mb"),
            ("isolated(fn)", "isolated(fn) as UDF body, both budgets"),
        ):
            over = times[variant] / times["direct"] - 1
            per_batch = (times[variant] - times["direct"]) / len(sample) * 1e6
            out[f"{name}_{variant.replace(' ', '_').replace('(fn)', '')}_overhead_pct"] = over * 100
            rows_out.append((label, f"{over:+.1%}", f"{per_batch:+.0f} µs/batch; target <= 3 %"))
        report(
            f"overhead on clean data, {name} feature, {n:,} rows in {len(sample)} batches", rows_out
        )

    # 1a. what the wrapper itself costs per call: a function returning a ready result, so the
    # figure is the guard (alarm, memory cap, result check) alone, free of allocator noise
    sample = batches[0]
    ready = cheap(sample["text"])
    columns = [col for _, col in sample.items()]
    per_call = {}
    for label, pol in (("no budgets", bare), ("timeout_s + memory_mb", guarded)):
        call = functools.partial(
            run_isolated, lambda *_: ready, columns, output_names=["y"], policy=pol
        )
        per_call[label] = min(timeit.repeat(call, number=1000, repeat=5)) / 1000
    cheap_batch = min(timeit.repeat(lambda: cheap(sample["text"]), number=20, repeat=5)) / 20
    out["wrapper_us_per_call"] = per_call["timeout_s + memory_mb"] * 1e6
    report(
        f"the wrapper's own cost per call (batch of {len(sample):,})",
        [
            *[
                (label, f"{t * 1e6:.1f} µs", f"{t / cheap_batch:.2%} of a cheap batch")
                for label, t in per_call.items()
            ],
            ("the cheap feature's batch", f"{cheap_batch * 1e6:.0f} µs", ""),
        ],
    )

    # 1b. the cheap feature as Spark runs a pandas UDF batch: Arrow -> pandas -> fn -> Arrow
    arrow = [pa.RecordBatch.from_pandas(b, preserve_index=False) for b in batches]
    udf = isolated(cheap, timeout_s=1.0, memory_mb=2048)
    times = paired(
        {
            "direct": lambda rb: pa.array(cheap(rb.column(0).to_pandas()), type=pa.int64()),
            "isolated(fn)": lambda rb: pa.array(udf(rb.column(0).to_pandas()), type=pa.int64()),
        },
        arrow,
        args.repeats,
    )
    over = times["isolated(fn)"] / times["direct"] - 1
    out["cheap_udf_batch_overhead_pct"] = over * 100
    report(
        f"cheap feature as a pandas UDF batch (with Arrow conversions), {len(arrow)} batches",
        [
            ("direct", fmt_seconds(times["direct"]), ""),
            ("isolated(fn), both budgets", fmt_seconds(times["isolated(fn)"]), ""),
            ("overhead", f"{over:+.1%}", "target <= 3 %"),
        ],
    )

    # 2. the child process
    POOL.close_all()
    ZYGOTE.close()
    start = time.perf_counter()
    sup = ChildSupervisor()
    sup._start()
    zygote_start = time.perf_counter() - start
    sup.close()
    start = time.perf_counter()
    for _ in range(10):
        sup = ChildSupervisor()
        sup._start()
        sup.close()
    respawn = (time.perf_counter() - start) / 10
    sub = IsolationPolicy(mode="subprocess", timeout_s=1.0, memory_mb=2048)
    times = paired(
        {
            "inprocess": lambda b: run_isolated(cheap, b, output_names=["y"], policy=guarded),
            "subprocess": lambda b: run_isolated(cheap, b, output_names=["y"], policy=sub),
        },
        batches,
        args.repeats,
    )
    per_batch = (times["subprocess"] - times["inprocess"]) / len(batches)
    out.update(zygote_start_s=zygote_start, respawn_ms=respawn * 1000,
               subprocess_ms_per_batch=per_batch * 1000)  # fmt: skip
    report(
        f"subprocess mode (cheap feature, {len(batches)} batches of {args.batch:,})",
        [
            ("zygote start (once per process)", fmt_seconds(zygote_start), ""),
            ("worker fork + stop (each respawn)", fmt_seconds(respawn), ""),
            ("in-process run", fmt_seconds(times["inprocess"]), ""),
            ("subprocess run", fmt_seconds(times["subprocess"]), ""),
            ("extra cost per batch", f"{per_batch * 1000:.2f} ms", "data to the child and back"),
            ("subprocess / in-process", fmt_ratio(times["subprocess"] / times["inprocess"]), ""),
        ],
    )

    # 3. a dirty run
    batches = make_batches(args.rows, args.dirty_batch)
    dirty_batches = [b.copy() for b in batches]
    planted = plant(dirty_batches, args.bad_rate)
    no_timeouts = [b.copy() for b in batches]
    for row, kind in planted.items():
        if kind != "sleep":
            b, pos = divmod(row, args.dirty_batch)
            no_timeouts[b].loc[pos, "text"] = dirty_batches[b].loc[pos, "text"]
    budget = {"timeout_s": 0.05, "call_timeout_s": 0.25, "memory_mb": 2048}
    runs: dict[str, tuple[float, Counter[str]]] = {}
    for label, data, mode in (
        ("clean, in-process", batches, "auto"),
        ("clean, subprocess", batches, "subprocess"),
        ("dirty, subprocess", dirty_batches, "subprocess"),
        ("dirty without the timeouts, subprocess", no_timeouts, "subprocess"),
    ):
        pol = IsolationPolicy(mode=mode, **budget)  # type: ignore[arg-type]
        start = time.perf_counter()
        kinds: Counter[str] = Counter()
        for b in data:
            kinds.update(
                f.kind for f in run_isolated(moderate, b, output_names=["y"], policy=pol).failures
            )
        runs[label] = (time.perf_counter() - start, kinds)
    expected = Counter(
        {"raise": "exception", "sleep": "timeout", "segv": "crash"}[k] for k in planted.values()
    )
    assert runs["dirty, subprocess"][1] == expected, (runs["dirty, subprocess"][1], expected)
    clean_in, clean_sub = runs["clean, in-process"][0], runs["clean, subprocess"][0]
    dirty, no_wait = runs["dirty, subprocess"][0], runs["dirty without the timeouts, subprocess"][0]
    out.update(
        dirty_bad_records=float(len(planted)),
        dirty_vs_clean_inprocess=dirty / clean_in,
        dirty_vs_clean_subprocess=dirty / clean_sub,
        dirty_without_timeouts_vs_clean_subprocess=no_wait / clean_sub,
    )
    report(
        f"dirty run: {args.rows:,} rows in batches of {args.dirty_batch:,}, {len(planted)} bad "
        f"({dict(expected)}), moderate feature, timeout_s={budget['timeout_s']}, call_timeout_s={budget['call_timeout_s']}",
        [
            *[(label, fmt_seconds(t), str(dict(k))) for label, (t, k) in runs.items()],
            ("dirty (subprocess) / clean in-process", fmt_ratio(dirty / clean_in), "completes"),
            ("dirty (subprocess) / clean subprocess", fmt_ratio(dirty / clean_sub), ""),
            ("w/o timeouts / clean subprocess", fmt_ratio(no_wait / clean_sub), "bisection"),
            ("time spent on the timeouts", fmt_seconds(dirty - no_wait), "deadline waits"),
        ],
    )
    return out


def paired(
    variants: dict[str, Callable[[Any], Any]], batches: list[Any], repeats: int
) -> dict[str, float]:
    """Seconds per variant: the sum over batches of its fastest of ``repeats`` runs.

    Variants run one after the other on the same batch, in alternating order, so that drift
    and bursts of load from other processes on a shared machine hit them alike; the minimum
    per batch drops the bursts.
    """
    names = list(variants)
    best = {name: [float("inf")] * len(batches) for name in names}
    for fn in variants.values():  # warm-up
        fn(batches[0])
    for rep in range(repeats):
        for i, batch in enumerate(batches):
            for name in names if (rep + i) % 2 == 0 else names[::-1]:
                start = time.perf_counter()
                variants[name](batch)
                best[name][i] = min(best[name][i], time.perf_counter() - start)
    return {name: sum(times) for name, times in best.items()}


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
