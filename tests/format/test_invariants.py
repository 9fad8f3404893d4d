"""DESIGN.md §4 invariants, checked on a mixed workload (each test names its invariant).

Atomic visibility (3) is covered by tests/table/test_crash.py, zero-copy evolution (6) by
tests/table/test_add_columns.py.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from sqlalchemy import text

import omnitable
from omnitable import ROW_ID


@pytest.fixture
def busy(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(
        "w", {"text": "string", "a": "double", "b": "double"}, groups={"ga": ["a"], "gb": ["b"]}
    )
    rng = np.random.default_rng(1)
    for i in range(3):
        n = int(rng.integers(50, 200))
        t.append(
            pa.table(
                {
                    "text": [f"{i}-{k}" for k in range(n)],
                    "a": rng.normal(size=n),
                    "b": rng.normal(size=n),
                }
            ),
            f"b{i}",
            target_fragment_rows=37,
            row_group_size=int(rng.integers(3, 20)),
        )
    ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_numpy()
    t.add_columns(pa.table({ROW_ID: ids, "twice": ids * 2}))  # value is a function of the key
    t.append(pa.table({"text": ["r"] * 40}), "b1", mode="replace", target_fragment_rows=16)
    return t


def _all_files(t: omnitable.Table) -> dict[str, str]:
    out = {}
    for info in t.location.fs.get_file_info(pafs.FileSelector(t.location.path, recursive=True)):
        if info.type == pafs.FileType.File:
            with t.location.fs.open_input_stream(info.path) as f:
                out[info.path] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_1_alignment_every_file_has_its_fragments_rows_in_order(busy: omnitable.Table) -> None:
    snap = busy.snapshot()
    for frag in snap.fragments:
        for f in snap.files_by_fragment[frag.fragment_id]:
            meta = pq.ParquetFile(busy.location.child_path(f.path)).metadata
            assert meta.num_rows == frag.row_count == f.row_count
    out = busy.read(columns=[ROW_ID, "twice"], batches=["b0", "b2"])
    assert out.column("twice").to_pylist() == [2 * i for i in out.column(ROW_ID).to_pylist()]


def test_1_alignment_violation_is_detected_not_silently_read(busy: omnitable.Table) -> None:
    snap = busy.snapshot()
    frag = snap.fragments[0]
    victim = next(f for f in snap.files_by_fragment[frag.fragment_id] if f.group_name == "ga")
    pq.write_table(pa.table({"a": [1.0]}), busy.location.child_path(victim.path))
    with pytest.raises(omnitable.CorruptInputError, match="alignment"):
        busy.read(columns=["a"])


def test_2_immutability_no_file_is_ever_rewritten(busy: omnitable.Table) -> None:
    before = _all_files(busy)
    ids = busy.read(columns=[ROW_ID]).column(ROW_ID).to_numpy()
    busy.add_columns(pa.table({ROW_ID: ids, "z": ids}))
    busy.append(pa.table({"text": ["n"]}), "b2", mode="replace")
    busy.append(pa.table({"text": ["m"]}), "b3")
    after = _all_files(busy)
    assert {p: after[p] for p in before} == before
    # and old versions still read their data
    assert busy.read(columns=["text"], version=1).num_rows > 0


def test_5_nothing_lost_every_appended_row_is_readable_once(busy: omnitable.Table) -> None:
    batches = {b.name: b.rows for b in busy.batches()}
    assert batches["b1"] == 40
    out = busy.read(columns=[ROW_ID, "_ai_append_name_"])
    assert out.num_rows == sum(batches.values())
    assert len(set(out.column(ROW_ID).to_pylist())) == out.num_rows
    for name, rows in batches.items():
        assert busy.read(columns=[ROW_ID], batches=[name]).num_rows == rows


def test_3_catalog_never_references_uncommitted_files(
    busy: omnitable.Table, wh: omnitable.Warehouse
) -> None:
    with pytest.raises(omnitable.SchemaMismatchError):
        busy.append(pa.table({"a": ["bad"]}), "bad")
    with wh.catalog.store.read() as conn:
        paths = {r[0] for r in conn.execute(text("SELECT path FROM files"))}
    on_disk = {p[len(busy.location.path) + 1 :] for p in _all_files(busy)}
    assert paths <= on_disk  # every referenced file exists
    assert on_disk == paths  # failed writes cleaned up what they wrote
