from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable import ROW_ID


@pytest.fixture
def docs(wh: omnitable.Warehouse) -> omnitable.Table:
    return wh.create_table(
        "docs",
        {"text": "string", "n": "bigint", "score": "double"},
        groups={"nums": ["n", "score"]},
    )


def test_append_pandas_assigns_unique_ids_and_batch_names(docs: omnitable.Table) -> None:
    v1 = docs.append(pd.DataFrame({"text": ["a", "b"], "n": [1, 2], "score": [0.5, 0.25]}), "b1")
    v2 = docs.append(pd.DataFrame({"text": ["c"], "n": [3], "score": [1.0]}), "b2")
    assert (v1, v2) == (1, 2)
    out = docs.read()
    assert out.column_names == [ROW_ID, "_ai_append_name_", "text", "n", "score"]
    assert out.column("text").to_pylist() == ["a", "b", "c"]
    assert out.column("_ai_append_name_").to_pylist() == ["b1", "b1", "b2"]
    ids = out.column(ROW_ID).to_pylist()
    assert len(set(ids)) == 3
    assert [b.name for b in docs.batches()] == ["b1", "b2"]
    assert [b.rows for b in docs.batches()] == [2, 1]


def test_append_arrow_reader_and_fragment_cutting(docs: omnitable.Table) -> None:
    n = 1000
    table = pa.table(
        {"text": [f"t{i}" for i in range(n)], "n": np.arange(n), "score": np.linspace(0, 1, n)}
    )
    docs.append(
        table.to_reader(max_chunksize=77), "b1", target_fragment_rows=300, row_group_size=64
    )
    assert [b.fragments for b in docs.batches()] == [4]
    assert docs.read(columns=["n"]).column("n").to_pylist() == list(range(n))
    snap = docs.snapshot()
    assert sorted(f.row_count for f in snap.fragments) == [100, 300, 300, 300]


def test_append_parquet_glob_and_jsonl(docs: omnitable.Table, tmp_path: Path) -> None:
    for i in range(3):
        pq.write_table(pa.table({"text": [f"p{i}"], "n": [i]}), tmp_path / f"part-{i}.parquet")
    docs.append(str(tmp_path / "part-*.parquet"), "parquet")
    lines = [json.dumps({"text": f"j{i}", "score": i / 2}) for i in range(4)]
    (tmp_path / "x.jsonl").write_text("\n".join(lines) + "\n")
    docs.append(tmp_path / "x.jsonl", "jsonl")
    out = docs.read(columns=["text", "n", "score"], batches=["jsonl"])
    assert out.column("text").to_pylist() == ["j0", "j1", "j2", "j3"]
    assert out.column("n").null_count == 4  # missing nullable column reads as NULL
    assert docs.read(columns=["text"], batches=["parquet"]).column("text").to_pylist() == [
        "p0",
        "p1",
        "p2",
    ]


def test_existing_batch_is_an_error_unless_replace(docs: omnitable.Table) -> None:
    docs.append(pa.table({"text": ["a", "b"]}), "b1")
    docs.append(pa.table({"text": ["z"]}), "b2")
    with pytest.raises(omnitable.AlreadyExistsError, match="mode='replace'"):
        docs.append(pa.table({"text": ["c"]}), "b1")
    before = docs.version
    docs.append(pa.table({"text": ["c", "d", "e"]}), "b1", mode="replace")
    assert docs.version == before + 1
    assert docs.read(columns=["text"], batches=["b1"]).column("text").to_pylist() == ["c", "d", "e"]
    assert docs.read(columns=["text"], version=before, batches=["b1"]).column(
        "text"
    ).to_pylist() == ["a", "b"]
    assert docs.count() == 4


def test_supplied_ids_are_kept_and_validated(docs: omnitable.Table) -> None:
    docs.append(pa.table({ROW_ID: [10, 20, 30], "text": ["a", "b", "c"]}), "b1")
    assert docs.read(columns=[ROW_ID]).column(ROW_ID).to_pylist() == [10, 20, 30]
    with pytest.raises(omnitable.ValidationError, match="already exist"):
        docs.append(pa.table({ROW_ID: [40, 20], "text": ["x", "y"]}), "b2")
    with pytest.raises(omnitable.ValidationError, match="duplicate"):
        docs.append(pa.table({ROW_ID: [41, 41], "text": ["x", "y"]}), "b2")
    with pytest.raises(omnitable.ValidationError, match="null"):
        docs.append(pa.table({ROW_ID: pa.array([42, None], pa.int64()), "text": ["x", "y"]}), "b2")
    assert docs.version == 1
    # generated ids never collide with supplied ones
    docs.append(pa.table({"text": ["g"]}), "b3")
    assert docs.read(columns=[ROW_ID], batches=["b3"]).column(ROW_ID).to_pylist()[0] > 30


def test_replacing_a_batch_may_reuse_its_ids(docs: omnitable.Table) -> None:
    docs.append(pa.table({ROW_ID: [1, 2], "text": ["a", "b"]}), "b1")
    docs.append(pa.table({ROW_ID: [1, 2], "text": ["A", "B"]}), "b1", mode="replace")
    assert docs.read(columns=["text"]).column("text").to_pylist() == ["A", "B"]


def test_empty_append_creates_an_empty_batch(docs: omnitable.Table) -> None:
    docs.append(pa.table({"text": pa.array([], pa.string())}), "empty")
    assert [(b.name, b.rows, b.fragments) for b in docs.batches()] == [("empty", 0, 1)]
    assert docs.read().num_rows == 0


def test_types_are_widened_safely(docs: omnitable.Table) -> None:
    docs.append(
        pa.table({"n": pa.array([1, 2], pa.int8()), "score": pa.array([1, 2], pa.int32())}), "b1"
    )
    out = docs.read(columns=["n", "score"])
    assert out.schema.field("n").type == pa.int64()
    assert out.column("score").to_pylist() == [1.0, 2.0]


def test_every_failed_append_is_recorded_as_a_failed_run(docs: omnitable.Table) -> None:
    with pytest.raises(omnitable.SchemaMismatchError):
        docs.append(pa.table({"n": ["not a number"]}), "bad")
    assert docs.version == 0
