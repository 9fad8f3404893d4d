"""The training loader's logic (omnitable.training.loader; no torch): every row exactly once per
epoch across any world, deterministic shuffles, exact resume onto another world size."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from forking import FORK, start_forked, wait_forked
from omnitable import ROW_ID
from omnitable.exceptions import NotFoundError, UnknownColumnError, ValidationError
from omnitable.training.loader import BatchLoader, Progress, merge_states, to_numpy


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> omnitable.Table:
    """Fragments of 40 and 37 rows (unit_rows=16 cuts them), some rows deleted."""
    wh = omnitable.connect(str(tmp_path_factory.mktemp("loader") / "wh"))
    t = wh.create_table("t", {"x": "long", "v": "array<float>", "s": "string"})
    for b, n in enumerate((120, 37)):
        x = np.arange(b * 1000, b * 1000 + n)
        vec = pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(x, 2), pa.float32()), 2)
        t.append(pa.table({"x": x, "v": vec.cast(pa.list_(pa.float32())), "s": x.astype(str)}),
                 f"b{b}", target_fragment_rows=40)  # fmt: skip
    t.delete(pc.is_in(pc.field("x"), pa.array([3, 4, 50, 1010], pa.int64())))
    t.create_tag("v1")
    return t


def ids_of(table: omnitable.Table, where: pc.Expression | None = None) -> list[int]:
    return sorted(table.read([ROW_ID], where).column(ROW_ID).to_pylist())


def shard_rows(loader: BatchLoader, epoch: int, rank: int, world: int, worker: int,
               workers: int, progress: Progress | None = None) -> list[int]:  # fmt: skip
    out: list[int] = []
    for b in loader.batches(epoch, rank=rank, world_size=world, worker=worker,
                            num_workers=workers, progress=progress):  # fmt: skip
        if b.data is not None:
            assert b.data.num_rows <= loader.batch_size
            out += b.data.column(ROW_ID).to_pylist()
    return out


def epoch_rows(loader: BatchLoader, epoch: int, world: int, workers: int) -> list[int]:
    return [
        r
        for rank, worker in itertools.product(range(world), range(workers))
        for r in shard_rows(loader, epoch, rank, world, worker, workers)
    ]


@pytest.mark.parametrize("shuffle", [False, True])
def test_every_row_exactly_once_per_epoch_for_worlds_1_to_4_and_workers_0_to_3(
    table: omnitable.Table, shuffle: bool
) -> None:
    want = ids_of(table)
    loader = BatchLoader(table, [ROW_ID, "x"], batch_size=7, shuffle=shuffle, seed=5, unit_rows=16)
    assert len(loader.units) > 8  # fragments cut into row ranges
    for world, workers in itertools.product(range(1, 5), range(4)):
        got = epoch_rows(loader, 1, world, max(workers, 1))  # 0 workers: the main process
        assert sorted(got) == want, (world, workers)


def test_where_and_columns_as_read_accepts(table: omnitable.Table) -> None:
    where = (pc.field("x") > 60) & (pc.field("x") < 1020)
    loader = BatchLoader(
        table, [ROW_ID, "s"], where=where, batch_size=10, shuffle=True, unit_rows=16
    )
    got = epoch_rows(loader, 0, 2, 2)
    assert sorted(got) == ids_of(table, where)
    full = BatchLoader(table, ["s", "v"], where=where, batch_size=10, shuffle=True, unit_rows=16)
    for b in full.batches(0):  # row ranges of fragments (unit_rows), list column included
        if b.data is not None:
            assert b.data.schema.names == ["s", "v"]
            assert [[float(s)] * 2 for s in b.data.column("s").to_pylist()] == b.data.column(
                "v"
            ).to_pylist()


def test_drop_last_keeps_only_full_batches(table: omnitable.Table) -> None:
    loader = BatchLoader(table, [ROW_ID], batch_size=10, drop_last=True, unit_rows=16)
    sizes = [
        b.data.num_rows for r in range(3) for b in loader.batches(0, rank=r, world_size=3) if b.data
    ]
    assert set(sizes) == {10} and len(ids_of(table)) - 30 < sum(sizes) <= len(ids_of(table))


def test_shuffle_is_a_function_of_seed_and_epoch(table: omnitable.Table) -> None:
    def order(seed: int, epoch: int) -> list[int]:
        loader = BatchLoader(table, [ROW_ID], batch_size=8, shuffle=True, seed=seed, unit_rows=16)
        return shard_rows(loader, epoch, 0, 1, 0, 1)

    first = order(1, 0)
    assert order(1, 0) == first  # a new loader, same seed and epoch: same order
    assert order(2, 0) != first and order(1, 1) != first
    assert sorted(order(2, 0)) == sorted(first)
    plain = BatchLoader(table, [ROW_ID], batch_size=8, unit_rows=16)
    assert shard_rows(plain, 0, 0, 1, 0, 1) == ids_of(table)  # no shuffle: table order


def consume(loader: BatchLoader, world: int, workers: int, steps: int) -> dict:
    """Each shard hands out ``steps`` batches (or all it has); the ranks' states merged."""
    states = []
    for rank in range(world):
        progress = Progress(0)
        for worker in range(workers):
            it = loader.batches(0, rank=rank, world_size=world, worker=worker, num_workers=workers)
            for batch in itertools.islice(it, steps):
                progress.record(batch)
        states.append(json.loads(json.dumps(loader.state(progress))))  # plain data
    return merge_states(loader, states)


