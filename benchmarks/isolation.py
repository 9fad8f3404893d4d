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
  3. ROWS records with BAD_RATE (default 0.005 %) bad records of every kind (exception,
     hang, segfault, memory, a value that is not a double) through the moderate feature on
     the backfill task's path (``compute_feature``: isolation, then conversion to the declared
     type), in the child process as after a crash escalation, vs the clean time (the fastest
     clean in-process run); the ratio subtracts the hanging records' own deadlines. The
     feature runs in both its forms: vectorized (``text.map(_quality)``; bad records found by
     bisection; the deadlines subtracted are the budgets of the calls that held each hanging
     record) and per-record (``per_record=True`` on ``_quality``; each bad record found as it
     fails; the deadline subtracted is each hanging record's ``timeout_s``). Batches of
     DIRTY_BATCH (default 10,000): a call's deadline (``call_timeout_s`` 0.25 s) must exceed
     the time a clean call takes, or clean batches would time out too. Pinned to one CPU
     (child processes too) and interleaved fragment by fragment (see ``dirty_run``).
  4. SPARK_ROWS (default 200,000; 0 skips it) records backfilled in a ``local[2]`` session
     (one attempt per task): clean vs with SPARK_CRASHES (default 3) segfaulting records, which
     the driver escalates.

Run: ./dev bench isolation [--rows N] [--batch N] [--repeats N] [--bad-rate R] [--dirty-batch N]
     [--spark-rows N] [--spark-crashes N]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import re
import time
import timeit
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.common import fmt_ratio, fmt_seconds, report, rounds, smoke
from omnitable.isolation import CallSizing

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
        if doc.startswith("#memory"):
            return float(len(bytearray(8 * 1024**3)))
        if doc.startswith("#type"):
            return "n/a"  # type: ignore[return-value]  # not a double: fails the conversion
    tokens = _WORD.findall(doc.lower())
    return len(set(tokens)) / (1 + len(tokens))


PLANTED = {  # injected record -> the kind of failure it must be recorded as
    "raise": "exception",
    "sleep": "timeout",
    "segv": "crash",
    "memory": "memory",
    "type": "type",
}
DIRTY_BUDGET = {"timeout_s": 0.05, "call_timeout_s": 0.25, "memory_mb": 2048}
"""Budgets of the dirty runs; ``call_timeout_s`` is raised to 4x a clean call's time when the
machine is slower than that (a clean call must never time out, see docs/isolation.md)."""

CRASH_BUDGET = {"timeout_s": 5.0, "call_timeout_s": 60.0, "memory_mb": 2048}
"""Budgets of the Spark crash run. It measures what segfaults cost, and a segfault is found by
bisection without waiting for any deadline, so its deadlines sit far above a clean call's time.
With DIRTY_BUDGET's 0.05 s per record the run once counted four failures for three crashes on a
loaded CI machine, most likely a clean record stalled past its deadline."""


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
    count = max(len(PLANTED), round(rows * rate))
    rng = np.random.default_rng(seed)
    kinds = list(PLANTED)
    planted: dict[int, str] = {}
    for i, row in enumerate(sorted(rng.choice(rows, count, replace=False).tolist())):
        kind = kinds[i % len(kinds)]
        b, pos = divmod(row, len(batches[0]))
        batches[b].loc[pos, "text"] = f"#{kind} record {row}"
        planted[row] = kind
    return planted


def main(argv: list[str] | None = None) -> dict[str, float]:
    from omnitable.isolation import IsolationPolicy, isolated, run_isolated
    from omnitable.isolation.supervisor import POOL, ZYGOTE, ChildSupervisor

    parser = argparse.ArgumentParser(prog="isolation")
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--batch", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bad-rate", type=float, default=0.00005)
    parser.add_argument("--dirty-batch", type=int, default=10_000,
                        help="batch size of the dirty run (a clean call must beat 0.25 s)")  # fmt: skip
    parser.add_argument("--spark-rows", type=int, default=200_000,
                        help="rows of the Spark crash-escalation run (0: skip it)")  # fmt: skip
    parser.add_argument("--spark-crashes", type=int, default=3,
                        help="segfaulting records of the Spark crash-escalation run")  # fmt: skip
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
        calls = rounds(1000)
        per_call[label] = min(timeit.repeat(call, number=calls, repeat=rounds(5))) / calls
    calls = rounds(20)
    cheap_batch = (
        min(timeit.repeat(lambda: cheap(sample["text"]), number=calls, repeat=rounds(5))) / calls
    )
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
    for _ in range(rounds(10)):
        sup = ChildSupervisor()
        sup._start()
        sup.close()
    respawn = (time.perf_counter() - start) / rounds(10)
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

    out.update(dirty_run(args.rows, args.dirty_batch, args.bad_rate, args.repeats))
    if args.spark_rows:
        out.update(spark_crash_run(args.spark_rows, args.dirty_batch, args.spark_crashes))
    return out


