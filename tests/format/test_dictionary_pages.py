"""Dictionary-encoded pages read in place (format/dictionary_pages.py, ``gather_dictionary``):
equal to pyarrow's read and take over integer and float types, required and optional fields,
page versions and sizes, row groups, codecs and cardinalities, from memory-mapped, streamed and
in-memory files; None (the caller decodes) for every page it does not read; the bit unpacking
against a bit-by-bit reference; a damaged index is not read; and a keyed table's lookup takes
its dictionary columns this way."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.format import pages
from omnitable.format import thrift_compact as tc
from omnitable.format.dictionary_pages import IndexRuns, index_layout, unpack_indices
from omnitable.format.fs import mapped_file

_names = itertools.count()
_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
          pa.uint64(), pa.float32(), pa.float64()]  # fmt: skip


def _values(rng: np.random.Generator, n: int, type_: pa.DataType, distinct: int) -> np.ndarray:
    """``n`` values of ``type_`` drawn from ``distinct`` ones spread over the type's range
    (negative and top-bit values included)."""
    dtype = np.dtype(type_.to_pandas_dtype())
    if dtype.kind == "f":
        pool = (rng.standard_normal(distinct) * 1e6).astype(dtype)
    else:
        info = np.iinfo(dtype)
        pool = rng.integers(info.min, info.max, distinct, dtype=dtype, endpoint=True)
    return pool[rng.integers(0, distinct, n)]


def _handle(path: Path, how: str) -> pa.NativeFile:
    if how == "mapped":
        return mapped_file(str(path))
    if how == "memory":
        return pa.BufferReader(path.read_bytes())
    return pa.OSFile(str(path))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 3_000),
    type_=st.sampled_from(_TYPES),
    required=st.booleans(),
    nulls=st.sampled_from([0.0, 0.001, 0.3]),
    distinct=st.sampled_from([1, 2, 50, 1_000]),
    page_rows=st.sampled_from([1, 7, 8, 9, 64, 504, 505, 512, 2_000]),
    row_group=st.sampled_from([9, 500, 100_000]),
    version=st.sampled_from(["1.0", "2.0"]),
    codec=st.sampled_from(["none", "zstd"]),
    how=st.sampled_from(["mapped", "streamed", "memory"]),
    data=st.data(),
)
def test_dictionary_values_read_in_place_equal_a_pyarrow_read_and_take(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    type_: pa.DataType,
    required: bool,
    nulls: float,
    distinct: int,
    page_rows: int,
    row_group: int,
    version: str,
    codec: str,
    how: str,
    data: st.DataObject,
) -> None:
    """A gather answers exactly when every page holding a wanted row is an uncompressed
    dictionary page without NULLs (its indices in bit-packed runs, RLE runs of a repeated
    value, or both), and then equals pyarrow's read and take."""
    rng = np.random.default_rng(n)
    values = _values(rng, n, type_, distinct)
    mask = None if required or nulls == 0 else rng.random(n) < nulls
    field = pa.field("v", type_, nullable=not required)
    table = pa.table({"v": pa.array(values, type_, mask=mask)}, schema=pa.schema([field]))
    path = tmp_path_factory.mktemp("dictionary") / "f.parquet"
    pq.write_table(table, path, write_page_index=True, max_rows_per_page=page_rows,
                   row_group_size=row_group, data_page_version=version, compression=codec,
                   use_dictionary=True)  # fmt: skip
    rows = np.array(
        sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=60))), np.int64
    )
    uri = f"mem:{next(_names)}"
    with _handle(path, how) as handle:
        got = pages.gather_dictionary(handle, uri, "v", rows)
        info = pages._file_info(handle, uri)
        assert info is not None
        found = pages._leaf_pages(handle, info, [0])
        assert found is not None
    page = np.searchsorted(found[0].starts, rows, side="right") - 1
    null_pages = mask is not None and any(
        mask[found[0].starts[i] : found[0].ends[i]].any() for i in np.unique(page)
    )
    want = table.column("v").take(pa.array(rows))
    if codec != "none" or null_pages:
        assert got is None  # compressed, or a NULL in a page read: decoded instead
    else:
        assert got is not None  # bit-packed and RLE runs alike
    if got is not None:
        assert got.file_rows == n
        assert got.table.column("v").equals(pa.chunked_array([want]))
        assert 0 < got.bytes_read <= path.stat().st_size


