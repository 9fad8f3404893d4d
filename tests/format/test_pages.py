"""Point reads of Parquet pages (format/pages.py) and the Thrift compact codec under them:
byte-identical round trips of pyarrow-written footers, offset indexes and page headers; page
reads equal to a pyarrow read + take over types, codecs, page versions and page sizes; each
fallback; and keyed tables written with small pages and looked up through them."""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pyarrow.parquet.encryption as pe
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable.format import pages
from omnitable.format import thrift_compact as tc
from omnitable.format.reader import FragmentReader
from omnitable.settings import KEYED_PAGE_ROWS

_names = itertools.count()


def _write(table: pa.Table, **options: object) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, write_page_index=True, **options)
    return buf.getvalue()


def _footer(data: bytes) -> bytes:
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n : -8]


def _sample(n: int) -> pa.Table:
    return pa.table(
        {
            "i": pa.array([i if i % 7 else None for i in range(n)], pa.int32()),
            "f": pa.array([i / 3 for i in range(n)]),
            "s": pa.array([f"s{i % 50}" if i % 5 else None for i in range(n)]),
            "ls": pa.array([f"long{i}" * (i % 4) for i in range(n)], pa.large_string()),
            "bin": pa.array([bytes([i % 256]) * (i % 3) for i in range(n)], pa.binary()),
            "b": pa.array([None if i % 11 == 0 else i % 2 == 0 for i in range(n)]),
            "ts": pa.array(range(n), pa.timestamp("us", tz="Europe/Paris")),
            "dec": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "l": pa.array([None if i % 9 == 0 else [i, None][: i % 3] for i in range(n)]),
            "st": pa.array([None if i % 4 == 0 else {"p": i, "q": str(i)} for i in range(n)]),
            "m": pa.array(
                [[(f"k{i % 3}", i)] * (i % 2) for i in range(n)], pa.map_(pa.string(), pa.int64())
            ),
            "d": pa.array([datetime.date(2020, 1, 1 + i % 28) for i in range(n)]),
        }
    )


_CONFIGS = [
    {"max_rows_per_page": 64, "row_group_size": 500},
    {"max_rows_per_page": 1, "row_group_size": 40, "compression": "snappy"},
    {"max_rows_per_page": 33, "data_page_version": "2.0", "compression": "none"},
    {"max_rows_per_page": 100, "use_dictionary": False, "compression": "zstd"},
]


# -- the Thrift codec -------------------------------------------------------------------------


@pytest.mark.parametrize("config", _CONFIGS)
def test_pyarrow_footers_indexes_and_headers_round_trip_byte_for_byte(config: dict) -> None:
    data = _write(_sample(300), **config)
    footer = _footer(data)
    meta, end = tc.decode_struct(footer)
    assert end == len(footer) and tc.encode_struct(meta) == footer
    assert meta.get(3) == 300  # FileMetaData.num_rows
    for group in meta.get(4).items:
        for chunk in group.get(1).items:
            for off_field, len_field in ((4, 5), (6, 7)):  # offset index, column index
                off, length = chunk.get(off_field), chunk.get(len_field)
                index, end = tc.decode_struct(data, off)
                assert end == off + length and tc.encode_struct(index) == data[off:end]
            locations, _ = tc.decode_struct(data, chunk.get(4))
            for loc in locations.get(1).items:
                header, end = tc.decode_struct(data, loc.get(1))
                assert tc.encode_struct(header) == data[loc.get(1) : end]


def test_every_compact_type_round_trips() -> None:
    s = tc.Struct(
        [
            [1, tc.TRUE, True],
            [2, tc.FALSE, False],
            [3, tc.I8, -5],
            [4, tc.I16, -300],
            [5, tc.I32, 2**31 - 1],
            [40, tc.I64, -(2**63)],  # a field-id jump over 15: the long header form
            [41, tc.DOUBLE, -1.5],
            [42, tc.BINARY, b"\x00\xff" * 100],
            [43, tc.LIST, tc.ThriftList(tc.I32, list(range(-20, 20)))],
            [44, tc.LIST, tc.ThriftList(tc.TRUE, [1, 2, 1])],
            [45, tc.SET, tc.ThriftList(tc.BINARY, [b"a"])],
            [46, tc.MAP, tc.ThriftMap(tc.BINARY, tc.STRUCT, [(b"k", tc.Struct([[1, tc.I64, 7]]))])],
            [47, tc.MAP, tc.ThriftMap(0, 0, [])],
            [48, tc.STRUCT, tc.Struct()],
            [3000, tc.I32, 1],
        ]
    )
    raw = tc.encode_struct(s)
    back, end = tc.decode_struct(raw)
    assert end == len(raw) and back == s and tc.encode_struct(back) == raw
    with pytest.raises(omnitable.CorruptInputError, match="Cannot decode a Thrift struct"):
        tc.decode_struct(raw[:-3])


