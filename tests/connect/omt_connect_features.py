"""Features of the session-parity tests (an importable module, as features must be)."""

from __future__ import annotations

import pandas as pd

import omnitable


@omnitable.feature(inputs=["text"], outputs={"n_chars": "int"}, version="1")
def n_chars(text: pd.Series) -> pd.Series:
    return text.str.len()


def _score_one(text: str) -> float:
    if text.startswith("BAD"):
        raise ValueError(f"cannot score {text!r}")
    return len(text) / 2


@omnitable.feature(inputs=["text"], outputs={"score": "double"}, version="1")
def score(text: pd.Series) -> pd.Series:
    return text.map(_score_one)
