"""``Table.export_mmap`` and ``omnitable.torch.MmapDataset``: the export equals ``read()`` cast
to float32 (NULL -> NaN) at a pinned version, statistics, bad input, a crash leaves the target,
and the memory cap of examples/train_mmap.py is real."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable.exceptions import AlreadyExistsError, UnknownColumnError, ValidationError
from omnitable.training import mmap

torch_mod = pytest.importorskip("torch")
from omnitable.torch import MmapDataset  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_mmap.py"


@pytest.fixture
def table(tmp_path: Path) -> omnitable.Table:
    wh = omnitable.connect(str(tmp_path / "wh"))
    t = wh.create_table("t", {"a": "double", "b": "bigint", "flag": "boolean", "s": "string",
                              "y": "float"})  # fmt: skip
    rng = np.random.default_rng(3)
    n = 250
    t.append(
        pa.table({
            "a": rng.standard_normal(n) * 100,
            "b": pa.array([None if i % 7 == 0 else i * 1_000_003 for i in range(n)], pa.int64()),
            "flag": [i % 3 == 0 for i in range(n)],
            "s": ["x"] * n,
            "y": rng.random(n).astype(np.float32),
        }),
        "b1", target_fragment_rows=60,
    )  # fmt: skip
    return t


def _expected(t: omnitable.Table, cols: list[str], **kw: object) -> np.ndarray:
    ref = t.read(cols, **kw)  # type: ignore[arg-type]
    return np.column_stack(
        [
            pc.cast(ref.column(c), pa.float32(), safe=False).to_numpy(zero_copy_only=False)
            for c in cols
        ]
    ).astype(np.float32)


def test_export_equals_read_cast_to_float32(table: omnitable.Table, tmp_path: Path) -> None:
    v1 = table.version
    table.delete(pc.field("a") > 50)  # deletes are honoured; the export pins v1 anyway
    out = table.export_mmap(tmp_path / "m", ["a", "b", "flag"], label="y", version=v1)
    expected = _expected(table, ["a", "b", "flag"], version=v1)
    ds = MmapDataset(out.path)
    assert len(ds) == out.rows == 250 and out.schema["version"] == v1
    assert np.array_equal(np.asarray(ds.features), expected, equal_nan=True)
    labels = table.read(["y"], version=v1).column(0).to_numpy()
    assert np.array_equal(np.asarray(ds.labels), labels)
    x, y = ds[8]
    assert float(y) == float(labels[8])
    assert x.dtype == torch_mod.float32 and np.array_equal(x.numpy(), expected[8], equal_nan=True)
    xb, yb = ds[[0, 5, -1]]
    assert xb.shape == (3, 3) and float(yb[2]) == float(labels[-1])
    with pytest.raises(IndexError):
        ds[250]
    stats = json.loads((out.path / "schema.json").read_text())["normalization"]
    b = expected[:, 1].astype(np.float64)
    assert stats["b"]["nulls"] == 36 and stats["b"]["count"] == 214
    assert stats["b"]["mean"] == pytest.approx(np.nanmean(b), rel=1e-9)
    assert stats["b"]["std"] == pytest.approx(np.nanstd(b), rel=1e-9)
    norm = MmapDataset(out.path, normalize=True)[1][0]
    assert float(norm[0]) == pytest.approx(
        (expected[1, 0] - stats["a"]["mean"]) / stats["a"]["std"], rel=1e-5
    )


def test_where_head_and_no_label(table: omnitable.Table, tmp_path: Path) -> None:
    table.delete(pc.field("b") < 50_000_000)
    where = pc.field("flag")
    out = table.export_mmap(tmp_path / "m", ["b"], where=where)
    assert not (out.path / "labels.bin").exists() and out.schema["label"] is None
    ds = MmapDataset(out.path)
    assert np.array_equal(
        np.asarray(ds.features), _expected(table, ["b"], where=where), equal_nan=True
    )
    assert ds[0].shape == (1,)


def test_bad_input_and_overwrite(table: omnitable.Table, tmp_path: Path) -> None:
    target = tmp_path / "m"
    with pytest.raises(ValidationError, match="column 's' is string, not numeric"):
        table.export_mmap(target, ["a", "s"])
    with pytest.raises(UnknownColumnError, match="no column 'nope'"):
        table.export_mmap(target, ["a"], label="nope")
    for bad in ([], "a", ["a", "a"]):
        with pytest.raises(ValidationError, match="features"):
            table.export_mmap(target, bad)  # type: ignore[arg-type]
    assert not target.exists()
    table.export_mmap(target, ["a"])
    with pytest.raises(AlreadyExistsError, match="overwrite=True"):
        table.export_mmap(target, ["b"])
    table.export_mmap(target, ["b"], overwrite=True)
    assert MmapDataset(target).schema["features"]["columns"] == ["b"]
    with pytest.raises(ValidationError, match="not an omnitable-mmap"):
        (tmp_path / "other").mkdir()
        (tmp_path / "other" / "schema.json").write_text("{}")
        MmapDataset(tmp_path / "other")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "other", "wh"]


def test_crash_leaves_the_target(
    table: omnitable.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "m"
    table.export_mmap(target, ["a"])
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    calls = []

    def crash(column: pa.ChunkedArray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 3:  # mid-way: some fragments written
            raise OSError("disk died")
        return real(column)

    real = mmap._float32
    monkeypatch.setattr(mmap, "_float32", crash)
    with pytest.raises(OSError, match="disk died"):
        table.export_mmap(target, ["a", "b"], overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "wh"]  # no temporary left


def test_a_read_failing_in_a_read_ahead_thread_fails_the_export_and_leaves_the_target(
    table: omnitable.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fragments are read ahead in threads (``mmap.READ_AHEAD``); the export still writes them
    in order, and a read that fails there fails the export with its error, nothing swapped in."""
    from omnitable.format.reader import FragmentReader

    target = tmp_path / "m"
    table.export_mmap(target, ["a"])
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    real, calls = FragmentReader.read_fragment, []

    def flaky(self: FragmentReader, *args: object, **kwargs: object) -> pa.Table:
        calls.append(1)
        if len(calls) == 4:
            raise OSError("fragment unreadable")
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(FragmentReader, "read_fragment", flaky)
    with pytest.raises(OSError, match="fragment unreadable"):
        table.export_mmap(target, ["a", "b"], overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "wh"]


def test_the_examples_memory_cap_is_real(tmp_path: Path) -> None:
    """examples/train_mmap.py trains under its cap (tests/test_examples.py runs it); loading the
    same export into memory under the same cap fails."""
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "wh"), "--rows", "160000",
         "--materialize"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "MemoryError" in proc.stderr, proc.stderr[-2000:]
