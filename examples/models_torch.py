"""Model features with torch (CPU): a small MLP in the model store, scored by a backfill.

The MLP is registered in the warehouse's model store; a model feature calls it on micro-batches
in Spark's Python workers (the model is loaded once per worker and verified by SHA-256); the
result equals per-row inference, and the column's lineage names the model and its hash.
Run: .venv/bin/python examples/models_torch.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa
import torch

import omnitable


def main(warehouse: str) -> None:
    wh = omnitable.connect(warehouse)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(4, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)
    ).eval()
    record = wh.models.register("ctr_mlp", "1", mlp, framework="torch", metadata={"auc": 0.5})
    print("registered", record.name, record.version, record.sha256[:12])

    events = wh.create_table("events", {f"f{i}": "double" for i in range(4)})
    rng = np.random.default_rng(0)
    events.append(pa.table({f"f{i}": rng.normal(size=5000) for i in range(4)}), "day-1")

    @omnitable.model_feature(
        model="ctr_mlp@1",
        inputs=["f0", "f1", "f2", "f3"],
        outputs={"ctr": "double"},
        version="1",
        batch_size="auto",  # start small, double while calls are fast, halve on OOM
    )
    def ctr(model: torch.nn.Module, *cols: pd.Series) -> torch.Tensor:
        x = torch.tensor(np.stack([c.to_numpy() for c in cols], axis=1), dtype=torch.float32)
        with torch.no_grad():
            return torch.sigmoid(model(x))[:, 0].double()

    events.register(ctr)
    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
    spark = omnitable.spark_session(wh, master="local[2]", **settings)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        result = events.backfill("ctr").run(spark)
        print(f"backfill: version {result.version}, {result.seconds:.1f} s, errors {result.errors}")
    finally:
        spark.stop()

    got = events.read(columns=["f0", "f1", "f2", "f3", "ctr"]).to_pandas()
    x = torch.tensor(got[["f0", "f1", "f2", "f3"]].to_numpy(), dtype=torch.float32)
    with torch.no_grad():  # per-row inference, for comparison
        per_row = np.array([float(torch.sigmoid(mlp(x[i : i + 1]))[0, 0]) for i in range(len(x))])
    diff = float(np.abs(got.ctr.to_numpy() - per_row).max())
    print(f"{len(got)} rows scored; max |batched - per-row| = {diff:.2e}")
    assert diff < 1e-5, diff
    print("lineage:", events.lineage("ctr")[0].model)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="omnitable-"))
