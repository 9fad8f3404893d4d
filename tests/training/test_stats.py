"""``Table.stats``: equal to pandas on random data (nulls, several batches and fragments,
deletes, updates), the metadata path reads no data file, bad input."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import UnknownColumnError, ValidationError
from omnitable.training.sketches import DistinctSketch, QuantileSketch, hash_values

_names = itertools.count()
SCHEMA = {"i": "bigint", "f": "double", "s": "string", "b": "boolean"}
GROUPS = {"num": ["i", "f"], "cat": ["s", "b"]}  # an update rewrites files of both


@pytest.fixture(scope="module")
def local_wh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[omnitable.Warehouse]:
    wh = omnitable.connect(str(tmp_path_factory.mktemp("stats") / "wh"))
    yield wh
    wh.close()


def _batch(rng: np.random.Generator, n: int) -> pa.Table:
    def holes(values: list[object]) -> list[object]:
        return [None if rng.random() < 0.2 else v for v in values]

    return pa.table({
        "i": pa.array(holes(rng.integers(-50, 50, n).tolist()), pa.int64()),
        "f": pa.array(holes(rng.normal(size=n).round(3).tolist()), pa.float64()),
        "s": pa.array(holes([f"v{k}" for k in rng.integers(0, 9, n)]), pa.string()),
        "b": pa.array(holes((rng.random(n) < 0.3).tolist()), pa.bool_()),
    })  # fmt: skip


def _check(t: omnitable.Table, *, exact: bool) -> None:
    df = t.read(list(SCHEMA)).to_pandas()
    stats = t.stats(exact=exact)
    assert stats.rows == len(df)
    for name in SCHEMA:
        col, got = df[name], stats[name]
        assert (got.count, got.null_count) == (col.count(), col.isna().sum()), name
        values = col.dropna()
        if len(values) == 0:
            assert got.min is None and got.max is None and got.mean is None
            continue
        assert (got.min, got.max) == (values.min(), values.max()), name
        if name == "s":
            assert got.mean is None and got.histogram is None
        else:
            nums = values.astype(np.float64)
            assert got.mean == pytest.approx(nums.mean(), rel=1e-9, abs=1e-12)
            if len(nums) > 1:
                assert got.std == pytest.approx(nums.std(ddof=1), rel=1e-9, abs=1e-12)
            for q, v in got.quantiles.items():  # exact at this size, approximate or not
                assert v == pytest.approx(float(np.quantile(nums, q)), rel=1e-9, abs=1e-12)
            edges, counts = got.histogram
            assert counts == np.histogram(nums, bins=np.asarray(edges))[0].tolist()
            assert sum(counts) == len(nums)
        assert got.distinct == values.nunique()  # exact below 50,000, approximate or not


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])  # fmt: skip
@given(
    sizes=st.lists(st.integers(0, 70), min_size=1, max_size=3),
    seed=st.integers(0, 2**31),
    delete_mod=st.integers(2, 9),
    update=st.booleans(),
)
def test_stats_equal_pandas(
    local_wh: omnitable.Warehouse, sizes: list[int], seed: int, delete_mod: int, update: bool
) -> None:
    rng = np.random.default_rng(seed)
    t = local_wh.create_table(f"h{next(_names)}", SCHEMA, groups=GROUPS)
    for k, n in enumerate(sizes):
        t.append(_batch(rng, n), f"b{k}", target_fragment_rows=16)
    _check(t, exact=True)
    if t.count() == 0:
        return
    t.delete(pc.bit_wise_and(pc.field(ROW_ID), pc.scalar(delete_mod - 1)) == 0)
    if update and t.count() > 0:
        ids = t.read([ROW_ID])[ROW_ID].to_pylist()[::3]
        t.update(pa.table({ROW_ID: ids, "i": [10_000 + j for j in range(len(ids))],
                           "s": ["zz"] * len(ids)}))  # fmt: skip
    _check(t, exact=True)
    _check(t, exact=False)


def _hide_data_files(root: Path) -> int:
    moved = 0
    for path in root.rglob("*.parquet"):
        path.rename(path.with_suffix(".hidden"))
        moved += 1
    return moved


def test_metadata_answers_without_reading_data(wh: omnitable.Warehouse) -> None:
    t = wh.create_table(f"m{next(_names)}", SCHEMA)
    rng = np.random.default_rng(7)
    t.append(_batch(rng, 100), "b0", target_fragment_rows=25)
    t.append(_batch(rng, 50), "b1", target_fragment_rows=25)
    ids = t.read([ROW_ID, "i"]).sort_by(ROW_ID)
    t.update(pa.table({ROW_ID: ids[ROW_ID][:2], "i": [-999, 999]}))  # a patched fragment
    df = t.read(list(SCHEMA)).to_pandas()
    before = t.stats(["i", "f"], version=t.version - 1)
    assert _hide_data_files(Path(t.location.path)) > 0  # a read now fails: no file is opened
    stats = t.stats(["i", "f", "s"])
    assert stats.files_opened == 0 and stats.rows == 150
    assert (stats["i"].min, stats["i"].max) == (-999, 999)
    assert (before["i"].min, before["i"].max) == (df["i"][2:].min(), df["i"][2:].max())
    for name in ("i", "f", "s"):
        assert stats[name].count == df[name].count()
        assert stats[name].null_count == df[name].isna().sum()
        assert stats[name].max == df[name].max()
    with pytest.raises(omnitable.exceptions.CorruptInputError):
        _ = stats["i"].mean  # the scan is lazy: only now are files needed


def test_deleted_rows_are_read_not_reported(local_wh: omnitable.Warehouse) -> None:
    t = local_wh.create_table(f"d{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": list(range(100))}), "b0", target_fragment_rows=25)
    t.delete(pc.field("x") >= 90)  # only the last fragment: its file statistics still say 99
    stats = t.stats()
    assert (stats["x"].count, stats["x"].max, stats.files_opened) == (90, 89, 1)
    t.delete(pc.field("x") >= 75)  # the whole last fragment: dropped, nothing read
    assert (t.stats()["x"].max, t.stats().files_opened) == (74, 0)
    frame = t.stats().to_pandas()
    assert frame.loc["x", "count"] == 75 and frame.loc["x", "distinct"] == 75
    assert frame.loc["x", "q0.5"] == pytest.approx(37.0)


def test_bad_input(local_wh: omnitable.Warehouse) -> None:
    t = local_wh.create_table(f"e{next(_names)}", {"x": "bigint"})
    with pytest.raises(UnknownColumnError, match="no column 'nope'"):
        t.stats(["nope"])
    with pytest.raises(ValidationError, match="system column"):
        t.stats([ROW_ID])
    with pytest.raises(ValidationError, match="list of names"):
        t.stats("x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="bins"):
        t.stats(bins=0)
    with pytest.raises(ValidationError, match="quantiles"):
        t.stats(quantiles=(1.5,))
    with pytest.raises(ValidationError, match="version is an int"):
        t.stats(version="1")  # type: ignore[arg-type]
    empty = t.stats()
    assert (empty.rows, empty["x"].count, empty["x"].min, empty["x"].mean) == (0, 0, None, None)
    assert os.fspath(Path(t.location.path))  # the table has a local location


def test_sketches_past_their_exact_range(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DistinctSketch, "SMALL", 1000)
    rng = np.random.default_rng(5)
    values = rng.lognormal(size=60_000)
    distinct, quantiles = DistinctSketch(), QuantileSketch()
    for part in np.array_split(values, 9):  # fragments, merged
        distinct.add(hash_values(pa.array(np.r_[part, part[:50]])))  # repeats count once
        quantiles.add(part)
    assert distinct._small is None  # the HyperLogLog registers answer
    assert abs(distinct.estimate() - len(values)) < 0.03 * len(values)
    qs = [0.01, 0.1, 0.5, 0.9, 0.99]
    ranks = np.searchsorted(np.sort(values), quantiles.quantiles(qs)) / len(values)
    assert np.abs(ranks - np.array(qs)).max() < 0.005  # rank error, not value error
