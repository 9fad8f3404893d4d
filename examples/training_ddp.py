"""Train on an OmniTable table with DistributedDataParallel: 2 CPU processes (gloo), no Spark.

Each rank reads its own shard of a pinned snapshot (omnitable.torch.TableDataset, sharded by
rank and DataLoader worker); a mid-epoch checkpoint of the loader is resumed afterwards on ONE
process, which reads exactly the rows the two ranks had not consumed (docs/training.md).

    python examples/training_ddp.py [WAREHOUSE_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch import nn
except ImportError:  # torch is the optional `ml` extra
    print("this example needs torch: pip install 'omnitable[ml]'")
    sys.exit(0)

import omnitable
from omnitable import ROW_ID
from omnitable.torch import TableDataset

COLUMNS = [ROW_ID, "features", "label"]
STEPS_BEFORE_CHECKPOINT = 3


def make_table(uri: str) -> None:
    wh = omnitable.connect(uri)
    rng = np.random.default_rng(0)
    n = 2_000
    feats = rng.normal(size=(n, 4)).astype(np.float32)
    label = feats @ np.array([1.0, -2.0, 0.5, 3.0], dtype=np.float32)
    features = pa.FixedSizeListArray.from_arrays(pa.array(feats.ravel()), 4)
    t = wh.create_table("train", {"features": "array<float>", "label": "float"})
    t.append(pa.table({"features": features, "label": label}), "day-1", target_fragment_rows=250)
    wh.close()


def dataset(uri: str, **kwargs: object) -> TableDataset:
    table = omnitable.connect(uri).table("train")
    return TableDataset(table, COLUMNS, batch_size=64, shuffle=True, seed=7, **kwargs)


def train(rank: int, uri: str, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ds = dataset(uri)  # rank and world size from torch.distributed
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: list[int] = []
    before: list[int] = []
    state = None
    with model.join():  # ranks may get different numbers of batches
        for step, batch in enumerate(ds.loader(num_workers=0)):
            loss = nn.functional.mse_loss(model(batch["features"]).squeeze(1), batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += batch[ROW_ID].tolist()
            if step + 1 == STEPS_BEFORE_CHECKPOINT:
                before = list(seen)
                state = ds.state_dict()  # every rank calls it: the ranks' states merged
    everyone: list[object] = [None] * 2
    dist.all_gather_object(everyone, (seen, before, state))
    if rank == 0:
        torch.save(everyone, out)
    dist.destroy_process_group()


def main(root: str) -> None:
    uri = str(Path(root) / "wh")
    make_table(uri)
    out = str(Path(root) / "ranks.pt")
    init = f"file://{Path(root) / 'init'}"
    # fork: the ranks inherit the imported modules (spawn would import torch twice more)
    mp.start_processes(train, args=(uri, init, out), nprocs=2, start_method="fork")
    ranks = torch.load(out, weights_only=False)
    all_ids = sorted(
        omnitable.connect(uri).table("train").read([ROW_ID]).column(ROW_ID).to_pylist()
    )
    seen = sorted(r for s, _, _ in ranks for r in s)
    assert seen == all_ids, "a row was read twice or skipped"
    print(f"every row exactly once on 2 ranks ({len(seen)} rows)")

    resumed = dataset(uri)  # one process: world size 1
    resumed.load_state_dict(ranks[0][2])  # any rank's copy of the merged checkpoint
    rest = [r for b in resumed for r in b[ROW_ID].tolist()]
    before = [r for _, b, _ in ranks for r in b]
    assert sorted(before + rest) == all_ids, "resume duplicated or skipped rows"
    print(
        f"resumed on 1 rank: exactly once ({len(before)} rows before the checkpoint, {len(rest)} after)"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        Path(sys.argv[1]).mkdir(parents=True, exist_ok=True)
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
