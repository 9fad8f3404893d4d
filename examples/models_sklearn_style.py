"""Model features with a scikit-learn-style model: any object with ``.predict(X)``.

A tiny regression tree written with NumPy (scikit-learn is not needed) is fitted, registered in
the model store as an object (its class is defined in this script, so the store pickles it by
value and Spark's workers can load it), and called by a model feature on micro-batches of 512
rows; the result equals calling ``predict`` row by row.
Run: .venv/bin/python examples/models_sklearn_style.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa

import omnitable


class TinyTree:
    """A depth-limited regression tree: ``fit(X, y)``, ``predict(X)`` (vectorized)."""

    def __init__(self, depth: int = 4) -> None:
        self.depth = depth
        n = 2 ** (depth + 1)
        self.feature = np.zeros(n, dtype=np.int64)
        self.threshold = np.full(n, np.inf)
        self.value = np.zeros(n)

    def fit(self, x: np.ndarray, y: np.ndarray) -> TinyTree:
        self._grow(0, x, y, 0)
        return self

    def _grow(self, node: int, x: np.ndarray, y: np.ndarray, level: int) -> None:
        self.value[node] = y.mean() if len(y) else 0.0
        if level == self.depth or len(y) < 2:
            return
        best = (np.inf, 0, np.inf)  # (squared error, feature, threshold)
        for j in range(x.shape[1]):
            for t in np.quantile(x[:, j], [0.25, 0.5, 0.75]):
                left = x[:, j] <= t
                err = y[left].var() * left.sum() + y[~left].var() * (~left).sum()
                if 0 < left.sum() < len(y) and err < best[0]:
                    best = (err, j, t)
        self.feature[node], self.threshold[node] = best[1], best[2]
        left = x[:, best[1]] <= best[2]
        self._grow(2 * node + 1, x[left], y[left], level + 1)
        self._grow(2 * node + 2, x[~left], y[~left], level + 1)

    def predict(self, x: np.ndarray) -> np.ndarray:
        node = np.zeros(len(x), dtype=np.int64)
        for _ in range(self.depth):
            go_left = x[np.arange(len(x)), self.feature[node]] <= self.threshold[node]
            node = np.where(go_left, 2 * node + 1, 2 * node + 2)
        return self.value[node]


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 3))
    y = np.where(x[:, 0] > 0, 2.0, -1.0) + 0.5 * x[:, 1]
    tree = TinyTree(depth=4).fit(x, y)
    wh.models.register("price_tree", "1", tree, framework="numpy", metadata={"depth": 4})

    homes = wh.create_table("homes", {"a": "double", "b": "double", "c": "double"})
    homes.append(pa.table({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2]}), "listings")

    @omnitable.model_feature(
        model="price_tree@1",
        inputs=["a", "b", "c"],
        outputs={"price": "double"},
        version="1",
        batch_size=512,
    )
    def price(model: TinyTree, a: pd.Series, b: pd.Series, c: pd.Series) -> np.ndarray:
        return model.predict(np.stack([a.to_numpy(), b.to_numpy(), c.to_numpy()], axis=1))

    homes.register(price)
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    spark = omnitable.spark_session(wh, master="local[2]", **settings)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        result = homes.backfill("price").run(spark)
        print(f"backfill: version {result.version}, errors {result.errors}")
    finally:
        spark.stop()

    got = homes.read(columns=["a", "b", "c", "price"]).to_pandas()
    feats = got[["a", "b", "c"]].to_numpy()
    per_row = np.array([tree.predict(feats[i : i + 1])[0] for i in range(len(feats))])
    assert np.array_equal(got.price.to_numpy(), per_row)
    print(f"{len(got)} rows priced, equal to per-row predict;", homes.lineage("price")[0].model)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-"))