# -- page reads -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    config=st.sampled_from(_CONFIGS),
    n=st.integers(1, 700),
    data=st.data(),
)
def test_page_reads_equal_a_pyarrow_read_and_take(
    config: dict, n: int, data: st.DataObject
) -> None:
    table = _sample(n)
    raw = _write(table, **config)
    got, want = _read_drawn(data, raw, table.column_names, n, 12)
    assert got is not None and got.file_rows == n
    assert got.table.equals(want)
    assert 0 < got.bytes_read <= len(raw)


def _read_drawn(
    data: st.DataObject, raw: bytes, names: list[str], n: int, max_rows: int
) -> tuple[pages.PageRead | None, pa.Table]:
    """A page read of drawn columns and rows of the file ``raw`` (``n`` rows), and what
    pyarrow's read and take give for them."""
    columns = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=5, unique=True))
    rows = np.array(
        sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=max_rows))), np.int64
    )
    got = pages.read_pages(
        pa.BufferReader(raw), f"mem:{next(_names)}", columns, rows, max_fraction=1.0
    )
    return got, pq.read_table(pa.BufferReader(raw), columns=columns).take(pa.array(rows))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 2_500),
    page_rows=st.sampled_from([None, 1, 7, 64, KEYED_PAGE_ROWS]),
    row_group=st.sampled_from([50, 333, 100_000]),
    codec=st.sampled_from(["zstd", "snappy", "none"]),
    wide=st.sampled_from([32, 128]),
    data=st.data(),
)
def test_page_reads_of_files_our_writer_wrote_equal_take(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    page_rows: int | None,
    row_group: int,
    codec: str,
    wide: int,
    data: st.DataObject,
) -> None:
    """The same through the column-file writer's choices (small pages and dictionaries of keyed
    tables, wide-column pages, per-column codecs: incompressible columns stored uncompressed)."""
    from omnitable.format.fs import resolve_location
    from omnitable.format.writer import WriteOptions, write_column_file

    rng = np.random.default_rng(n)
    table = _sample(n).append_column("url", pa.array([f"https://h/{rng.random():.15f}" for _ in
                                                      range(n)]))  # fmt: skip
    table = table.append_column("score", pa.array(rng.random(n)))
    table = table.append_column("label", pa.array(rng.integers(0, 4, n)))
    table = table.append_column("txt", pa.array(["t" * int(k) for k in rng.integers(0, 600, n)]))
    options = WriteOptions(page_rows=page_rows, row_group_size=row_group, compression=codec,
                           wide_row_bytes=wide, wide_data_page_size=2048)  # fmt: skip
    location = resolve_location(str(tmp_path_factory.mktemp("writer")))
    written = write_column_file(location, "f", "frag", "g", table, {}, options)
    with open(location.child_path(written.path), "rb") as fh:
        raw = fh.read()
    got, want = _read_drawn(data, raw, table.column_names, n, 40)
    assert got is not None and got.table.equals(want)


# -- values read in place (format/plain_pages.py) -----------------------------------------------


