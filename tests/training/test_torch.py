"""omnitable.torch.TableDataset through the real torch DataLoader (CPU). The DDP example
(examples/training_ddp.py: 2 gloo processes, resume on 1) runs in tests/test_examples.py."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import ValidationError

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

from omnitable.torch import TableDataset, TensorBatch  # noqa: E402


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> omnitable.Table:
    wh = omnitable.connect(str(tmp_path_factory.mktemp("torch") / "wh"))
    schema = {"x": "long", "emb": "array<float>", "s": "string"}
    t = wh.create_table("t", schema, groups={"a": ["x"], "b": ["emb", "s"]})  # 2 files a fragment
    x = np.arange(200)
    emb = pa.ListArray.from_arrays(pa.array(np.arange(0, 601, 3), pa.int32()),
                                   pa.array(np.repeat(x, 3), pa.float32()))  # fmt: skip
    t.append(pa.table({"x": x, "emb": emb, "s": x.astype(str)}), "b", target_fragment_rows=30)
    t.delete(pc.field("x") < 5)
    return t


def ids(table: omnitable.Table) -> list[int]:
    return sorted(table.read([ROW_ID]).column(ROW_ID).to_pylist())


def test_dataloader_with_two_workers_reads_every_row_once_as_tensors(
    table: omnitable.Table,
) -> None:
    assert table.read().num_rows == 195  # the parent's file-reading pool exists before the fork
    ds = TableDataset(table, [ROW_ID, "x", "emb", "s"], batch_size=16, shuffle=True, seed=1)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2, timeout=60))
    got = sorted(r for b in batches for r in b[ROW_ID].tolist())
    assert got == ids(table)
    b = batches[0]
    assert b["x"].dtype == torch.int64 and b["emb"].shape == (16, 3)
    assert b["emb"].dtype == torch.float32 and (b["emb"][:, 1] == b["x"].float()).all()
    assert b["s"] == [str(v) for v in b["x"].tolist()]  # strings pass through as lists


def test_worker_batches_arrive_as_one_buffer_equal_to_in_process_batches(
    table: omnitable.Table,
) -> None:
    """In DataLoader workers a batch's tensors share one buffer (one shared-memory segment per
    batch on the way to the main process); what arrives equals what an in-process iteration
    yields: same keys in order, dtypes, shapes, values."""
    cols = [ROW_ID, "x", "emb", "s"]
    local = list(TableDataset(table, cols, batch_size=16))
    assert all(type(b) is dict for b in local)  # no packing in the main process
    sent = list(DataLoader(TableDataset(table, cols, batch_size=16), batch_size=None,
                           num_workers=2, timeout=60))  # fmt: skip

    def rows(batches: list) -> dict[int, tuple]:
        return {int(r): (int(x), tuple(e.tolist()), s)
                for b in batches for r, x, e, s in zip(b[ROW_ID], b["x"], b["emb"], b["s"],
                                                       strict=True)}  # fmt: skip

    assert rows(sent) == rows(local) and len(rows(local)) == 195
    for b in sent:
        assert isinstance(b, TensorBatch) and list(b) == cols
        tensors = [v for v in b.values() if isinstance(v, torch.Tensor)]
        assert len({t.untyped_storage().data_ptr() for t in tensors}) == 1  # one buffer
        assert b["x"].dtype == torch.int64 and b["emb"].dtype == torch.float32
        assert b["emb"].shape == (len(b["x"]), 3)


def test_a_tensor_batch_pickles_as_one_buffer_and_falls_back_when_changed() -> None:
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing

    values = {
        "f": torch.arange(5, dtype=torch.float32),
        "b": torch.tensor([True, False, True, True, False]),
        "emb": torch.arange(15, dtype=torch.float64).reshape(5, 3),
        "empty": torch.zeros((0, 4), dtype=torch.int16),
        "s": ["a", "b", "c", "d", "e"],
    }
    batch = TensorBatch.packed(values)
    back = pickle.loads(ForkingPickler.dumps(batch))
    assert isinstance(back, TensorBatch) and list(back) == list(values)
    for k, v in values.items():
        if isinstance(v, torch.Tensor):
            assert back[k].dtype == v.dtype and back[k].shape == v.shape and torch.equal(back[k], v)
            assert back[k].untyped_storage().data_ptr() == back["f"].untyped_storage().data_ptr()
        else:
            assert back[k] == v
    back["f"] = torch.ones(5)  # no longer a view into the buffer: pickled as a plain dict
    again = pickle.loads(pickle.dumps(back))
    assert type(again) is dict and torch.equal(again["f"], torch.ones(5))
    assert torch.equal(again["emb"], values["emb"])


def test_loader_state_resumes_exactly_on_another_world_size(table: omnitable.Table) -> None:
    ds = TableDataset(table, [ROW_ID], batch_size=8, shuffle=True, seed=4, unit_rows=20)
    loader = ds.loader(num_workers=2)
    seen = [r for b in itertools.islice(iter(loader), 5) for r in b[ROW_ID].tolist()]
    state = ds.state_dict()
    rest = []
    for rank in range(3):  # resume on 3 ranks, in the main process
        other = TableDataset(table, [ROW_ID], batch_size=5, shuffle=True, seed=4, unit_rows=20,
                             rank=rank, world_size=3)  # fmt: skip
        other.load_state_dict(state)
        rest += [r for b in other for r in b[ROW_ID].tolist()]
    assert len(seen) == 40 and sorted(seen + rest) == ids(table)
    again = [r for b in other for r in b[ROW_ID].tolist()]  # the next pass: a full shard
    assert len(again) > len(rest) // 3


def double(batch: pa.RecordBatch) -> dict[str, np.ndarray]:
    return {"x2": batch.column(0).to_numpy() * 2}


def test_transform_hook_and_bad_input(table: omnitable.Table) -> None:
    ds = TableDataset(table, ["x"], batch_size=50, transform=double)
    first = next(iter(ds))
    assert isinstance(first["x2"], torch.Tensor) and first["x2"][:2].tolist() == [10, 12]
    copy = pickle.loads(pickle.dumps(ds))  # what a spawned DataLoader worker gets
    assert next(iter(copy))["x2"].tolist() == first["x2"].tolist()
    with pytest.raises(ValidationError, match="rank must be in"):
        TableDataset(table, ["x"], rank=3, world_size=3)
    with pytest.raises(ValidationError, match="both rank and world_size"):
        TableDataset(table, ["x"], rank=0)
    with pytest.raises(ValidationError, match="seed=1"):
        ds.load_state_dict(TableDataset(table, ["x"], seed=1).state_dict())


def test_fitted_preprocessing_is_the_transform(table: omnitable.Table) -> None:
    """A fitted standardization (omnitable.preprocess) applied on the fly by the loader equals
    the same arithmetic on the read column."""
    import omnitable.preprocess as pre

    fitted = pre.fit(table, {"x": "standardize"}, name="loader_x")
    ds = TableDataset(table, ["x"], batch_size=64, transform=pre.load(table, "loader_x"))
    got = np.concatenate([b["x"].numpy() for b in ds])
    x = table.read(["x"]).column("x").to_numpy().astype(np.float64)
    want = (x - x.mean()) / x.std()  # the population std, as scikit-learn
    np.testing.assert_allclose(np.sort(got), np.sort(want), rtol=1e-6)
    assert fitted.version == table.version
