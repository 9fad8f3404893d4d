"""Byte-array values taken from their pages without decoding them (format/string_pages.py,
``gather_strings`` in format/pages.py): equal to pyarrow's read and take wherever they answer,
None (the caller decodes) for every page they do not read."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.format import pages, string_pages
from omnitable.format.reader import FragmentReader

_names = itertools.count()
_TYPES = [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]


def _values(rng: np.random.Generator, n: int, longest: int) -> list[str]:
    """Strings of 0..longest characters, some of them multi-byte."""
    alphabet = np.array(list("abcdefgh é€😀"))
    return ["".join(alphabet[rng.integers(0, len(alphabet), int(k))]) for k in
            rng.integers(0, longest + 1, n)]  # fmt: skip


def _uri() -> str:
    return f"mem:strings:{next(_names)}"  # not a name another test module caches a footer for


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 3_000),
    type_=st.sampled_from(_TYPES),
    required=st.booleans(),
    nulls=st.sampled_from([0.0, 0.01, 0.3, 1.0]),
    page_rows=st.sampled_from([1, 7, 32, 1000, 20_000]),
    row_group=st.sampled_from([9, 500, 100_000]),
    version=st.sampled_from(["1.0", "2.0"]),
    codec=st.sampled_from(["none", "zstd", "snappy"]),
    dictionary=st.booleans(),
    mapped=st.booleans(),
    data=st.data(),
)
def test_gathered_strings_equal_a_pyarrow_read_and_take(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    type_: pa.DataType,
    required: bool,
    nulls: float,
    page_rows: int,
    row_group: int,
    version: str,
    codec: str,
    dictionary: bool,
    mapped: bool,
    data: st.DataObject,
) -> None:
    """A gather answers exactly when the column's pages are v1 PLAIN pages, uncompressed or
    zstd, and the wanted rows lie at most MAX_STEPS values into their pages (else None), and
    then equals pyarrow's read and take: over string and binary types, required and optional
    fields, NULLs (definition levels in RLE runs and bit-packed groups), page and row-group
    sizes, memory-mapped and streamed files."""
    rng = np.random.default_rng(n)
    mask = None if required or nulls == 0 else rng.random(n) < nulls
    values = pa.array(_values(rng, n, 40), pa.string(), mask=mask).cast(type_)
    table = pa.table({"v": values, "w": pa.array(np.arange(n))})
    if required:
        table = table.cast(pa.schema([pa.field("v", type_, nullable=False), table.schema.field(1)]))
    path = tmp_path_factory.mktemp("strings") / "f.parquet"
    pq.write_table(table, path, write_page_index=True, max_rows_per_page=page_rows,
                   row_group_size=row_group, data_page_version=version, compression=codec,
                   use_dictionary=dictionary)  # fmt: skip
    rows = np.array(
        sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=80))), np.int64
    )
    handle = pa.memory_map(str(path)) if mapped else pa.OSFile(str(path))
    with handle:
        got = pages.gather_strings(handle, _uri(), "v", rows)
    want = table.column("v").take(pa.array(rows))
    eligible = version == "1.0" and codec != "snappy" and not dictionary
    if eligible and min(page_rows, row_group) <= string_pages.MAX_STEPS:
        assert got is not None
    if not eligible:
        assert got is None
    if got is not None:
        assert got.file_rows == n
        assert got.table.column("v").type == type_
        assert got.table.column("v").combine_chunks().equals(want.combine_chunks())


def test_a_gather_reads_only_the_pages_holding_the_rows() -> None:
    n = 20_000
    text = [f"row {i} {v}" for i, v in enumerate(_values(np.random.default_rng(1), n, 200))]
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": text}), buf, write_page_index=True, max_rows_per_page=32,
                   use_dictionary=False, compression="zstd")  # fmt: skip
    raw = buf.getvalue()
    rows = np.array([0, 17, 9_999, n - 1])
    got = pages.gather_strings(pa.BufferReader(raw), _uri(), "t", rows)
    assert got is not None
    assert got.table.column("t").to_pylist() == [text[i] for i in rows.tolist()]
    assert got.bytes_read < len(raw) / 100  # the three pages holding them


def test_many_pages_are_taken_in_runs_on_the_decoding_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Runs of pages bounded by the scratch buffer (here a few pages each), taken in parallel,
    give the same values in the same order."""
    rng = np.random.default_rng(3)
    n = 20_000
    values = pa.array(_values(rng, n, 300), mask=rng.random(n) < 0.05)
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": values}), buf, write_page_index=True, max_rows_per_page=32,
                   use_dictionary=False, compression="zstd", row_group_size=3_000)  # fmt: skip
    rows = np.flatnonzero(rng.random(n) < 0.2)
    monkeypatch.setattr(string_pages, "SCRATCH_BYTES", 20_000)
    monkeypatch.setattr(pages, "SCRATCH_BYTES", 20_000)
    submitted = []
    pool = pages._decode_pool()
    real = pool.submit
    monkeypatch.setattr(pool, "submit", lambda *a, **k: submitted.append(1) or real(*a, **k))
    got = pages.gather_strings(pa.BufferReader(buf.getvalue()), _uri(), "t", rows)
    assert got is not None and len(submitted) > 10
    assert got.table.column("t").combine_chunks().equals(values.take(pa.array(rows)))