@settings(max_examples=200, deadline=None)
@given(
    blob=st.binary(min_size=1, max_size=64),
    width=st.integers(0, 32),
    data=st.data(),
)
def test_unpacking_equals_a_bit_by_bit_reference(
    blob: bytes, width: int, data: st.DataObject
) -> None:
    """Values at any bit, of any width, near the end of the bytes (read as zeros past it) or
    with 8 bytes to spare (one 64-bit load each)."""
    bits = len(blob) * 8
    at = np.array(data.draw(st.lists(st.integers(0, bits - 1), min_size=1, max_size=20)), np.int64)
    as_int = int.from_bytes(blob, "little")
    want = [(as_int >> int(a)) & ((1 << width) - 1) for a in at]
    got = unpack_indices(np.frombuffer(blob, np.uint8), at, width)
    assert got.tolist() == want


def _one_page_file(values: pa.Array) -> tuple[bytes, pages._FileInfo, pages._Pages]:
    raw = pa.BufferOutputStream()
    pq.write_table(pa.table({"v": values}), raw, write_page_index=True, compression="none",
                   use_dictionary=True, max_rows_per_page=512)  # fmt: skip
    data = raw.getvalue().to_pybytes()
    handle = pa.BufferReader(data)
    info = pages._file_info(handle, f"mem:{next(_names)}")
    assert info is not None
    found = pages._leaf_pages(handle, info, [0])
    assert found is not None
    return data, info, found[0]


def test_runs_of_a_page_and_pages_not_read_in_place() -> None:
    """Bit-packed runs of 504 values and the rest, RLE runs of a repeated value; a page cut
    short, with bytes left over or of another value count: None, so the caller decodes it."""
    rng = np.random.default_rng(3)
    data, _, p = _one_page_file(pa.array(rng.integers(0, 1_000, 512), pa.int32()))
    page = memoryview(data)[int(p.offsets[0]) : int(p.offsets[0] + p.sizes[0])]
    layout = index_layout(page, 1, 512)
    assert layout is not None and layout.width in (9, 10)
    assert layout.starts.tolist() == [0, 504] and layout.packed.tolist() == [True, True]
    assert index_layout(page, 1, 511) is None  # not the page's value count
    assert index_layout(page[:-1], 1, 512) is None  # cut short
    assert index_layout(memoryview(bytes(page) + b"\0"), 1, 512) is None  # bytes left over
    for values in ([7] * 100 + list(range(412)), [*rng.integers(0, 1_000, 504).tolist(), 3]):
        repeated, _, q = _one_page_file(pa.array(values, pa.int32()))
        head = memoryview(repeated)[int(q.offsets[0]) : int(q.offsets[0] + q.sizes[0])]
        runs = index_layout(head, 1, len(values))
        assert runs is not None and runs.packed.any() and not runs.packed.all()
        if values[0] == 7:
            assert runs.starts.tolist() == [0, 100] and runs.packed.tolist() == [False, True]
        else:  # the value after 504 packed ones: an RLE run of one
            assert runs.starts.tolist() == [0, 504] and runs.packed.tolist() == [True, False]
        rows = np.array([0, 99, 100, 150, 503, 504])
        got = pages.gather_dictionary(pa.BufferReader(repeated), f"mem:{next(_names)}", "v", rows)
        assert got is not None and got.table.column("v").to_pylist() == [values[r] for r in rows]


