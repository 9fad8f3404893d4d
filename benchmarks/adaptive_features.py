"""A mixed plan for the adaptive benchmark: an SQL feature, a pandas feature and a model-like
pandas feature (a small MLP forward pass per batch, numpy only), all reading ``x``."""

from __future__ import annotations

import numpy as np
import pandas as pd

from omnitable.features.definition import feature, sql_feature

affine = sql_feature("affine", "x * 2.0 + 1.0", "double", version="1", inputs=["x"])


@feature(inputs=["x"], outputs={"squashed": "double"}, version="1")
def squashed(x: pd.Series) -> pd.Series:
    return np.log1p(x.abs()) * np.sign(x)


_RNG = np.random.default_rng(7)
_W1 = _RNG.standard_normal((1, 64))
_W2 = _RNG.standard_normal((64, 64)) / 8.0
_W3 = _RNG.standard_normal((64, 1)) / 8.0


@feature(inputs=["x"], outputs={"score": "double"}, version="1", prefer="gpu")
def score(x: pd.Series) -> pd.Series:
    h = np.tanh(x.to_numpy().reshape(-1, 1) @ _W1)
    h = np.maximum(h @ _W2, 0.0)
    return pd.Series((h @ _W3).ravel())


ALL = [affine, squashed, score]