def test_rows_deep_in_long_pages_are_left_to_the_decoder() -> None:
    n = 5_000
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": [str(i) for i in range(n)]}), buf, write_page_index=True,
                   use_dictionary=False, compression="zstd")  # fmt: skip
    raw = buf.getvalue()
    shallow = pages.gather_strings(pa.BufferReader(raw), _uri(), "t", np.array([3, 40]))
    assert shallow is not None and shallow.table.column("t").to_pylist() == ["3", "40"]
    deep = np.array([string_pages.MAX_STEPS + 1])
    assert pages.gather_strings(pa.BufferReader(raw), _uri(), "t", deep) is None
    got = pages.read_pages(pa.BufferReader(raw), _uri(), ["t"], deep, max_fraction=1.0)
    assert got is not None and got.table.column("t").to_pylist() == [str(deep[0])]


def _one_page_file(codec: str) -> tuple[bytearray, int, int]:
    """A file of one data page of 64 strings: its bytes, its page's offset and size."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": [f"value {i}" for i in range(64)]}), buf,
                   write_page_index=True, use_dictionary=False, compression=codec)  # fmt: skip
    raw = bytearray(buf.getvalue())
    chunk = pq.ParquetFile(io.BytesIO(bytes(raw))).metadata.row_group(0).column(0)
    return raw, chunk.data_page_offset, chunk.total_compressed_size


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_damaged_pages_are_left_to_the_decoder(codec: str) -> None:
    """A page whose values do not decompress, or whose length prefixes run past it: None,
    never wrong values (pyarrow's decode then reports the damage)."""
    raw, offset, size = _one_page_file(codec)
    rows = np.array([5, 63])
    intact = pages.gather_strings(pa.BufferReader(bytes(raw)), _uri(), "t", rows)
    assert intact is not None and intact.table.column("t").to_pylist() == ["value 5", "value 63"]
    broken = raw.copy()
    if codec == "zstd":
        broken[offset + size - 40 : offset + size - 4] = b"\xff" * 36  # inside the zstd frame
    else:
        at = raw.index(b"value 3", offset)
        broken[at - 4 : at] = (10_000).to_bytes(4, "little")  # a length past the page
    assert pages.gather_strings(pa.BufferReader(bytes(broken)), _uri(), "t", rows) is None


def test_pages_whose_levels_look_like_a_run_of_ones_are_decoded() -> None:
    """Pages of 8 values, the first alone not NULL: pyarrow bit-packs their levels as one
    group (0x03, 0x01), two bytes like an RLE run of ones' (0x10, 0x01); they are decoded,
    not taken for pages without NULLs."""
    n = 64
    values = [f"v{i}" if i % 8 == 0 else None for i in range(n)]
    buf = io.BytesIO()
    pq.write_table(pa.table({"t": values}), buf, write_page_index=True, max_rows_per_page=8,
                   use_dictionary=False, compression="none")  # fmt: skip
    rows = np.arange(n)
    got = pages.gather_strings(pa.BufferReader(buf.getvalue()), _uri(), "t", rows)
    assert got is not None and got.table.column("t").to_pylist() == values


def test_headers_parsed_in_bulk_equal_those_parsed_field_by_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bulk parse of page headers (with and without a CRC field, varints of one to three
    bytes) agrees with the field-by-field parse of every page, and needs it for none of
    pyarrow's pages."""
    rng = np.random.default_rng(5)
    for checksum, page_size in itertools.product([False, True], [64, 1024, 200_000]):
        buf = io.BytesIO()
        values = _values(rng, 4_000, 120)
        pq.write_table(pa.table({"t": values}), buf, write_page_index=True,
                       use_dictionary=False, compression="zstd", data_page_size=page_size,
                       write_page_checksum=checksum)  # fmt: skip
        raw = buf.getvalue()
        handle = pa.BufferReader(raw)
        info, leaves = pages._footer_for(handle, _uri(), ["t"], np.array([0]))
        (p,) = pages._leaf_pages(handle, info, leaves)
        blob = np.frombuffer(raw, np.uint8)
        with monkeypatch.context() as m:
            m.setattr(string_pages, "_header", None)  # a page parsed field by field: TypeError
            bulk = string_pages.parse_headers(blob, p.offsets, p.offsets + p.sizes)
        single = [string_pages._header(blob, int(a), int(a + b)) for a, b in
                  zip(p.offsets, p.sizes, strict=True)]  # fmt: skip
        assert [tuple(x) for x in zip(bulk.body.tolist(), bulk.stored.tolist(),
                                      bulk.size.tolist(), bulk.values.tolist(),
                                      strict=True)] == single  # fmt: skip


@pytest.mark.parametrize(
    ("levels", "count", "want"),
    [
        (bytes([16, 1]), 8, [1] * 8),  # an RLE run of 8 ones
        (bytes([6, 0, 10, 1]), 8, [0, 0, 0, 1, 1, 1, 1, 1]),  # runs of 3 zeros and 5 ones
        (bytes([3, 0b10110101]), 8, [1, 0, 1, 0, 1, 1, 0, 1]),  # one bit-packed group
        (bytes([3, 0b00010111]), 5, [1, 1, 1, 0, 1]),  # 5 values (padding bits unread)
        (bytes([3, 0xFF, 4, 0]), 10, [1] * 8 + [0, 0]),  # a group, then a run of 2
    ],
)
def test_definition_levels_decode(levels: bytes, count: int, want: list[int]) -> None:
    got = string_pages._hybrid(np.frombuffer(levels, np.uint8), count)
    assert got.tolist() == want


@pytest.mark.parametrize("levels", [bytes([16, 1]), bytes([0x80]), bytes([6, 2]), bytes([5])])
def test_definition_levels_that_end_early_or_exceed_one_raise(levels: bytes) -> None:
    from omnitable.exceptions import CorruptInputError

    with pytest.raises(CorruptInputError):
        string_pages._hybrid(np.frombuffer(levels, np.uint8), 9)


def test_a_filtered_table_read_takes_text_from_its_pages(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Table.read of a wide text column where a filter keeps ~1 % of rows goes through
    gather_strings and returns what a full read filtered in memory returns."""
    import omnitable.format.reader as reader_module

    rng = np.random.default_rng(11)
    n = 60_000
    data = pa.table(
        {"x": rng.random(n), "text": pa.array(_values(rng, n, 260), mask=rng.random(n) < 0.02)}
    )
    wh = omnitable.connect(tmp_path_factory.mktemp("wh"))
    t = wh.create_table("docs", data.schema)
    t.append(data, "b0")
    answered = []
    real = reader_module.gather_strings

    def counting(*args: object) -> pages.PageRead | None:
        got = real(*args)  # type: ignore[arg-type]
        answered.append(got is not None)
        return got

    monkeypatch.setattr(reader_module, "gather_strings", counting)
    where = pc.field("x") < 0.01
    got = t.read(columns=["x", "text"], where=where)
    assert answered and all(answered)
    want = t.read(columns=["x", "text"]).filter(where)
    assert got.sort_by("x").equals(want.sort_by("x"))
    assert FragmentReader is not None


def test_headers_checked_one_by_one_catch_a_page_size_the_bulk_parse_trusts() -> None:
    """An offset index whose page sizes are off: the field-by-field parse (used for
    uncompressed pages, whose values nothing else would check) refuses them; the page counts
    are checked against the headers' value counts."""
    from omnitable.exceptions import CorruptInputError

    raw, offset, size = _one_page_file("none")
    blob = np.frombuffer(bytes(raw), np.uint8)
    starts, ends = np.array([offset]), np.array([offset + size])
    exact = string_pages.parse_headers(blob, starts, ends, one_by_one=True)
    assert exact.values.tolist() == [64]
    with pytest.raises(CorruptInputError):
        string_pages.parse_headers(blob, starts, ends - 4, one_by_one=True)
    leaf = string_pages.StringLeaf(pa.string(), 1, 0)
    with pytest.raises(CorruptInputError):
        string_pages.take_values(blob, exact, leaf, np.array([65]), np.array([0]), np.array([3]))
    got = string_pages.take_values(blob, exact, leaf, np.array([64]), np.array([0]), np.array([3]))
    assert got.to_pylist() == ["value 3"]