_PLAIN_TYPES = [pa.int32(), pa.int64(), pa.float32(), pa.float64()]
_OFFSETS = [np.int32, np.int64]  # a deletion vector's live offsets are int32


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    n=st.integers(1, 3_000),
    type_=st.sampled_from(_PLAIN_TYPES),
    required=st.booleans(),
    nulls=st.sampled_from([0.0, 0.001, 0.3]),
    page_rows=st.sampled_from([1, 5, 8, 9, 64, 1000, 20_000]),
    row_group=st.sampled_from([7, 500, 100_000]),
    version=st.sampled_from(["1.0", "2.0"]),
    codec=st.sampled_from(["none", "zstd"]),
    dictionary=st.booleans(),
    mapped=st.booleans(),
    data=st.data(),
)
def test_plain_values_read_in_place_equal_a_pyarrow_read_and_take(
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
    """A gather answers exactly when every page holding a wanted row (or every page, for all
    rows) is an uncompressed PLAIN page without NULLs (else None), and then equals pyarrow's
    read and take: over types,
    required and optional fields, page versions and sizes (definition levels in RLE runs and in
    bit-packed groups), row groups, codecs, dictionaries, memory-mapped and streamed files."""
    rng = np.random.default_rng(n)
    values = (rng.random(n) * 2**20).astype(type_.to_pandas_dtype())
    mask = None if required or nulls == 0 else rng.random(n) < nulls
    table = pa.table({"v": pa.array(values, type_, mask=mask), "w": pa.array(values, type_)})
    if required:
        table = table.cast(pa.schema([pa.field("v", type_, nullable=False), table.schema.field(1)]))
    path = tmp_path_factory.mktemp("plain") / "f.parquet"
    pq.write_table(table, path, write_page_index=True, max_rows_per_page=page_rows,
                   row_group_size=row_group, data_page_version=version, compression=codec,
                   use_dictionary=dictionary)  # fmt: skip
    rows: np.ndarray | None = np.array(
        sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=60))), np.int64
    )
    kind = data.draw(st.sampled_from(["few", "most", "every"]))
    if kind == "every":
        rows = None
    elif kind == "most":  # a deletion vector's live rows: every page read, then taken
        kind_of_offsets = data.draw(st.sampled_from(_OFFSETS))
        rows = np.flatnonzero(rng.random(n) < 0.9)
        rows = (rows if 2 * len(rows) > n else np.arange(n)).astype(kind_of_offsets)
    handle = pa.memory_map(str(path)) if mapped else pa.OSFile(str(path))
    uri = f"mem:{next(_names)}"
    with handle:
        got = pages.gather_plain(handle, uri, "v", rows)
    want = table.select(["v"]) if rows is None else table.select(["v"]).take(pa.array(rows))
    eligible = codec == "none" and not dictionary
    if eligible and (mask is None or not mask.any()):
        assert got is not None  # no NULL anywhere: every page is read in place
    if not eligible:
        assert got is None
    if got is not None:
        assert got.file_rows == n and got.table.column("v").equals(want.column("v"))
        assert want.column("v").null_count == 0


