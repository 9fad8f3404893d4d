"""Features of the routing and tuning tests (an importable module, as features must be)."""

from __future__ import annotations

import numpy as np
import pandas as pd

import omnitable

doubled = omnitable.sql_feature("doubled", "x * 2", "double", version="1", inputs=["x"])


@omnitable.feature(inputs=["x"], outputs={"scaled": "double"}, version="1")
def scaled(x: pd.Series) -> pd.Series:
    return x * 0.5


@omnitable.feature(inputs=["x"], outputs={"embedded": "double"}, version="1", prefer="gpu")
def embedded(x: pd.Series) -> pd.Series:
    """A model-like feature: a small matrix multiply per batch."""
    w = np.linspace(0.0, 1.0, 16)
    return pd.Series((np.outer(x.to_numpy(), w) @ w).astype("float64"))
