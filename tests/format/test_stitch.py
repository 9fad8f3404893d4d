"""Files written in parts on several threads and stitched into one (format/stitch.py): they read
back as the data, through pyarrow, the page reader and every layout the writer picks, and carry
the row groups and page index one writer would have written."""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omnitable.format import pages, stitch
from omnitable.format import thrift_compact as tc
from omnitable.format import writer as writer_module
from omnitable.format.fs import resolve_location
from omnitable.format.writer import WriteOptions, file_parts, write_column_file

_names = itertools.count()


def _table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {
            "i": pa.array([i if i % 7 else None for i in range(n)], pa.int64()),
            "f": pa.array(rng.random(n)),
            "s": pa.array([f"s{i % 40}" if i % 5 else None for i in range(n)]),
            "text": pa.array(
                ["w" * int(k) + str(i) for i, k in enumerate(rng.integers(0, 400, n))]
            ),
            "l": pa.array([None if i % 9 == 0 else [i, None][: i % 3] for i in range(n)]),
            "st": pa.array([None if i % 4 == 0 else {"p": i, "q": str(i)} for i in range(n)]),
        }
    )


def _parquet(table: pa.Table, **options: object) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_page_index=True, **options)
    return sink.getvalue()


def _stitched(parts: list[pa.Buffer]) -> bytes:
    sink = io.BytesIO()
    written = stitch.stitch(parts, sink)
    raw = sink.getvalue()
    assert written == len(raw)
    return raw


def _offset_indexes(raw: bytes) -> list[list[tuple[int, int, int]]]:
    """Every chunk's page locations (offset, size, first row), read from the file's footer."""
    n = int.from_bytes(raw[-8:-4], "little")
    meta, _ = tc.decode_struct(raw[-8 - n : -8])
    out = []
    for group in meta.get(4).items:
        for chunk in group.get(1).items:
            index, _ = tc.decode_struct(raw, chunk.get(4))
            out.append([(p.get(1), p.get(2), p.get(3)) for p in index.get(1).items])
    return out


_OPTIONS = [
    {"row_group_size": 50, "max_rows_per_page": 7},
    {"row_group_size": 333, "compression": "snappy", "use_dictionary": False},
    {"row_group_size": 100, "data_page_version": "2.0", "compression": "none"},
    {"row_group_size": 64, "compression": "zstd", "max_rows_per_page": 1},
]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 1_500),
    options=st.sampled_from(_OPTIONS),
    cuts=st.lists(st.integers(0, 1_500), max_size=4),
    data=st.data(),
)
def test_a_stitched_file_reads_as_its_parts_in_order(
    n: int, options: dict, cuts: list[int], data: st.DataObject
) -> None:
    table = _table(n)
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    parts = [_parquet(table.slice(a, b - a), **options) for a, b in itertools.pairwise(bounds)]
    raw = _stitched(parts)
    back = pq.ParquetFile(pa.BufferReader(raw))
    assert back.read().equals(table)
    metas = [pq.ParquetFile(pa.BufferReader(p)).metadata for p in parts]
    assert back.metadata.num_row_groups == sum(m.num_row_groups for m in metas)
    groups = [m.row_group(g) for m in metas for g in range(m.num_row_groups)]
    for g, want in enumerate(groups):  # the parts' row groups, statistics and all
        got = back.metadata.row_group(g)
        assert got.num_rows == want.num_rows
        assert got.to_dict()["columns"][0]["statistics"] == want.to_dict()["columns"][0][
            "statistics"]  # fmt: skip
        assert back.read_row_group(g).num_rows == want.num_rows
    # every page location points at a page header of the stitched file, in order
    for locations in _offset_indexes(raw):
        for offset, size, _ in locations:
            header, _ = tc.decode_struct(raw, offset)
            assert header.get(3) == size - (_header_len(raw, offset))  # compressed_page_size
    # the page reader (offset index, footer) reads any rows of it
    rows = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=20))))
    columns = data.draw(st.lists(st.sampled_from(table.column_names), min_size=1, unique=True))
    got = pages.read_pages(pa.BufferReader(raw), f"mem:stitch{next(_names)}", columns, rows,
                           max_fraction=1.0)  # fmt: skip
    assert got is not None
    assert got.table.equals(table.select(columns).take(pa.array(rows)))


def _header_len(raw: bytes, offset: int) -> int:
    _, end = tc.decode_struct(raw, offset)
    return end - offset


@settings(max_examples=60, deadline=None)
@given(
    offsets=st.lists(st.integers(4, 2**40), min_size=1, max_size=40),
    sizes=st.lists(st.integers(1, 2**31 - 1), min_size=40, max_size=40),
    shift=st.integers(-4, 2**45),
    extra=st.booleans(),
)
def test_the_fast_offset_shift_equals_the_generic_codec(
    offsets: list[int], sizes: list[int], shift: int, extra: bool
) -> None:
    """The vectorized rewrite of page locations gives the bytes the generic codec gives (short
    and long list headers, varints growing by a byte, a trailing field it copies)."""
    offsets = sorted(offsets)
    locations = [
        tc.Struct([[1, tc.I64, off], [2, tc.I32, size], [3, tc.I64, 10 * k]])
        for k, (off, size) in enumerate(zip(offsets, sizes, strict=False))
    ]
    fields = [[1, tc.LIST, tc.ThriftList(tc.STRUCT, locations)]]
    if extra:  # unencoded_byte_array_data_bytes
        fields.append([2, tc.LIST, tc.ThriftList(tc.I64, [5] * len(locations))])
    blob = tc.encode_struct(tc.Struct(fields))
    if offsets[0] + shift < 0:
        shift = -offsets[0]
    fast = stitch._shift_page_locations(np.frombuffer(blob, np.uint8), shift)
    assert fast is not None
    index, _ = tc.decode_struct(blob)
    for page in index.get(1).items:
        page.set(1, tc.I64, page.get(1) + shift)
    assert fast == tc.encode_struct(index)
    assert stitch.shift_offset_index(blob, shift) == fast