def test_most_rows_are_read_through_a_reused_buffer_into_arrays_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gather of most rows (a deletion vector's live ones) reads every page's values into
    the thread's scratch buffer and takes the rows: each answer is a new array (the next
    gather reuses the buffer), whether the values fit the buffer or not."""
    n = 50_000
    raw = _write(pa.table({"x": np.arange(n, dtype=np.float64)}), compression="none",
                 use_dictionary=False, max_rows_per_page=4_000)  # fmt: skip
    rng = np.random.default_rng(3)
    for limit in (pages._SCRATCH_MAX, 1024):  # the buffer holds the values, or it does not
        monkeypatch.setattr(pages, "_SCRATCH_MAX", limit)
        every = pages.gather_plain(pa.BufferReader(raw), "mem:most", "x", np.arange(n))
        first_rows = np.flatnonzero(rng.random(n) < 0.9).astype(np.int32)
        first = pages.gather_plain(pa.BufferReader(raw), "mem:most", "x", first_rows)
        again = np.flatnonzero(rng.random(n) < 0.8)
        reversed_raw = _write(pa.table({"x": np.arange(n, 0, -1, dtype=np.float64)}),
                              compression="none", use_dictionary=False)  # fmt: skip
        second = pages.gather_plain(pa.BufferReader(reversed_raw), "mem:most2", "x", again)
        assert every is not None and first is not None and second is not None
        assert first.bytes_read == second.bytes_read == n * 8  # every page's values
        assert every.table.column("x").to_numpy().tolist() == list(range(n))
        assert first.table.column("x").to_numpy().tolist() == first_rows.tolist()
        assert second.table.column("x").to_numpy().tolist() == (n - again).tolist()


def test_most_rows_need_only_the_pages_holding_them_plain() -> None:
    """A gather of most rows reads every page when every page is plain without NULLs; when a
    page no wanted row lies in holds a NULL, it still answers from the pages holding them."""
    n = 1_000
    values = pa.array(np.arange(n, dtype=np.float64), mask=np.arange(n) >= 950)  # last page
    raw = _write(pa.table({"x": values}), compression="none", use_dictionary=False,
                 max_rows_per_page=100)  # fmt: skip
    rows = np.arange(900, dtype=np.int32)
    got = pages.gather_plain(pa.BufferReader(raw), "mem:nulls-elsewhere", "x", rows)
    assert got is not None and got.table.column("x").to_pylist() == list(range(900))
    assert got.bytes_read < n * 8  # the pages holding the rows, not every page


def test_values_read_in_place_touch_only_their_bytes() -> None:
    n = 100_000
    raw = _write(pa.table({"x": np.arange(n, dtype=np.float64)}), compression="none",
                 use_dictionary=False, max_rows_per_page=10_000)  # fmt: skip
    rows = np.array([3, 50_001, 99_999])
    streamed = pages.gather_plain(pa.BufferReader(raw), "mem:touch", "x", rows)
    assert streamed is not None and streamed.table.column("x").to_pylist() == [
        3.0,
        50001.0,
        99999.0,
    ]
    assert streamed.bytes_read == 3 * 10_000 * 8  # the values of the three pages holding them
    every = pages.gather_plain(pa.BufferReader(raw), "mem:touch", "x", None)
    assert every is not None and every.bytes_read == n * 8  # every value, no page header
    assert every.table.column("x").to_numpy().tolist() == list(range(n))
    assert pages.gather_plain(pa.BufferReader(raw), "mem:touch", "nope", rows) is None
    assert pages.gather_plain(pa.BufferReader(raw), "mem:touch", "x", rows[:0]) is None
    assert pages.gather_plain(pa.BufferReader(raw), "mem:touch", "x", np.array([n])) is None


@pytest.mark.parametrize(
    ("levels", "count", "ones"),
    [
        (bytes([16, 1]), 8, True),  # an RLE run of 8 ones
        (bytes([16, 0]), 8, False),  # of 8 zeros (NULLs)
        (bytes([3, 0xFF]), 8, True),  # one bit-packed group of 8 set bits
        (bytes([3, 0x1F]), 5, True),  # 5 values (padding bits unread)
        (bytes([3, 0x17]), 5, False),  # a NULL among 5
        (bytes([3, 0xFF, 4, 1]), 10, True),  # a group, then a run of 2
        (bytes([16, 1]), 9, False),  # too few levels
        (bytes([20, 1]), 8, False),  # a run past the page's values
        (bytes([16, 1, 0]), 8, False),  # bytes left over
        (bytes([0x80]), 8, False),  # a cut varint
    ],
)
def test_definition_levels_of_pages_without_nulls(levels: bytes, count: int, ones: bool) -> None:
    from omnitable.format.plain_pages import all_ones

    assert all_ones(memoryview(levels), count) is ones


def test_a_few_rows_read_a_few_pages() -> None:
    n = 20_000
    raw = _write(pa.table({"x": np.arange(n), "s": [f"v{i}" for i in range(n)]}),
                 max_rows_per_page=100, row_group_size=10_000, use_dictionary=False)  # fmt: skip
    got = pages.read_pages(pa.BufferReader(raw), "mem:few", ["x", "s"], np.array([5, 15_555]))
    assert got is not None
    assert got.table.to_pylist() == [{"x": 5, "s": "v5"}, {"x": 15_555, "s": "v15555"}]
    assert got.bytes_read < len(raw) / 20  # two pages per column


def test_fallback_without_an_offset_index() -> None:
    buf = io.BytesIO()
    pq.write_table(_sample(200), buf, write_page_index=False, max_rows_per_page=10)
    got = pages.read_pages(pa.BufferReader(buf.getvalue()), "mem:noidx", ["i"], np.array([3]))
    assert got is None


def test_fallback_when_an_offset_index_does_not_parse() -> None:
    raw = bytearray(_write(_sample(200), max_rows_per_page=10))
    meta, _ = tc.decode_struct(_footer(bytes(raw)))
    chunk = meta.get(4).items[0].get(1).items[0]
    off, length = chunk.get(4), chunk.get(5)
    raw[off : off + length] = b"\xff" * length
    got = pages.read_pages(pa.BufferReader(bytes(raw)), "mem:bad", ["i"], np.array([3]))
    assert got is None
    assert pq.read_table(pa.BufferReader(bytes(raw)), columns=["i"])["i"][3].as_py() == 3


def test_fallback_when_the_pages_would_not_save_bytes() -> None:
    raw = _write(_sample(200))  # one page per chunk: the pages are the row group
    assert pages.read_pages(pa.BufferReader(raw), "mem:big", ["i"], np.array([3])) is None


class _InMemoryKms(pe.KmsClient):
    def __init__(self, config: pe.KmsConnectionConfig) -> None:
        pe.KmsClient.__init__(self)

    def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> bytes:
        return base64.b64encode(key_bytes)

    def unwrap_key(self, wrapped_key: bytes, master_key_identifier: str) -> bytes:
        return base64.b64decode(wrapped_key)


@pytest.mark.parametrize("plaintext_footer", [False, True])
def test_fallback_for_encrypted_files(plaintext_footer: bool) -> None:
    factory = pe.CryptoFactory(_InMemoryKms)
    config = pe.EncryptionConfiguration(
        footer_key="k", column_keys={"k": ["i"]}, plaintext_footer=plaintext_footer,
        double_wrapping=False,
    )  # fmt: skip
    props = factory.file_encryption_properties(pe.KmsConnectionConfig(), config)
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, _sample(50).schema, encryption_properties=props,
                          write_page_index=True, max_rows_per_page=5) as writer:  # fmt: skip
        writer.write_table(_sample(50))
    got = pages.read_pages(pa.BufferReader(buf.getvalue()), f"mem:enc{plaintext_footer}", ["i", "f"],
                           np.array([3]), max_fraction=1.0)  # fmt: skip
    assert got is None


def test_bad_arguments_fall_back() -> None:
    raw = _write(_sample(100), max_rows_per_page=10)
    read = pages.read_pages
    assert read(pa.BufferReader(raw), "mem:a1", ["nope"], np.array([3])) is None
    assert read(pa.BufferReader(raw), "mem:a2", ["i"], np.array([100])) is None
    assert read(pa.BufferReader(raw), "mem:a3", ["i"], np.array([], np.int64)) is None
    assert read(pa.BufferReader(b"not parquet at all"), "mem:a4", ["i"], np.array([1])) is None


# -- tables -----------------------------------------------------------------------------------


def _page_rows(t: omnitable.Table, column: str) -> list[int]:
    """Rows of every data page of ``column`` in the table's files."""
    snap = t.snapshot()
    col = snap.column(column)
    out: list[int] = []
    for frag in snap.fragments:
        file = snap.resolve(frag.fragment_id, [col.column_id])[col.column_id]
        assert file is not None
        with t.location.fs.open_input_file(t.location.child_path(file.path)) as handle:
            raw = handle.read()
        meta, _ = tc.decode_struct(_footer(raw))
        info = pages._parse_meta(meta)
        assert info is not None
        (leaf,) = info.tops[col.physical_name][1]
        found = pages._leaf_pages(pa.BufferReader(raw), info, [leaf])
        assert found is not None
        (p,) = found
        out += (p.ends - p.starts).tolist()
    return out


