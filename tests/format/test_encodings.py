"""Column files choose each column's encoding from its data (docs/format.md, "Column files"):
a dictionary only where values repeat; every group of a fragment written, in order, by parallel
writers. Reads return what was appended either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable.format.writer import dictionary_columns


def _data(rows: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table(
        {
            "score": rng.random(rows),  # all distinct
            "label": pa.array(np.array(["cat", "dog", "eel"])[rng.integers(0, 3, rows)]),
            "flag": pa.array(rng.random(rows) < 0.5),
            "few": pa.array(rng.integers(0, 50, rows)),  # 50 values
            "text": pa.array([f"row {i} " + "x" * 40 for i in range(rows)]),
        }
    )


def test_dictionary_only_for_columns_whose_values_repeat() -> None:
    data = _data(20_000)
    assert dictionary_columns(data, 131_072) == ["label", "flag", "few"]
    short = data.slice(0, 1000)  # counted whole: 1000 distinct scores, 50 values of few
    assert dictionary_columns(short, 131_072) == ["label", "flag", "few"]
    assert dictionary_columns(data.slice(0, 10), 131_072) is True  # too few values to judge
    nested = data.append_column("v", pa.array([[1.0]] * len(data)))
    # nested columns keep theirs, by leaf path (as pyarrow names them)
    assert dictionary_columns(nested, 131_072) == ["label", "flag", "few", "v.list.element"]


def test_files_use_the_chosen_encodings_and_read_back_equal(tmp_path: Path) -> None:
    wh = omnitable.connect(tmp_path / "wh")
    data = _data(20_000)
    groups = {"a": ["score", "label"], "b": ["flag", "few"], "c": ["text"]}
    t = wh.create_table("enc", data.schema, groups=groups)
    t.append(data, "b1")
    (fragment,) = t.snapshot().fragments
    files = t.snapshot().files_by_fragment[fragment.fragment_id]
    assert [f.group_name for f in files] == ["base", "a", "b", "c"]  # ids first, then in order
    encodings: dict[str, bool] = {}
    for f in files:
        meta = pq.read_metadata(t.location.child_path(f.path))
        for i in range(meta.num_columns):
            col = meta.row_group(0).column(i)
            encodings[col.path_in_schema] = col.has_dictionary_page
    assert encodings == {
        "_ai_unique_id_": False,
        "score": False,
        "label": True,
        "flag": False,  # booleans have no dictionary in Parquet
        "few": True,
        "text": False,
    }
    got = t.read(columns=data.column_names).sort_by("text")
    assert got.equals(data.sort_by("text").cast(got.schema))


@pytest.mark.parametrize("codec", ["snappy", "none", "gzip", "lz4", "brotli", "zstd"])
def test_every_codec_writes_with_the_default_level(tmp_path: Path, codec: str) -> None:
    """``write.compression`` alone (``write.compression_level`` left at its default, 3): codecs
    without levels (snappy, uncompressed) ignore it instead of failing every append."""
    wh = omnitable.connect(tmp_path / "wh")
    data = _data(3_000)
    t = wh.create_table("c", data.schema, properties={"write.compression": codec})
    t.append(data, "b1")
    want = "UNCOMPRESSED" if codec == "none" else codec.upper()
    for f in (f for fs in t.snapshot().files_by_fragment.values() for f in fs):
        meta = pq.read_metadata(t.location.child_path(f.path))
        codecs = {meta.row_group(0).column(i).compression for i in range(meta.num_columns)}
        assert want in codecs  # the incompressible columns may be stored uncompressed
    got = t.read(columns=data.column_names).sort_by("text")
    assert got.equals(data.sort_by("text").cast(got.schema))