@pytest.mark.parametrize("before,after", [((1, 1), (3, 1)), ((4, 1), (2, 3)), ((2, 3), (1, 1))])
def test_resume_mid_epoch_onto_another_world_size(
    table: omnitable.Table, before: tuple[int, int], after: tuple[int, int]
) -> None:
    loader = BatchLoader(table, [ROW_ID], batch_size=5, shuffle=True, seed=9, unit_rows=16,
                         buffer_units=3)  # fmt: skip
    world, workers = before
    consumed = []
    for rank, worker in itertools.product(range(world), range(workers)):
        it = loader.batches(0, rank=rank, world_size=world, worker=worker, num_workers=workers)
        consumed += [
            r for b in itertools.islice(it, 3) if b.data for r in b.data.column(ROW_ID).to_pylist()
        ]
    state = consume(loader, world, workers, 3)
    assert 0 < len(consumed) < len(ids_of(table))
    fresh = BatchLoader(table, [ROW_ID], batch_size=4, shuffle=True, seed=9, unit_rows=16)
    progress = fresh.progress_of(state)
    world, workers = after
    rest = [
        r
        for rank, worker in itertools.product(range(world), range(workers))
        for r in shard_rows(fresh, 0, rank, world, worker, workers, progress)
    ]
    assert sorted(consumed + rest) == ids_of(table)  # nothing twice, nothing skipped


def test_pinned_snapshot_version_tag_and_deletes(table: omnitable.Table, tmp_path: Path) -> None:
    loader = BatchLoader(table, ["x"], tag="v1")
    xs = sorted(r for b in loader.batches() if b.data for r in b.data.column("x").to_pylist())
    assert 3 not in xs and 1010 not in xs and len(xs) == 157 - 4
    old = BatchLoader(table, ["x"], version=1)  # before the second append and the delete
    xs = sorted(r for b in old.batches() if b.data for r in b.data.column("x").to_pylist())
    assert xs == list(range(120))
    assert loader.state(Progress(0))["version"] == table.version
    table.create_branch("exp")
    table.branch("exp").append(pa.table({"x": [7777]}), "exp-rows")
    on_branch = BatchLoader(table, ["x"], branch="exp")
    xs = [r for b in on_branch.batches() if b.data for r in b.data.column("x").to_pylist()]
    assert 7777 in xs and len(xs) == 157 - 4 + 1
    assert on_branch.state(Progress(0))["branch"] == "exp"


def test_bad_input_is_refused_clearly(table: omnitable.Table) -> None:
    with pytest.raises(UnknownColumnError, match="nope"):
        BatchLoader(table, ["x", "nope"])
    with pytest.raises(NotFoundError):
        BatchLoader(table, ["x"], tag="missing")
    loader = BatchLoader(table, ["x"], seed=1)
    with pytest.raises(ValidationError, match=r"rank must be in \[0, world_size=2\)"):
        next(loader.batches(0, rank=2, world_size=2))
    with pytest.raises(ValidationError, match="batch_size"):
        BatchLoader(table, ["x"], batch_size=0)
    other = BatchLoader(table, ["x"], seed=2)
    with pytest.raises(ValidationError, match="seed=2"):
        loader.progress_of(other.state(Progress(0)))
    with pytest.raises(ValidationError, match="not a state_dict"):
        loader.progress_of({"epoch": 0})
    with pytest.raises(ValidationError, match="epoch"):
        next(loader.batches(1, progress=Progress(0)))


def test_to_numpy_is_zero_copy_for_numbers_and_dense_lists() -> None:
    values = pa.array(np.arange(9, dtype=np.float32))
    fixed = pa.FixedSizeListArray.from_arrays(values.slice(0, 6), 3)
    dense = pa.ListArray.from_arrays(pa.array([0, 3, 6, 9], pa.int32()), values).slice(1)
    ragged = pa.ListArray.from_arrays(pa.array([0, 1, 3], pa.int32()), values.slice(0, 3))
    cols = [pa.array([1, 2]), fixed, dense, ragged, pa.array(["a", "b"]), pa.array([1.0, None])]
    batch = pa.RecordBatch.from_arrays(cols, ["i", "f", "d", "r", "s", "n"])
    out = to_numpy(batch)
    assert out["f"].shape == (2, 3) and out["f"].dtype == np.float32
    assert out["d"].tolist() == [[3, 4, 5], [6, 7, 8]]  # a slice: the view starts at row 1
    assert out["d"].ctypes.data == values.buffers()[1].address + 3 * 4  # shared, not copied
    assert out["i"].ctypes.data == batch.column(0).buffers()[1].address
    assert out["r"].dtype == object and out["s"].tolist() == ["a", "b"]
    assert np.isnan(out["n"][1])


def _read_in_child(loader: BatchLoader, out: Any) -> None:
    out.put(sum(b.data.num_rows for b in loader.batches() if b.data is not None))


def test_a_forked_child_reads_multi_file_fragments(tmp_path: Path) -> None:
    """What a forked DataLoader worker does after the parent read (the parent's file-reading
    pool threads do not exist in the child)."""
    wh = omnitable.connect(str(tmp_path / "wh"))
    t = wh.create_table("w", {"a": "long", "b": "double"}, groups={"g1": ["a"], "g2": ["b"]})
    t.append(pa.table({"a": np.arange(50), "b": np.arange(50.0)}), "x")
    assert t.read().num_rows == 50  # two files a fragment: the pool starts here
    loader = BatchLoader(t, ["a", "b"])
    out = FORK.Queue()
    child = start_forked(_read_in_child, loader, out)
    try:
        assert out.get(timeout=60) == 50
    finally:
        wait_forked(child, timeout_s=10)