def test_an_unusual_offset_index_takes_the_generic_path() -> None:
    odd = tc.Struct([[1, tc.LIST, tc.ThriftList(tc.STRUCT, [
        tc.Struct([[1, tc.I64, 100], [3, tc.I64, 0]])])]])  # fmt: skip
    blob = tc.encode_struct(odd)
    assert stitch._shift_page_locations(np.frombuffer(blob, np.uint8), 5) is None
    moved, _ = tc.decode_struct(stitch.shift_offset_index(blob, 5))
    assert moved.get(1).items[0].get(1) == 105


def test_parts_that_cannot_be_stitched_are_refused() -> None:
    a = _parquet(pa.table({"x": [1, 2]}))
    with pytest.raises(ValueError, match="different schemas"):
        _stitched([a, _parquet(pa.table({"y": [1, 2]}))])
    with pytest.raises(ValueError, match="not an unencrypted Parquet file"):
        _stitched([a, pa.py_buffer(b"PAR1 not parquet")])
    with pytest.raises(ValueError, match="bloom filter"):
        _stitched([a, _parquet(pa.table({"x": [3]}), bloom_filter_options={"x": True})])


def test_the_writer_cuts_files_at_row_groups_and_only_when_it_pays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = _table(1_000)
    assert file_parts(table, 100, 4) == [table]  # under PART_MIN_BYTES: one part
    monkeypatch.setattr(writer_module, "PART_MIN_BYTES", 1)
    parts = file_parts(table, 100, 4)
    assert [p.num_rows for p in parts] == [300, 300, 300, 100]  # 10 row groups on 4 threads
    assert file_parts(table, 100, 1) == [table]
    assert file_parts(table, 1_000, 4) == [table]  # one row group
    monkeypatch.setattr(writer_module, "PART_MIN_BYTES", table.nbytes // 2)
    assert [p.num_rows for p in file_parts(table, 100, 4)] == [500, 500]


@pytest.mark.parametrize("options", [
    WriteOptions(row_group_size=200),
    WriteOptions(row_group_size=150, page_rows=64),  # a keyed table's small pages
    WriteOptions(row_group_size=300, wide_row_bytes=64, wide_data_page_size=2048),
])  # fmt: skip
def test_a_column_file_written_in_parts_equals_one_written_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory, options: WriteOptions
) -> None:
    table = _table(1_000, seed=3)
    location = resolve_location(str(tmp_path_factory.mktemp("parts")))
    whole = write_column_file(location, "f", "whole", "g", table, {}, options, threads=4)
    monkeypatch.setattr(writer_module, "PART_MIN_BYTES", 1)
    parted = write_column_file(location, "f", "parted", "g", table, {}, options, threads=4)
    files = [pq.ParquetFile(location.child_path(d.path)) for d in (whole, parted)]
    assert files[1].read().equals(files[0].read()) and files[1].read().equals(table)
    assert parted.columns == whole.columns and parted.row_count == 1_000
    metas = [f.metadata for f in files]
    assert metas[1].num_row_groups == metas[0].num_row_groups > 1
    for g in range(metas[0].num_row_groups):  # same row groups, same pages
        for c in range(metas[0].num_columns):
            a, b = metas[0].row_group(g).column(c), metas[1].row_group(g).column(c)
            assert (a.num_values, a.total_compressed_size, a.statistics) == (
                b.num_values, b.total_compressed_size, b.statistics)  # fmt: skip
    raws = [Path(location.child_path(d.path)).read_bytes() for d in (whole, parted)]
    assert [[(s, r) for _, s, r in loc] for loc in _offset_indexes(raws[1])] == [
        [(s, r) for _, s, r in loc] for loc in _offset_indexes(raws[0])]  # fmt: skip


class _Recorder(io.BytesIO):
    """A sink that keeps the size of every write."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, b: object) -> int:
        self.sizes.append(memoryview(b).nbytes)  # type: ignore[arg-type]
        return super().write(b)  # type: ignore[arg-type]


def test_a_large_part_is_written_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part's column data reaches the sink in writes of at most ``_BUFFER`` bytes (one write of
    tens of MB into a new file was measured ~50x slower than the same bytes in 4 MiB pieces)."""
    monkeypatch.setattr(stitch, "_BUFFER", 32 * 1024)
    table = _table(3_000)
    parts = [_parquet(table.slice(a, 1_000), compression="none") for a in (0, 1_000, 2_000)]
    assert min(p.size for p in parts) > 4 * stitch._BUFFER  # each part needs several pieces
    sink = _Recorder()
    written = stitch.stitch(parts, sink)
    assert max(sink.sizes) <= stitch._BUFFER
    raw = sink.getvalue()
    assert written == len(raw)
    assert pq.ParquetFile(pa.BufferReader(raw)).read().equals(table)
