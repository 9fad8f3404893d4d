"""The pandas models of an append and of an upsert, shared by the property tests of data
operations."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

import omnitable


def upsert_like_the_model(
    t: omnitable.Table,
    model: pd.DataFrame,
    xs: list[int],
    i: int,
    seed: int,
    size: int,
    batch: str | None = None,
) -> pd.DataFrame:
    """Upsert ``size`` keys x drawn from ``xs`` (live, deleted and new ones) with y = p<i>-<x>
    under a random built-in policy, new rows in batch ``batch``; returns ``model`` (columns x,
    y, and batch when given) after it: append_list replaces the scalar y."""
    rng = np.random.default_rng(seed)
    policy = str(rng.choice(["first_write_wins", "last_write_wins", "append_list"]))
    keys = [int(x) for x in rng.choice(xs, min(size, len(xs)), replace=False)]
    new = {x: f"p{i}-{x}" for x in keys}
    data = pa.table({"x": pa.array(keys, pa.int64()), "y": list(new.values())})
    t.upsert(data, policy, append_name=batch)
    stored = set(model.x)
    if policy != "first_write_wins":
        model = model.assign(y=[new.get(x, y) for x, y in zip(model.x, model.y, strict=True)])
    added = pd.DataFrame({"x": [x for x in keys if x not in stored]})
    added["y"] = [new[x] for x in added.x]
    if batch is not None:
        added["batch"] = batch
    return pd.concat([model, added])


def append_like_the_model(
    t: omnitable.Table,
    model: pd.DataFrame,
    i: int,
    size: int,
    fragment_rows: int,
    keyed: bool,
    with_batch: bool = False,
) -> pd.DataFrame:
    """Append x = i*100 ... i*100+size-1 with y = v<x> as batch b<i> (on a keyed table: an
    upsert of those new keys); returns ``model`` after it (with a batch column when asked)."""
    xs = [i * 100 + k for k in range(size)]
    data = pa.table({"x": pa.array(xs, pa.int64()), "y": [f"v{x}" for x in xs]})
    if keyed:
        t.upsert(data, append_name=f"b{i}")
    else:
        t.append(data, f"b{i}", target_fragment_rows=fragment_rows)
    added = pd.DataFrame({"x": xs, "y": [f"v{x}" for x in xs]})
    if with_batch:
        added["batch"] = f"b{i}"
    return pd.concat([model, added])
