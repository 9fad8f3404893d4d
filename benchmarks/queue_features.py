"""A CPU-bound pandas feature (for the work-queue benchmark): a Python loop per record."""

from __future__ import annotations

import math

import pandas as pd

from omnitable.features.definition import feature

LOOP = 2000  # iterations per record (~0.2 ms of one core)


def _score(value: float) -> float:
    return sum(math.sqrt(value + i) for i in range(LOOP))


@feature(inputs=["x"], outputs={"heavy": "double"}, version="1")
def heavy(x: pd.Series) -> pd.Series:
    return x.map(_score).astype("float64")