def test_runs_are_evenly_spaced_only_when_the_last_is_not_longer() -> None:
    """A page of bit-packed runs of 8 then 16 values (legal, though pyarrow caps runs at 504):
    value 20 is not in run 20 // 8, so the page is read through its runs, not by arithmetic."""
    runs = IndexRuns(2, np.array([0, 8]), np.array([True, True]), np.array([10, 13]))
    assert runs.spacing(16) == (8, 3) and runs.spacing(24) is None
    one = IndexRuns(2, np.array([0]), np.array([True]), np.array([10]))
    assert one.spacing(500) == (1 << 32, 0)
    rle = IndexRuns(2, np.array([0, 8]), np.array([False, True]), np.array([1, 12]))
    assert rle.spacing(16) is None


def test_row_groups_stored_out_of_order_are_not_read_in_place() -> None:
    """A footer listing a file's row groups in another order than their bytes (legal; pyarrow
    reads it): the gather declines instead of reading a span that does not hold the pages."""
    rng = np.random.default_rng(1)
    values = rng.integers(0, 50, 30).astype(np.int32)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"v": values}), sink, write_page_index=True, compression="none",
                   use_dictionary=True, row_group_size=10)  # fmt: skip
    data = sink.getvalue().to_pybytes()
    n = int.from_bytes(data[-8:-4], "little")
    meta, _ = tc.decode_struct(data[len(data) - 8 - n : len(data) - 8])
    groups = meta.get(4).items
    groups[0], groups[1] = groups[1], groups[0]  # the file's rows 0-9 now come second
    footer = tc.encode_struct(meta)
    swapped = data[: len(data) - 8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
    rows = np.array([0, 1, 15, 25])
    want = pq.read_table(pa.BufferReader(swapped)).column("v").take(pa.array(rows))
    got = pages.gather_dictionary(pa.BufferReader(swapped), f"mem:{next(_names)}", "v", rows)
    assert got is None or got.table.column("v").equals(pa.chunked_array([want]))
    in_order = np.array([0, 1])  # rows of one row group only: read in place
    one = pages.gather_dictionary(pa.BufferReader(swapped), f"mem:{next(_names)}", "v", in_order)
    assert one is not None and one.table.column("v").to_pylist() == values[10:12].tolist()


def test_an_index_past_the_dictionary_is_not_read_in_place() -> None:
    """A damaged page whose indices point past its row group's dictionary: the gather declines
    (the caller's decode then reports the damage) instead of returning some other value."""
    rng = np.random.default_rng(4)
    data, _, p = _one_page_file(pa.array(rng.integers(0, 1_000, 512), pa.int32()))
    start, size = int(p.offsets[0]), int(p.sizes[0])
    layout = index_layout(memoryview(data)[start : start + size], 1, 512)
    assert layout is not None
    damaged = bytearray(data)
    first = start + int(layout.at[0])
    damaged[first : first + layout.width] = b"\xff" * layout.width  # 8 indices of 2^width - 1
    rows = np.array([0, 3, 200])
    assert pages.gather_dictionary(pa.BufferReader(bytes(damaged)), "mem:bad", "v", rows) is None
    ok = pages.gather_dictionary(pa.BufferReader(data), "mem:ok", "v", rows)
    assert ok is not None


def test_a_keyed_lookup_reads_dictionary_columns_in_place(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed table's small, low-cardinality integer column (stored uncompressed, dictionary
    encoded) is looked up without decoding a page: the page decoder is never called."""
    from omnitable.format import reader

    rng = np.random.default_rng(5)
    n = 40_000
    t = wh.create_table("kd", {"k": "bigint", "label": "smallint", "score": "double"}, key="k")
    t.upsert(pa.table({"k": pa.array(np.arange(n)), "label": pa.array(rng.integers(0, 900, n),
                       pa.int16()), "score": rng.random(n)}))  # fmt: skip

    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("a page was decoded")

    monkeypatch.setattr(reader, "read_pages", no_decoding)
    keys = rng.choice(n, 300, replace=False)
    got = t.lookup(keys.tolist(), ["label", "score", "k"])
    want = t.read(["label", "score", "k"]).take(pa.array(keys))
    assert got.equals(want)
