"""A pandas feature that fails the job on marked records when isolation is off (a deleted
record must never reach it)."""

from __future__ import annotations

import pandas as pd

import omnitable


@omnitable.feature(inputs=["text"], outputs={"n_chars": "int"}, version="1")
def n_chars(text: pd.Series) -> pd.Series:
    if text.str.contains("POISON", regex=False).any():
        raise ValueError("a poisoned record reached the feature")
    return text.str.len()
