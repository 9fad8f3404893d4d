"""Backfill pandas and model features without Spark: the ``python`` engine.

A table of reviews gets a pandas feature (defined in this script, so it is stored by value) and
a model feature (a linear model with ``.predict``, registered in the model store), backfilled
with ``engine="python"``: the inputs are read by the table's own reader and the features run in
one local Python worker process; no JVM starts. The plan's explain shows the route, the run
records it, and the values equal the direct computation.
Run: .venv/bin/python examples/python_engine.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa

import omnitable


class Linear:
    """A fitted linear model: ``predict(X) = X @ w + b``."""

    def __init__(self, w: np.ndarray, b: float) -> None:
        self.w, self.b = w, b

    def predict(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w + self.b


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    texts = [f"review {i}: " + "good " * (i % 5) + "bad " * (i % 3) for i in range(5000)]
    reviews = wh.create_table("reviews", {"text": "string", "stars": "int"})
    stars = pa.array([1 + i % 5 for i in range(5000)], pa.int32())
    reviews.append(pa.table({"text": texts, "stars": stars}), "day1", target_fragment_rows=1000)

    @omnitable.feature(inputs=["text"], outputs={"n_good": "int", "n_bad": "int"}, version="1")
    def counts(text: pd.Series) -> pd.DataFrame:
        return pd.DataFrame({"n_good": text.str.count("good"), "n_bad": text.str.count("bad")})

    wh.models.register("sentiment", "1", Linear(np.array([1.0, -1.5, 0.2]), 0.1),
                       framework="numpy")  # fmt: skip

    @omnitable.model_feature(
        model="sentiment@1",
        inputs=["n_good", "n_bad", "stars"],
        outputs={"sentiment": "double"},
        version="1",
        batch_size=1024,
    )
    def sentiment(model: Linear, good: pd.Series, bad: pd.Series, stars: pd.Series) -> np.ndarray:
        return model.predict(np.stack([good, bad, stars], axis=1).astype("float64"))

    reviews.register(counts, sentiment)
    plan = reviews.backfill("sentiment")
    print(plan.explain(engine="python"))
    result = plan.run(engine="python")  # no Spark session (one is made to log failed records)
    routes = {k: v for step in result.steps for k, v in step.routes.items()}
    print(f"backfill: versions {result.versions}, routes {routes}, errors {result.errors}")
    assert set(routes.values()) == {"python-local"}

    got = reviews.read(columns=["text", "stars", "n_good", "n_bad", "sentiment"]).to_pandas()
    good = got.text.str.count("good").to_numpy()
    bad = got.text.str.count("bad").to_numpy()
    want = 1.0 * good - 1.5 * bad + 0.2 * got.stars.to_numpy() + 0.1
    assert np.allclose(got.sentiment.to_numpy(), want) and (got.n_good == good).all()
    print(
        f"{len(got)} reviews scored without a JVM; lineage:", reviews.lineage("sentiment")[0].model
    )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-"))
