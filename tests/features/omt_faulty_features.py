"""Features that misbehave on marked records (for the fault-isolation tests).

A record's text decides its fate: ``RAISE`` raises, ``SLEEP`` never returns in time, ``MEM``
allocates far beyond the memory budget, ``SEGV`` segfaults the process, ``EXIT`` calls
``os._exit``, ``FLAKY:<path>`` raises while the file at <path> exists. Everything else scores
``len(text) / 2``.
"""

from __future__ import annotations

import ctypes
import os
import time

import pandas as pd

import omnitable


def _score_one(text: str) -> float:
    if "RAISE" in text:
        raise ValueError(f"cannot score {text[:20]!r}")
    if "SLEEP" in text:
        time.sleep(60)
    if "MEM" in text:
        blob = bytearray(4 * 1024**3)
        return float(len(blob))
    if "SEGV" in text:
        ctypes.string_at(0)
    if "EXIT" in text:
        os._exit(3)
    if text.startswith("FLAKY:") and os.path.exists(text[6:]):
        raise ConnectionError("transient: the scoring service is unavailable")
    return len(text) / 2


@omnitable.feature(
    inputs=["text"],
    outputs={"score": "double"},
    version="1",
    timeout_s=0.2,
    call_timeout_s=1.0,
    memory_mb=512,
    batch_rows=512,
)
def score(text: pd.Series) -> pd.Series:
    return pd.Series([_score_one(t) for t in text], dtype="float64")


score_each = omnitable.feature(
    inputs=["text"],
    outputs={"score": "double"},
    version="1",
    name="score",
    timeout_s=0.2,
    memory_mb=512,
    batch_rows=512,
    per_record=True,
)(_score_one)
"""``score`` as a per-record function: each bad record is found as it fails."""


@omnitable.feature(inputs=["text"], outputs={"n": "int", "half": "double"}, version="1")
def sized(text: pd.Series) -> pd.DataFrame:
    """``FLOAT`` records make ``n`` 1.5, ``HUGE`` ones 2**40: neither fits the declared int."""
    n = [1.5 if "FLOAT" in t else 2**40 if "HUGE" in t else len(t) for t in text]
    return pd.DataFrame({"n": n, "half": text.str.len() / 2})
