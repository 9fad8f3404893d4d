"""Models and model features for tests/models/test_model_features.py (importable by Spark's
Python workers, so features are stored by reference).

Each feature also outputs the rows of the model call that computed it (``rows``) and the worker
process (``pid``), so the tests see the micro-batching and the per-process loading.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

import omnitable


class CountingLinear:
    """``predict(X) = X @ w + b``; every unpickling (a load) appends the process id to
    ``counter`` (a file path), so a test counts loads per worker process."""

    def __init__(self, w: list[float], b: float, counter: str) -> None:
        self.w, self.b, self.counter = np.asarray(w, dtype=np.float64), float(b), counter

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        with open(self.counter, "a", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")

    def predict(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x @ self.w + self.b)


def _with_call(y: Any, n: int) -> pd.DataFrame:
    return pd.DataFrame({"y": np.asarray(y, dtype=np.float64), "rows": n, "pid": os.getpid()})


@omnitable.model_feature(
    model="counting@1",
    inputs=["x1", "x2"],
    outputs={"y": "double", "rows": "int", "pid": "int"},
    version="1",
    batch_size=32,
)
def linear(model: CountingLinear, x1: pd.Series, x2: pd.Series) -> pd.DataFrame:
    return _with_call(model.predict(np.stack([x1.to_numpy(), x2.to_numpy()], axis=1)), len(x1))


@omnitable.model_feature(
    model="mlp@1", inputs=["x1", "x2"], outputs={"score": "double"}, version="1", prefer="gpu"
)
def mlp_score(model: Any, x1: pd.Series, x2: pd.Series) -> Any:
    import torch

    x = torch.tensor(np.stack([x1.to_numpy(), x2.to_numpy()], axis=1), dtype=torch.float32)
    x = x.to(next(model.parameters()).device)  # prefer="gpu": the model is on CUDA if any
    with torch.no_grad():
        return model(x)[:, 0].double()  # a tensor: converted to the output column


@omnitable.model_feature(
    model="fragile@1", inputs=["x1"], outputs={"fragile_y": "double"}, version="1", batch_size=64
)
def fragile(model: CountingLinear, x1: pd.Series) -> pd.Series:
    if (x1 == 13).any():
        raise ValueError("the model cannot score 13")
    return pd.Series(x1.to_numpy() * model.w[0])


@omnitable.model_feature(
    model="oom@1",
    inputs=["x1"],
    outputs={"oom_y": "double", "oom_rows": "int"},
    version="1",
    batch_size=64,
)
def oom(model: CountingLinear, x1: pd.Series) -> pd.DataFrame:
    if len(x1) > 8:
        raise MemoryError(f"simulated: {len(x1)} rows do not fit")
    return pd.DataFrame({"oom_y": x1.to_numpy() * model.w[0], "oom_rows": len(x1)})


@omnitable.model_feature(
    model="corrupt@1", inputs=["x1"], outputs={"y": "double"}, version="1", batch_size=64
)
def corrupt(model: CountingLinear, x1: pd.Series) -> pd.Series:
    return pd.Series(x1.to_numpy() * model.w[0])


@omnitable.model_feature(model="nowhere@1", inputs=["x1"], outputs={"y": "double"}, version="1")
def unknown(model: Any, x1: pd.Series) -> pd.Series:
    return x1


WORKER_OPTION = "OMNITABLE_TEST_WORKER_OPTION"  # set in the Spark workers' environment (conftest)
UNSET_OPTION = "OMNITABLE_TEST_UNSET_OPTION"  # set nowhere


@omnitable.model_feature(
    model="remote@1",
    inputs=["x1"],
    outputs={"y": "double"},
    version="1",
    storage_options={"skip_instance_cache": f"env:{WORKER_OPTION}"},
)
def remote(model: CountingLinear, x1: pd.Series) -> pd.Series:
    return pd.Series(x1.to_numpy() * model.w[0])


@omnitable.model_feature(
    model="remote@2",
    inputs=["x1"],
    outputs={"y": "double"},
    version="1",
    name="remote_unset",
    storage_options={"skip_instance_cache": f"env:{UNSET_OPTION}"},
)
def remote_unset(model: CountingLinear, x1: pd.Series) -> pd.Series:
    return pd.Series(x1.to_numpy() * model.w[0])