def test_keyed_tables_get_small_pages_and_others_do_not(wh: omnitable.Warehouse) -> None:
    data = pa.table({"k": [f"k{i}" for i in range(5000)], "x": range(5000)})
    keyed = wh.create_table(f"pk{next(_names)}", {"k": "string", "x": "bigint"}, key="k")
    keyed.upsert(data)
    assert max(_page_rows(keyed, "x")) == KEYED_PAGE_ROWS
    plain = wh.create_table(f"pp{next(_names)}", {"k": "string", "x": "bigint"})
    plain.append(data, "a")
    assert max(_page_rows(plain, "x")) > 1024  # pyarrow: 1 MiB pages
    small = wh.create_table(f"ps{next(_names)}", {"k": "string", "x": "bigint"},
                            properties={"write.page_rows": 100})  # fmt: skip
    small.append(data, "a")
    assert max(_page_rows(small, "x")) == 100


def test_lookup_reads_pages_and_sees_updates_and_deletes(wh: omnitable.Warehouse) -> None:
    n = 30_000
    xs = np.random.default_rng(5).permutation(n) * 7919  # distinct, not dictionary-friendly
    t = wh.create_table(f"pl{next(_names)}", {"url": "string", "x": "bigint", "s": "string"},
                        key="url", properties={"write.page_rows": 50})  # fmt: skip
    t.upsert(pa.table({"url": [f"u{i}" for i in range(n)], "x": xs,
                       "s": [f"s{i}" for i in range(n)]}))  # fmt: skip
    t.upsert(pa.table({"url": ["u10", "u4000", "new"], "x": [-10, -4000, -1],
                       "s": ["t10", "t4000", "tnew"]}))  # fmt: skip
    t.delete(pc.field("url").isin(["u11", "u29999"]))
    rng = np.random.default_rng(3)
    universe = ["u10", "u11", "u4000", "u29999", "new", "nope", *(f"u{i}" for i in range(n))]
    for _ in range(4):
        keys = list(dict.fromkeys(rng.choice(universe, 40).tolist()))
        got = t.lookup(keys)
        read = t.read(where=pc.field("url").isin(keys)).to_pylist()
        by_url = {r["url"]: r for r in read}
        assert got.to_pylist() == [by_url[k] for k in keys if k in by_url]
    assert t.lookup(["u10", "u11", "new"], ["x", "s"]).to_pylist() == [
        {"x": -10, "s": "t10"},
        {"x": -1, "s": "tnew"},
    ]
    snap = t.snapshot()
    frag = max(snap.fragments, key=lambda f: f.row_count)
    rows = np.array([7, 1500, 5000])
    paged = FragmentReader(t.location, snap)
    got = paged.read_rows(frag, ["url", "x", "s"], rows)
    whole = FragmentReader(t.location, snap)
    assert got.equals(whole.read_all_rows(frag, ["url", "x", "s"]).take(pa.array(rows)))
    x_only, full = FragmentReader(t.location, snap), FragmentReader(t.location, snap)
    x_only.read_rows(frag, ["x"], rows)
    full.read_all_rows(frag, ["x"])
    assert 0 < x_only._bytes < full._bytes / 2  # a dictionary page and three data pages


