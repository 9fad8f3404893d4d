"""Training data plane benchmark (issue 16).

(a) Loader throughput: one epoch through a torch DataLoader with 4 workers, batches of 1,024
rows collated to tensors, of N rows (default 1,000,000) of 8 float32 features, a 16-float
embedding and an int64 label, three ways measured side by side:
  * ``omnitable.torch.TableDataset`` (in order, and shuffled);
  * raw pyarrow reading the same Parquet files (``ParquetFile.iter_batches``, files sharded over
    the workers, the same collation) — goal: omnitable >= 0.9x its rows/s;
  * Lance's torch dataset (``lance.torch.data.LanceDataset``, fragments sharded over the
    workers) on the same rows written as a Lance dataset — goal: omnitable >= Lance.

Run: ./dev bench training [--rows N] [--workers W] [--repeats R]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks.common import BENCH_DIR, fmt_bytes, fmt_ratio, fmt_seconds, report

FEATURES = [f"f{i}" for i in range(8)]
COLUMNS = [*FEATURES, "emb", "label"]
EMB = 16
FRAGMENT_ROWS = 65_536
BATCH = 1024


def make_data(rows: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {f: rng.random(rows, dtype=np.float32) for f in FEATURES}
    values = pa.array(rng.random(rows * EMB, dtype=np.float32))
    offsets = pa.array(np.arange(0, rows * EMB + 1, EMB, dtype=np.int32))
    data["emb"] = pa.ListArray.from_arrays(offsets, values)
    data["label"] = rng.integers(0, 10, rows)
    return pa.table(data)


def _epoch(dataset: Any, workers: int) -> tuple[int, int]:
    """Rows and tensor bytes of one pass of a DataLoader (4 workers) over ``dataset``."""
    import torch
    from torch.utils.data import DataLoader

    rows = nbytes = 0
    for batch in DataLoader(dataset, batch_size=None, num_workers=workers):
        rows += len(batch["label"])
        nbytes += sum(v.nbytes for v in batch.values() if isinstance(v, torch.Tensor))
    return rows, nbytes


def _tensors(batch: pa.RecordBatch) -> dict[str, Any]:
    import torch

    from omnitable.training.loader import to_numpy

    return {k: torch.from_numpy(v) for k, v in to_numpy(batch).items()}


def _raw_dataset(files: list[str], names: dict[str, str]) -> Any:
    """The same Parquet files, read by pyarrow in the workers (every ``workers``-th file)."""
    from torch.utils.data import IterableDataset, get_worker_info

    class Raw(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            wid, n = (info.id, info.num_workers) if info is not None else (0, 1)
            for path in files[wid::n]:
                pf = pq.ParquetFile(path)
                for rb in pf.iter_batches(BATCH, columns=list(names)):
                    yield _tensors(rb.rename_columns([names[c] for c in rb.schema.names]))

    return Raw()


def _lance_dataset(path: str) -> Any:
    """Lance's torch dataset, one per worker with the workers as its ranks."""
    from torch.utils.data import IterableDataset, get_worker_info

    class PerWorker(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[Any]:
            from lance.torch.data import LanceDataset  # in the worker: Lance is not fork-safe

            info = get_worker_info()
            wid, n = (info.id, info.num_workers) if info is not None else (0, 1)
            ds = LanceDataset(path, BATCH, columns=COLUMNS, rank=wid, world_size=n,
                              shard_granularity="fragment", auto_detect_rank=False)  # fmt: skip
            yield from ds

    return PerWorker()


def _lance_written(data: pa.Table, path: Path) -> bool:
    """Write ``data`` as a Lance dataset in a child process (this one forks DataLoader workers,
    and Lance is not fork-safe once imported); False without pylance."""
    if importlib.util.find_spec("lance") is None:
        return False
    emb = data.column("emb").cast(pa.list_(pa.float32(), EMB))  # Lance's embedding type
    data = data.set_column(data.schema.get_field_index("emb"), "emb", emb)
    staged = path.with_suffix(".parquet")
    pq.write_table(data, staged)
    code = (
        "import sys, lance, pyarrow.parquet as pq; "
        "lance.write_dataset(pq.read_table(sys.argv[1]), sys.argv[2], max_rows_per_file=int(sys.argv[3]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(staged), str(path), str(FRAGMENT_ROWS)], check=True
    )
    staged.unlink()
    return True


def loader_throughput(work: Path, rows: int, workers: int, repeats: int) -> dict[str, float]:
    """Part (a): rows/s and MB/s of one epoch, the variants interleaved ``repeats`` times."""
    import omnitable
    from omnitable.torch import TableDataset

    data = make_data(rows)
    print(f"writing {rows:,} rows ({fmt_bytes(data.nbytes)} in memory) to omnitable and Lance ...")
    wh = omnitable.connect(work / "wh")
    t = wh.create_table("train", data.schema)
    t.append(data, "b0", target_fragment_rows=FRAGMENT_ROWS)
    snap = t.snapshot()
    files = sorted({t.location.child_path(f.path) for fs in snap.files_by_fragment.values()
                    for f in fs})  # fmt: skip
    names = {c.physical_name: c.name for c in snap.columns if c.name in COLUMNS}
    variants: dict[str, Callable[[], Any]] = {
        "omnitable": lambda: TableDataset(t, COLUMNS, batch_size=BATCH),
        "omnitable shuffled": lambda: TableDataset(t, COLUMNS, batch_size=BATCH, shuffle=True),
        "raw pyarrow": lambda: _raw_dataset(files, names),
    }
    if _lance_written(data, work / "train.lance"):
        variants["lance"] = lambda: _lance_dataset(str(work / "train.lance"))
    samples: dict[str, list[float]] = {k: [] for k in variants}
    nbytes: dict[str, int] = {}
    for i in range(repeats + 1):  # the first round warms up
        for name, make in variants.items():
            start = time.perf_counter()
            n, size = _epoch(make(), workers)
            if i:
                samples[name].append(time.perf_counter() - start)
            assert n == rows, f"{name} read {n} rows, not {rows}"
            nbytes[name] = size
    secs = {k: float(np.median(v)) for k, v in samples.items()}
    rows_out = []
    for name, s in secs.items():
        rows_out.append((f"{name}: one epoch", fmt_seconds(s),
                         f"{rows / s:,.0f} rows/s, {nbytes[name] / s / 2**20:,.0f} MB/s"))  # fmt: skip
    out = {f"{k}_rows_per_s": rows / s for k, s in secs.items()}
    out["vs_raw"] = secs["raw pyarrow"] / secs["omnitable"]
    rows_out.append(("omnitable vs raw pyarrow", fmt_ratio(out["vs_raw"]), "goal >= 0.9x"))
    if "lance" in secs:
        out["vs_lance"] = secs["lance"] / secs["omnitable"]
        rows_out.append(("omnitable vs Lance", fmt_ratio(out["vs_lance"]), "goal >= 1.0x"))
    report(f"(a) loader throughput, {workers} DataLoader workers, batches of {BATCH}", rows_out)
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(prog="training")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    work = BENCH_DIR / "training"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return loader_throughput(work, args.rows, args.workers, args.repeats)