def dirty_run(rows: int, batch: int, bad_rate: float, repeats: int) -> dict[str, float]:
    """3. The backfill task's path (isolation + conversion to the declared type, per fragment)
    over clean data and over data with bad records of every kind, interleaved: the moderate
    feature as a vectorized function (bad records found by bisection) and as a per-record
    function (``per_record=True``: found by the loop that runs the records).

    The run is pinned to one CPU, its child processes too (started afresh under the pin), as a
    Spark task's Python worker and its isolation child share the task's core: on the shared
    2-core machine the two cores' speeds differed by up to 60 % at times, so a child landing
    on the other core made the comparison with the in-process runs a coin toss."""
    from omnitable.isolation.supervisor import POOL, ZYGOTE

    cpus = os.sched_getaffinity(0)
    POOL.close_all()
    ZYGOTE.close()
    os.sched_setaffinity(0, {min(cpus)})
    try:
        return _dirty_run(rows, batch, bad_rate, repeats, min(cpus))
    finally:
        os.sched_setaffinity(0, cpus)
        POOL.close_all()
        ZYGOTE.close()


def _dirty_run(rows: int, batch: int, bad_rate: float, repeats: int, cpu: int) -> dict[str, float]:
    from unittest import mock

    from omnitable.exec import task

    clean = pa.Table.from_pandas(pd.concat(make_batches(rows, rows)), preserve_index=False)
    dirty_frames = make_batches(rows, rows)
    planted = plant(dirty_frames, bad_rate)
    dirty = pa.Table.from_pandas(pd.concat(dirty_frames), preserve_index=False)
    budget = sized_budget(clean.slice(0, batch))
    vector = _moderate_feature(batch, budget)
    records = _moderate_feature(batch, budget, per_record=True)
    fragment = 50_000
    per_fragment = -(-fragment // batch)  # batches per fragment
    first_crash = min(row for row, kind in planted.items() if kind == "segv") // fragment
    variants = {  # (feature, data, fragments from which the child process runs, adaptive size)
        "clean, in-process": (vector, clean, None, True),
        "clean, child process": (vector, clean, 0, True),
        "dirty, child process (as after a crash)": (vector, dirty, 0, True),
        "dirty, child process, whole-batch calls": (vector, dirty, 0, False),
        "dirty, in-process until the first crash": (vector, dirty, first_crash, True),
        "per-record: clean, in-process": (records, clean, None, True),
        "per-record: clean, child process": (records, clean, 0, True),
        "per-record: dirty, child process (as after a crash)": (records, dirty, 0, True),
        "per-record: dirty, in-process until the first crash": (records, dirty, first_crash, True),
    }
    fragments = [
        (lo, pa.array(np.arange(lo, lo + min(fragment, rows - lo))))
        for lo in range(0, rows, fragment)
    ]
    fastest = {name: [float("inf")] * len(fragments) for name in variants}
    waits: dict[str, float] = {}
    slow = [n for n, v in variants.items() if v[0] is vector and v[1] is dirty]
    for rep in range(max(1, min(repeats, 5))):
        # the vectorized dirty runs (bisection, 12-15 s each) in three rounds; the others, a
        # few seconds each, in up to five, for a steadier minimum on a noisy machine
        names = [n for n in variants if rep < 3 or n not in slow]
        # a fresh call-size state per run (None: one first call per batch, as before adaptive
        # sizing), recording the first call size of every batch
        sizings = {n: _RecordingSizing() if variants[n][3] else None for n in names}
        found: dict[str, Counter[str]] = {n: Counter() for n in names}
        # fragment by fragment, every variant in turn (alternating order): the machine's
        # slow spells, tens of seconds long, then hit all variants alike
        for i, (lo, ids) in enumerate(fragments):
            for name in names if (rep + i) % 2 == 0 else names[::-1]:
                feature, data, child_from, _ = variants[name]
                part = data.slice(lo, len(ids)).append_column("_ai_unique_id_", ids)
                child = child_from is not None and i >= child_from
                with mock.patch.object(task, "_sizing", lambda fn, s=sizings[name]: s):
                    start = time.perf_counter()
                    _, failures, _ = task.compute_feature(feature, part, {}, "auto", child, None)
                    took = time.perf_counter() - start
                fastest[name][i] = min(fastest[name][i], took)
                found[name].update(f["kind"] for f in failures)
        for name in names:
            feature, data, _, _ = variants[name]
            if data is dirty:
                waits[name] = _hang_deadlines(planted, budget, feature is records, sizings[name],
                                              per_fragment, fragment, batch)  # fmt: skip
                expected = Counter(PLANTED[k] for k in planted.values())
                assert found[name] == expected, (name, found[name], expected)
    best = {name: sum(times) for name, times in fastest.items()}
    # the clean time: the fastest clean in-process run, of either form of the feature
    t_clean = min(best["clean, in-process"], best["per-record: clean, in-process"])
    ratios = {name: (best[name] - waits[name]) / t_clean for name in variants if "dirty" in name}
    report(
        f"dirty run: {rows:,} records in batches of {batch:,}, {len(planted)} bad "
        f"({dict(Counter(planted.values()))}), moderate feature, timeout_s={budget['timeout_s']}, "
        f"call_timeout_s={budget['call_timeout_s']:.3g}; the backfill task's path "
        "(isolation + type conversion), each the sum over fragments of the fastest of its "
        "interleaved runs of the fragment; first crash in fragment "
        f"{first_crash} of {-(-rows // fragment)}; every ratio is over the clean time, the "
        f"fastest clean in-process run of either form; pinned to CPU {cpu}, children too",
        [
            *[(label, fmt_seconds(t), "") for label, t in best.items()],
            *[(f"(- {fmt_seconds(waits[n])} deadlines) / clean in-process: {n}", fmt_ratio(r),
               "target <= 1.2x") for n, r in ratios.items()],
            ("child process / in-process, clean, vectorized",
             fmt_ratio(best["clean, child process"] / best["clean, in-process"]), ""),
            ("per-record / vectorized, clean in-process",
             fmt_ratio(best["per-record: clean, in-process"] / best["clean, in-process"]), ""),
            ("child process / in-process, clean, per-record",
             fmt_ratio(best["per-record: clean, child process"]
                       / best["per-record: clean, in-process"]), ""),
        ],
    )  # fmt: skip
    return {
        "dirty_bad_records": float(len(planted)),
        "dirty_minus_deadlines_vs_clean": ratios["dirty, child process (as after a crash)"],
        "dirty_whole_batch_calls_vs_clean": ratios["dirty, child process, whole-batch calls"],
        "dirty_real_flow_vs_clean": ratios["dirty, in-process until the first crash"],
        "dirty_deadlines_s": waits["dirty, child process (as after a crash)"],
        "clean_child_vs_inprocess": best["clean, child process"] / best["clean, in-process"],
        "per_record_dirty_vs_clean": ratios["per-record: dirty, child process (as after a crash)"],
        "per_record_real_flow_vs_clean": ratios[
            "per-record: dirty, in-process until the first crash"
        ],
        "per_record_clean_vs_vectorized": (
            best["per-record: clean, in-process"] / best["clean, in-process"]
        ),
        "per_record_clean_child_vs_inprocess": (
            best["per-record: clean, child process"] / best["per-record: clean, in-process"]
        ),
    }


def _hang_deadlines(
    planted: dict[int, str],
    budget: dict[str, Any],
    per_record: bool,
    sizing: _RecordingSizing | None,
    per_fragment: int,
    fragment: int,
    batch: int,
) -> float:
    """Seconds the hanging records' own deadlines account for in a dirty run: per-record, each
    record's budget (``timeout_s``); vectorized, the budgets of the calls that held it, from
    the first call size of its batch as recorded during the run down to itself."""
    hangs = [row for row, kind in planted.items() if kind == "sleep"]
    if per_record:
        return len(hangs) * float(budget["timeout_s"])
    sizes = sizing.sizes if sizing is not None else []
    return sum(
        deadline_chain(
            sizes[per_fragment * (row // fragment) + row % fragment // batch] if sizes else batch,
            budget,
        )
        for row in hangs
    )


def spark_crash_run(rows: int, batch: int, crashes: int = 3) -> dict[str, float]:
    """4. What a crash costs a real backfill in local mode (``local[2]``: one attempt per
    task, so the driver escalates): the moderate feature over clean data and over the same
    data with ``crashes`` segfaulting records, fresh tables each time, interleaved."""
    import shutil

    import omnitable
    from benchmarks.common import BENCH_DIR
    from omnitable.exec.escalation import TaskProgress

    work = BENCH_DIR / "isolation"
    shutil.rmtree(work, ignore_errors=True)
    wh = omnitable.connect(work / "wh")
    frames = make_batches(rows, rows)
    clean = pa.Table.from_pandas(frames[0], preserve_index=False)
    bad = frames[0].copy()
    rng = np.random.default_rng(2)
    for pos in rng.choice(rows, crashes, replace=False).tolist():
        bad.loc[pos, "text"] = f"#segv record {pos}"
    data = {"clean": clean, "crashing": pa.Table.from_pandas(bad, preserve_index=False)}
    spark = omnitable.spark_session(
        wh, master="local[2]",
        **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    )  # fmt: skip
    spark.sparkContext.setLogLevel("OFF")
    feature = _moderate_feature(batch, CRASH_BUDGET)
    best: dict[str, float] = {}
    escalated: list[str] = []
    warm = 0 if smoke() else 1  # the first round warms up the JVM and the workers
    for rep in range(warm + rounds(2)):
        for name in ("clean", "crashing") if rep % 2 else ("crashing", "clean"):
            t = wh.create_table(f"{name}{rep}", {"text": "string"})
            t.append(data[name], "b0", target_fragment_rows=25_000)
            t.register(feature)
            start = time.perf_counter()
            result = t.backfill("moderate").run(spark)
            elapsed = time.perf_counter() - start
            if rep >= warm:
                best[name] = min(best.get(name, float("inf")), elapsed)
            if name == "crashing":
                _check_crashes(t, spark, result.errors, crashes)
                escalated = result.steps[0].escalated
    spark.stop()
    marks = TaskProgress((work / "marks").as_uri())
    start = time.perf_counter()
    for i in range(200):
        with marks.batch("moderate", "fragment", i):
            pass
    per_mark = (time.perf_counter() - start) / 200
    marks.clear()
    extra = best["crashing"] - best["clean"]
    report(
        f"crash escalation in a local[2] backfill: {rows:,} records in fragments of 25,000, "
        f"{crashes} segfaulting records, moderate feature, fastest of 2 interleaved runs",
        [
            ("clean backfill", fmt_seconds(best["clean"]), ""),
            ("with the crashing records", fmt_seconds(best["crashing"]), f"escalated {escalated}"),
            ("cost of the crashes", fmt_seconds(extra), fmt_ratio(best["crashing"] / best["clean"])),
            ("clean-data cost: progress mark per batch", f"{per_mark * 1e6:.0f} µs", "written + removed"),
        ],
    )  # fmt: skip
    return {
        "spark_crash_extra_s": extra,
        "spark_crash_ratio": best["crashing"] / best["clean"],
        "progress_mark_us": per_mark * 1e6,
    }


def _check_crashes(table: Any, spark: Any, errors: dict[str, int], crashes: int) -> None:
    """Fail with the error table's rows unless the run isolated exactly ``crashes`` crashes."""
    if errors == {"moderate@1": crashes}:
        return
    rows = table.errors(spark=spark).select("kind", "message").limit(20).collect()
    raise AssertionError(f"expected {crashes} crashes of moderate@1, got {errors}: {rows}")


class _RecordingSizing(CallSizing):
    """A :class:`CallSizing` that records the first call size of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def initial(self, n: int) -> list[tuple[int, int]]:
        calls = super().initial(n)
        self.sizes.append(calls[0][1] - calls[0][0])
        return calls


SMOKE_TIMEOUT_S = 0.25
"""``timeout_s`` of the dirty run in the smoke tests: a record alone (bisection's last step) is
held to it, and a loaded CI machine can stall a clean record past 0.05 s (the smoke's figures
mean nothing; its check that every record is recorded with its kind must not flake)."""


def sized_budget(sample: pa.Table) -> dict[str, Any]:
    """DIRTY_BUDGET with ``call_timeout_s`` at least 4x the time of a clean call on ``sample``
    (and ``timeout_s`` at SMOKE_TIMEOUT_S in a smoke run)."""
    text = sample.column("text").to_pandas()
    took = min(timeit.repeat(lambda: moderate(text), number=1, repeat=3))
    timeout_s = SMOKE_TIMEOUT_S if smoke() else DIRTY_BUDGET["timeout_s"]
    cap = max(DIRTY_BUDGET["call_timeout_s"], 4 * took, timeout_s)
    return dict(DIRTY_BUDGET, timeout_s=timeout_s, call_timeout_s=cap)


def deadline_chain(batch: int, budget: dict[str, Any]) -> float:
    """Seconds a record that never returns costs: the budgets of the calls that contain it,
    from the whole batch down to itself (bisection in parts of ``split_factor``)."""
    from omnitable.isolation import IsolationPolicy

    policy = IsolationPolicy(**budget)
    total, size = 0.0, batch
    while True:
        total += policy.budget_s(size) or 0.0
        if size == 1:
            return total
        size = -(-size // policy.split_factor)


def _moderate_feature(batch: int, budget: dict[str, Any], per_record: bool = False) -> Any:
    """The moderate feature: vectorized (``text.map(_quality)``), or ``_quality`` itself as a
    per-record function."""
    import omnitable

    return omnitable.feature(
        inputs=["text"], outputs={"y": "double"}, version="1", name="moderate", batch_rows=batch,
        per_record=per_record, **budget,
    )(_quality if per_record else moderate)  # fmt: skip


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
    for fn in variants.values() if not smoke() else ():  # warm-up
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
