"""Model features: batched vs per-row inference (issue 17, benchmark (a)).

Two models from the model store, each called through the model-feature path of a backfill task
(``compute_feature``: the worker's cached model, micro-batched calls, the isolation guard,
conversion to the declared type), in fragments of FRAGMENT_ROWS (default 65,536) rows:
  * a small torch MLP (8 inputs, two hidden layers of 32, CPU);
  * a NumPy regression tree of depth 8 with a scikit-learn-style ``predict(X)``.
For each model, measured side by side: ``batch_size="auto"`` over ROWS rows (default 1,000,000,
the issue's figure) vs ``batch_size=1`` (one model call per row, the same path) over PER_ROW_ROWS
rows (default 2,000: per-row inference of 1 M rows would take many minutes per model on 2 cores;
throughputs are compared per row), and a plain Python loop calling the model row by row without
OmniTable (the per-row baseline a user would write). The per-row and batched outputs are checked
equal. Goal: batched >= 8x per-row throughput (HE3ML's figure).

Run: ./dev bench models [--rows N] [--per-row-rows N] [--fragment-rows N] [--repeats N]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from benchmarks.common import BENCH_DIR, fmt_ratio, fmt_seconds, report, time_interleaved

INPUTS = [f"x{i}" for i in range(8)]
GOAL = 8.0


class NumpyTree:
    """A regression tree of fixed depth (complete, thresholds at feature medians of the rows
    reaching each node); ``predict(X)`` walks all rows level by level (vectorized)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, depth: int = 8) -> None:
        n = 2 ** (depth + 1)
        self.depth = depth
        self.feature = np.zeros(n, dtype=np.int64)
        self.threshold = np.zeros(n)
        self.value = np.zeros(n)
        node = np.zeros(len(x), dtype=np.int64)
        for level in range(depth + 1):
            for k in range(2**level - 1, 2 ** (level + 1) - 1):
                rows = node == k
                self.value[k] = y[rows].mean() if rows.any() else 0.0
                j = (k * 7 + level) % x.shape[1]
                self.feature[k] = j
                self.threshold[k] = np.median(x[rows, j]) if rows.any() else 0.0
            if level < depth:
                go_left = x[np.arange(len(x)), self.feature[node]] <= self.threshold[node]
                node = np.where(go_left, 2 * node + 1, 2 * node + 2)

    def predict(self, x: np.ndarray) -> np.ndarray:
        node = np.zeros(len(x), dtype=np.int64)
        for _ in range(self.depth):
            go_left = x[np.arange(len(x)), self.feature[node]] <= self.threshold[node]
            node = np.where(go_left, 2 * node + 1, 2 * node + 2)
        return self.value[node]


def _matrix(cols: tuple[pd.Series, ...]) -> np.ndarray:
    return np.stack([c.to_numpy() for c in cols], axis=1)


def mlp_fn(model: Any, *cols: pd.Series) -> Any:
    import torch

    with torch.no_grad():
        return model(torch.from_numpy(_matrix(cols).astype(np.float32)))[:, 0].double()


def tree_fn(model: NumpyTree, *cols: pd.Series) -> np.ndarray:
    return model.predict(_matrix(cols))


def _feature(fn: Any, name: str, ref: str, record: Any, batch_size: int | str) -> Any:
    from omnitable.features.definition import model_feature

    f = model_feature(
        model=ref, inputs=INPUTS, outputs={"y": "double"}, version="1", batch_size=batch_size,
        name=name,
    )(fn)  # fmt: skip
    found = {"model_sha256": record.sha256, "model_path": record.path,
             "model_kind": record.kind, "model_framework": record.framework}  # fmt: skip
    return dataclasses.replace(f, options={**f.options, **found})  # as Table.register does


def _run(f: Any, fragments: list[pa.Table]) -> np.ndarray:
    from omnitable.exec.task import compute_feature

    out = []
    for table in fragments:
        values, failures, _ = compute_feature(f, table, {}, "auto", False, None)
        assert not failures, failures[:1]
        out.append(values.column("y").to_numpy())
    return np.concatenate(out)


def main(argv: list[str] | None = None) -> dict[str, float]:
    import torch

    import omnitable
    from omnitable.vocabulary.names import ROW_ID

    parser = argparse.ArgumentParser(prog="models")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--per-row-rows", type=int, default=2_000)
    parser.add_argument("--fragment-rows", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)

    work = BENCH_DIR / "models"
    shutil.rmtree(work, ignore_errors=True)
    wh = omnitable.connect(str(work / "wh"))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, len(INPUTS)))
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
        torch.nn.Linear(32, 1),
    ).eval()  # fmt: skip
    tree = NumpyTree(x[:50_000], x[:50_000, 0] * 2 + np.sin(x[:50_000, 1]))
    records = {
        "mlp": wh.models.register("bench_mlp", "1", mlp, framework="torch"),
        "tree": wh.models.register("bench_tree", "1", tree, framework="numpy"),
    }

    def fragments(rows: int) -> list[pa.Table]:
        cols = {c: x[:rows, i] for i, c in enumerate(INPUTS)}
        table = pa.table({ROW_ID: np.arange(rows, dtype=np.int64), **cols})
        return [table.slice(o, args.fragment_rows) for o in range(0, rows, args.fragment_rows)]

    everything, first = fragments(args.rows), fragments(args.per_row_rows)
    sample = x[: args.per_row_rows]
    series = [pd.Series(sample[:, i]) for i in range(len(INPUTS))]
    results: dict[str, float] = {}
    for key, fn, model in (("mlp", mlp_fn, mlp), ("tree", tree_fn, tree)):
        ref = f"bench_{key}@1"
        batched = _feature(fn, f"{key}_batched", ref, records[key], "auto")
        per_row = _feature(fn, f"{key}_per_row", ref, records[key], 1)
        got, one_by_one = _run(batched, everything), _run(per_row, first)
        np.testing.assert_allclose(got[: args.per_row_rows], one_by_one, rtol=1e-5, atol=1e-6)

        def loop(fn: Any = fn, model: Any = model) -> None:
            for i in range(args.per_row_rows):
                fn(model, *(s.iloc[i : i + 1] for s in series))

        times = time_interleaved(
            {"batched": lambda f=batched: _run(f, everything),
             "per_row": lambda f=per_row: _run(f, first), "loop": loop},
            repeats=args.repeats,
        )  # fmt: skip
        per_row_rate = args.per_row_rows / times["per_row"]
        batched_rate = args.rows / times["batched"]
        loop_rate = args.per_row_rows / times["loop"]
        ratio = batched_rate / per_row_rate
        results[f"{key}_batched_vs_per_row"] = ratio
        results[f"{key}_batched_vs_loop"] = batched_rate / loop_rate
        met = "met" if ratio >= GOAL else "MISSED"
        report(
            f"(a) {key}: batched (auto) over {args.rows:,} rows vs per-row over "
            f"{args.per_row_rows:,} rows, fragments of {args.fragment_rows:,}",
            [
                ("batched: time", fmt_seconds(times["batched"]), ""),
                ("batched: rows/s", f"{batched_rate:,.0f}", ""),
                ("per-row (batch_size=1): rows/s", f"{per_row_rate:,.0f}", ""),
                ("plain per-row loop: rows/s", f"{loop_rate:,.0f}", ""),
                ("batched / per-row", fmt_ratio(ratio), f">= {GOAL:.0f}x: {met}"),
                ("batched / plain loop", fmt_ratio(batched_rate / loop_rate), ""),
            ],
        )
    wh.close()
    shutil.rmtree(work, ignore_errors=True)
    return results


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