def test_a_table_file_without_a_page_index_is_read_by_row_groups(wh: omnitable.Warehouse) -> None:
    """A column file written without a page index (another writer) still answers point reads,
    and the same rows as a table whose files have one."""
    n = 5000
    t = wh.create_table(f"pn{next(_names)}", {"url": "string", "x": "bigint"}, key="url",
                        properties={"write.page_rows": 20})  # fmt: skip
    t.upsert(pa.table({"url": [f"u{i}" for i in range(n)], "x": range(n)}))
    snap = t.snapshot()
    (frag,) = snap.fragments
    rows = np.array([3, 2500, 4999])
    with_index = FragmentReader(t.location, snap)
    expected = with_index.read_rows(frag, ["url", "x"], rows)
    for file in {
        f.path
        for f in snap.resolve(frag.fragment_id, [c.column_id for c in snap.columns]).values()
        if f
    }:
        path = t.location.child_path(file)
        data = pq.read_table(path, filesystem=t.location.fs)
        pq.write_table(data, path, filesystem=t.location.fs, write_page_index=False)
    pages.clear_cache()  # the files changed under the same names (never done by the product)
    without = FragmentReader(t.location, snap)
    assert without.read_rows(frag, ["url", "x"], rows).equals(expected)
    assert expected.to_pylist() == [{"url": f"u{i}", "x": i} for i in rows.tolist()]
    assert without._bytes > with_index._bytes  # row groups, not pages
    assert t.lookup(["u3", "u4999"], ["url", "x"]).to_pylist() == [
        {"url": "u3", "x": 3},
        {"url": "u4999", "x": 4999},
    ]
