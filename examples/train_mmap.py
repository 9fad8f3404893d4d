"""Out-of-core training: export a table to float32 mmap files and train a small model on data
five times larger than the memory the process may still allocate.

The process first writes a table of ``--rows`` x ``--features`` (in small batches), then caps
its own data segment (``RLIMIT_DATA``: heap and private anonymous mappings; read-only file maps
do not count) at what it already uses plus ``--budget-mb``, then exports with
``Table.export_mmap`` (one fragment in memory at a time) and trains a linear model through
``omnitable.torch.MmapDataset`` and a DataLoader. ``--materialize`` instead loads the whole
export into memory under the same cap (to show the cap is real: it fails with MemoryError).

Run: .venv/bin/python examples/train_mmap.py [WAREHOUSE_DIR] [--rows N] [--budget-mb MB]
(docs/training.md, "mmap export").
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch.utils.data import DataLoader

import omnitable
from omnitable.torch import MmapDataset


def write_table(wh: omnitable.Warehouse, rows: int, width: int) -> omnitable.Table:
    """A table of ``rows`` x ``width`` float features and a label y = x . w + noise."""
    names = [f"f{i}" for i in range(width)]
    table = wh.create_table("samples", {**dict.fromkeys(names, "float"), "y": "float"})
    rng = np.random.default_rng(0)
    weights = np.linspace(-1.0, 1.0, width, dtype=np.float32)
    step = 80_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        x = rng.standard_normal((n, width), dtype=np.float32)
        y = x @ weights + 0.01 * rng.standard_normal(n, dtype=np.float32)
        cols = {name: x[:, i] for i, name in enumerate(names)}
        table.append(
            pa.table({**cols, "y": y}), f"part{start // step}", target_fragment_rows=20_000
        )
    return table


def cap_memory(budget_mb: int) -> int:
    """Limit further heap growth of this process to ``budget_mb``; returns the limit in bytes.

    Thread stacks count against the cap, so the reader's thread pools are kept small and
    started first (by a small read)."""
    with open("/proc/self/status", encoding="ascii") as f:
        used = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmData:"))
    limit = used + budget_mb * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    return limit


def make_model(width: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A linear model and its optimizer, warmed up by one step (torch loads code lazily)."""
    model = torch.nn.Linear(width, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    torch.nn.functional.mse_loss(model(torch.zeros(2, width)).squeeze(1), torch.zeros(2)).backward()
    opt.zero_grad()
    return model, opt


def train(path: Path, model: torch.nn.Module, opt: torch.optim.Optimizer) -> float:
    """One epoch over the export; returns the last batch's mean squared error."""
    data = MmapDataset(path)
    loss = torch.tensor(0.0)
    # contiguous batches in random order (a row-level permutation of a dataset larger than
    # memory would not fit in memory itself); batch_size=None: the dataset gets index ranges
    order = np.random.default_rng(1).permutation(-(-len(data) // 512))
    batches = [range(b * 512, min((b + 1) * 512, len(data))) for b in order]
    for x, y in DataLoader(data, sampler=batches, batch_size=None):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()
        opt.step()
    return loss.item()


def main(warehouse: str, rows: int, width: int, budget_mb: int, materialize: bool) -> None:
    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    threading.stack_size(512 * 1024)
    wh = omnitable.connect(warehouse)
    table = write_table(wh, rows, width)
    table.read(batches=["part0"])  # starts the reader's threads before the cap
    model, opt = make_model(width)
    data_bytes = rows * (width + 1) * 4
    cap_memory(budget_mb)
    print(f"data {data_bytes / 2**20:.0f} MiB = {data_bytes / (budget_mb * 2**20):.1f}x the cap")
    out = Path(warehouse).parent / "samples.mmap"
    export = table.export_mmap(out, [f"f{i}" for i in range(width)], label="y")
    if materialize:
        everything = np.fromfile(out / "features.bin", dtype=np.float32)  # MemoryError
        print(f"materialized {everything.nbytes} bytes")
        return
    mse = train(out, model, opt)
    print(f"exported {export.rows} rows; trained under the cap; last batch mse {mse:.4f}")
    assert mse < 0.5, mse


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("warehouse", nargs="?", default=None)
    parser.add_argument("--rows", type=int, default=640_000)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--budget-mb", type=int, default=8)
    parser.add_argument("--materialize", action="store_true")
    args = parser.parse_args()
    where = args.warehouse or str(Path(tempfile.mkdtemp()) / "wh")
    main(where, args.rows, args.features, args.budget_mb, args.materialize)
