"""Row groups are capped by rows and by bytes, so a reader never holds more than about
``row_group_bytes`` of one file at a time (docs/format.md, "Column files")."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable.exceptions import ValidationError
from omnitable.format.writer import WriteOptions, row_group_rows


def _text(rows: int, width: int = 2000) -> pa.Table:
    return pa.table({"text": [f"{i:08d}" + "x" * (width - 8) for i in range(rows)]})


def test_wide_rows_get_fewer_rows_per_row_group() -> None:
    defaults = WriteOptions()
    assert row_group_rows(pa.table({"x": list(range(1000))}), defaults) == 131_072  # 8 B rows
    per_row = _text(100).nbytes / 100  # about 2 KB: 131,072 rows would be ~260 MB
    assert row_group_rows(_text(100), defaults) == int(64 * 1024 * 1024 // per_row)
    assert row_group_rows(_text(100), WriteOptions(row_group_bytes=None)) == 131_072
    assert row_group_rows(_text(100), WriteOptions(row_group_bytes=1000)) == 1  # never below 1


def test_files_are_written_with_byte_capped_row_groups(tmp_path: Path) -> None:
    options = WriteOptions(row_group_bytes=256 * 1024)
    wh = omnitable.connect(tmp_path / "wh", write_options=options)
    t = wh.create_table("docs", {"n": "bigint", "text": "string"}, groups={"wide": ["text"]})
    data = _text(3000).append_column("n", pa.array(range(3000), pa.int64()))
    t.append(data, "b1")
    (fragment,) = t.snapshot().fragments
    for f in t.snapshot().files_by_fragment[fragment.fragment_id]:
        meta = pq.read_metadata(t.location.child_path(f.path))
        assert sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) == 3000
        if f.group_name == "wide":  # ~2 KB rows: 130 rows per group
            assert meta.num_row_groups == 24
            assert all(meta.row_group(i).total_byte_size <= 300 * 1024 for i in range(24))
        else:  # narrow columns keep one row-count-capped group
            assert meta.num_row_groups == 1
    assert (
        t.read(columns=["n", "text"])
        .sort_by("n")
        .equals(data.select(["n", "text"]).cast(t.read(columns=["n", "text"]).schema))
    )


def test_row_group_bytes_is_validated() -> None:
    with pytest.raises(ValidationError, match="row_group_bytes must be a positive integer"):
        WriteOptions(row_group_bytes=0).validated()
