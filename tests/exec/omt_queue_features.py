"""Features the work-queue tests backfill (an importable module, as features must be)."""

from __future__ import annotations

import pandas as pd

import omnitable


@omnitable.feature(inputs=["text"], outputs={"clean": "string"}, version="1")
def clean(text: pd.Series) -> pd.Series:
    return text.str.strip().str.lower()


@omnitable.feature(inputs=["clean"], outputs={"n_chars": "int"}, version="1")
def n_chars(clean: pd.Series) -> pd.Series:
    return clean.str.len()
