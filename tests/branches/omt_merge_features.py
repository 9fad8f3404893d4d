"""A pandas feature of two outputs (one file per fragment holds both), for the merge tests."""

from __future__ import annotations

import pandas as pd

import omnitable


@omnitable.feature(inputs=["s"], outputs={"s_chars": "int", "s_digits": "int"}, version="1")
def s_stats(s: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({"s_chars": s.str.len(), "s_digits": s.str.count(r"\d")})
