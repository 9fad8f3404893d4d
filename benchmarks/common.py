"""Shared helpers for benchmarks: side-by-side timing and ratio reports.

Machines are shared and noisy, so every benchmark times its variants interleaved in one run and
reports medians and ratios, never absolute thresholds.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH_DIR = Path(
    os.environ.get("OMNITABLE_BENCH_DIR") or Path(__file__).resolve().parent.parent / ".bench"
)
"""Where benchmarks write their data (``OMNITABLE_BENCH_DIR``, default ``.bench/`` in the repo)."""

SMOKE_ENV = "OMNITABLE_BENCH_SMOKE"
"""Set to ``1`` by ``run.py --smoke`` (and inherited by a benchmark's worker processes)."""


def smoke() -> bool:
    """Whether this is a smoke run: every timed section runs once, the figures mean nothing."""
    return os.environ.get(SMOKE_ENV) == "1"


def rounds(n: int) -> int:
    """How many times to repeat a measurement that a full run repeats ``n`` times (1 in smoke)."""
    return 1 if smoke() else n


def time_interleaved(
    variants: dict[str, Callable[[], Any]],
    repeats: int = 5,
    warmup: int = 1,
    *,
    shuffle: bool = False,
) -> dict[str, float]:
    """Median wall time per variant, running the variants round-robin ``repeats`` times (after
    ``warmup`` untimed rounds; a smoke run times one round and warms nothing up).

    ``shuffle``: each round runs the variants in a new order (seeded), for variants that do not
    depend on each other's order. Otherwise the first always runs right after the last, and on
    2 cores a read of a few ms pays for what the read before it left running (a thread pool
    winding down): 0.5-0.9 ms measured for a read after pyarrow's."""
    if smoke():
        repeats, warmup = 1, 0
    for _ in range(warmup):
        for fn in variants.values():
            fn()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    order = random.Random(0)
    for _ in range(repeats):
        names = list(variants)
        if shuffle:
            order.shuffle(names)
        for name in names:
            fn = variants[name]
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in samples.items()}


def report(title: str, rows: list[tuple[str, str, str]]) -> None:
    """Print a small aligned table of (measure, value, target) rows."""
    print(f"\n== {title}")
    width = max(len(r[0]) for r in rows)
    for measure, value, target in rows:
        print(f"  {measure:<{width}}  {value:>14}  {target}")


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}x"


def fmt_seconds(x: float) -> str:
    if x < 0.1:
        return f"{x * 1000:.1f} ms"
    return f"{x * 1000:.0f} ms" if x < 10 else f"{x:.1f} s"


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} GB"
