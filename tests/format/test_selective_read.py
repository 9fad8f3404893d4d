"""Selective reads (docs/format.md, "Pages"; format/reader.py): files with a wide column get
small pages of it and mostly-distinct columns no dictionary, chosen by the writer itself; a
filtered read decodes only the pages of the projected columns that hold surviving rows, and
always equals the full read filtered, deletes and updates (patch files) included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from forking import FORK, start_forked, wait_forked
from omnitable import ROW_ID
from omnitable.format import pages
from omnitable.format.pages import clear_cache
from omnitable.format.reader import FragmentReader
from omnitable.format.writer import (
    WIDE_FILE_GROUP,
    WriteOptions,
    _codec_settings,
    _page_settings,
    _small_page_codec,
    split_wide_columns,
)
from omnitable.vocabulary.names import APPEND_NAME


def _text(rng: np.random.Generator, n: int, width: int) -> list[str]:
    return [f"{i} " + rng.bytes(width // 2).hex() for i in range(n)]


def test_the_writer_picks_pages_and_dictionaries_itself() -> None:
    rng = np.random.default_rng(0)
    n = 4000
    data = pa.table({"x": rng.random(n), "lang": rng.choice(["en", "de"], n),
                     "text": _text(rng, n, 250)})  # fmt: skip
    wide = _page_settings(data, WriteOptions())
    assert wide["use_dictionary"] == ["lang"]  # floats and free text: mostly distinct
    assert 24 * 250 < wide["data_page_size"] <= 8192  # ~32 texts per page
    assert 12 <= wide["write_batch_size"] <= 16  # pyarrow checks the page size per batch
    narrow = _page_settings(data.drop_columns(["text"]), WriteOptions())
    assert "data_page_size" not in narrow  # no wide column: pyarrow's 1 MiB pages
    nested = data.append_column("tags", pa.array([["a", "b"]] * n))
    assert _page_settings(nested, WriteOptions())["use_dictionary"] == ["lang", "tags.list.element"]
    assert _page_settings(data.slice(0, 10), WriteOptions())["use_dictionary"] is True
    codecs = _codec_settings(data.append_column("n", pa.array(np.arange(n))), WriteOptions())
    assert codecs["compression"] == {"x": "none", "lang": "zstd", "text": "zstd", "n": "zstd"}
    assert codecs["compression_level"] == {"lang": 3, "text": 3, "n": 3}  # random floats: none
    assert _codec_settings(data, WriteOptions(compression=None))["compression"] is None


def test_the_base_groups_wide_columns_get_a_file_of_their_own(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    n = 3000
    data = pa.table({"x": rng.random(n), "s": rng.choice(["a", "b"], n),
                     "text": _text(rng, n, 250), "doc": _text(rng, n, 300)})  # fmt: skip
    base = {"base": [ROW_ID, "x", "s", "text", "doc"], "g": ["y"]}
    table = data.append_column(ROW_ID, pa.array(np.arange(n)))
    assert split_wide_columns(table, base, WriteOptions()) == {
        "base": [ROW_ID, "x", "s"], WIDE_FILE_GROUP: ["text", "doc"], "g": ["y"]}  # fmt: skip
    declared = {"base": [ROW_ID, "x"], "payload": ["s", "text"]}  # the user placed text
    assert split_wide_columns(table, declared, WriteOptions()) == declared
    assert split_wide_columns(table, {"base": [ROW_ID, "x"]}, WriteOptions()) == {
        "base": [ROW_ID, "x"]}  # fmt: skip
    assert split_wide_columns(table.slice(0, 0), base, WriteOptions()) == base
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("w", data.schema)
        t.append(data, "a")
        snap = t.snapshot()
        (frag,) = snap.fragments
        files = {f.group_name: f for f in snap.files_by_fragment[frag.fragment_id]}
        assert set(files) == {"base", WIDE_FILE_GROUP}
        metas = {g: pq.ParquetFile(t.location.child_path(f.path)).metadata
                 for g, f in files.items()}  # fmt: skip
        assert metas[WIDE_FILE_GROUP].schema.names == ["text", "doc"]
        assert set(metas["base"].schema.names) == {ROW_ID, "x", "s"}
        # the small pages stay with the wide columns: x keeps pyarrow's 1 MiB pages
        assert _pages(t.location.child_path(files["base"].path), "x") == 1
        assert _pages(t.location.child_path(files[WIDE_FILE_GROUP].path), "text") > 50
        assert t.read().select(data.column_names).equals(data)
        assert t.read(columns=["doc"], where=pc.field("x") < 0.1).column("doc").equals(
            data.filter(pc.field("x") < 0.1).column("doc"))  # fmt: skip


def _pages(path: str, column: str) -> int:
    """Data pages of ``column`` (a flat top-level column) in the file at ``path``, from its
    offset index."""
    leaf = pq.ParquetFile(path).schema_arrow.get_field_index(column)
    with pa.OSFile(path) as handle:
        info = pages._file_info(handle, path)
        assert info is not None
        found = pages._leaf_pages(handle, info, [leaf])
    assert found is not None
    return len(found[0].starts)


def test_a_selective_read_decodes_only_pages_with_survivors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(1)
    n = 20_000
    data = pa.table({"x": np.arange(n) / n, "r": rng.random(n), "text": _text(rng, n, 250)})
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("wide", data.schema)
        t.append(data, "a", row_group_size=4000)
        snap = t.snapshot()
        (frag,) = snap.fragments
        col = snap.column("text").column_id
        file = snap.resolve(frag.fragment_id, [col])[col]
        assert file is not None
        meta = pq.ParquetFile(t.location.child_path(file.path)).metadata
        assert meta.schema.names == ["text"]  # the base group's wide column: a file of its own
        text_chunk = meta.row_group(0).column(0)
        assert "RLE_DICTIONARY" not in text_chunk.encodings
        full = t.scan(columns=["text"], where=pc.field("x") >= 0)
        clear_cache()
        few = t.scan(columns=["text"], where=pc.field("x") < 0.005)  # 100 rows, ~4 pages
        assert few.table.column("text").to_pylist() == data.column("text")[:100].to_pylist()
        assert few.stats.bytes_read < full.stats.bytes_read / 20
        monkeypatch.setattr(pages, "_PARALLEL_BYTES", 0)  # 5 row groups decoded in parallel
        scattered = pc.field("r") < 0.01
        got = t.read(columns=["text", "x"], where=scattered)
        assert got.equals(data.filter(scattered).select(["text", "x"]))


_settings = settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_settings
@given(
    n=st.integers(200, 1500),
    width=st.sampled_from([150, 400, 8]),  # 8: no wide column, row-group reads
    own_group=st.booleans(),
    row_group=st.sampled_from([64, 500, 131_072]),
    delete_above=st.floats(0.3, 1.0),
    update_fraction=st.sampled_from([0.0, 0.05, 0.5]),
    seed=st.integers(0, 2**31),
)
def test_selective_reads_equal_full_reads_filtered(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    width: int,
    own_group: bool,
    row_group: int,
    delete_above: float,
    update_fraction: float,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    text = pa.array([None if rng.random() < 0.1 else s for s in _text(rng, n, width)])
    data = pa.table({"x": rng.random(n), "k": rng.integers(0, 5, n), "text": text})
    groups = {"payload": ["text"]} if own_group else None
    with omnitable.connect(tmp_path_factory.mktemp("wh")) as wh:
        t = wh.create_table("p", data.schema, groups=groups)
        t.append(data, "a", target_fragment_rows=max(1, n // 2), row_group_size=row_group)
        model = {i: row for i, row in enumerate(data.to_pylist())}
        ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()  # append order
        by_id = dict(zip(ids, range(n), strict=True))
        if t.delete(pc.field("x") > delete_above).version is not None:
            model = {i: r for i, r in model.items() if r["x"] <= delete_above}
        patched = [i for i in ids if by_id[i] in model and rng.random() < update_fraction]
        if patched:
            new = _text(rng, len(patched), width)
            t.update(pa.table({ROW_ID: patched, "text": new}), ["text"])
            for i, s in zip(patched, new, strict=True):
                model[by_id[i]]["text"] = s
        everything = t.read()
        for threshold in (0.0, 0.003, 0.02, 0.1, 0.6):
            where = pc.field("x") < threshold
            for columns in (["text"], ["k", "text", "x"], [ROW_ID, "text"]):
                got = t.read(columns=columns, where=where)
                assert got.equals(everything.filter(where).select(columns))
            want = [r["text"] for _, r in sorted(model.items()) if r["x"] < threshold]
            assert t.read(columns=["text"], where=where).column("text").to_pylist() == want


def test_dictionary_indices_zstd_cannot_shrink_are_stored_uncompressed(tmp_path: Path) -> None:
    """Labels of 1,000 values drawn at random: their bit-packed dictionary indices do not
    compress, so zstd would only cost time per page (keyed tables' 512-row pages most); a
    repeating pattern's indices do compress and keep the codec. Files read back the same."""
    rng = np.random.default_rng(3)
    n = 20_000
    data = pa.table({"label": rng.integers(0, 1000, n, dtype=np.int16),
                     "cycle": pa.array(np.arange(n) % 100, pa.int32())})  # fmt: skip
    for options in (WriteOptions(page_rows=512), WriteOptions()):
        pages = _page_settings(data, options)
        assert pages["use_dictionary"] is True
        codecs = _codec_settings(data, options, pages["use_dictionary"])
        assert codecs["compression"] == {"label": "none", "cycle": "zstd"}
        # without the dictionary encoding, raw 16-bit values in 0..999 do compress
        assert _codec_settings(data, options)["compression"] == "zstd"
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("labels", data.schema)
        t.append(data, "a")
        assert t.read(["label", "cycle"]).equals(data)
        stored = {}
        for f in tmp_path.rglob("*.parquet"):
            group = pq.ParquetFile(f).metadata.row_group(0)
            for i in range(group.num_columns):
                stored[group.column(i).path_in_schema] = group.column(i).compression
        assert stored["label"] == "UNCOMPRESSED" and stored["cycle"] == "ZSTD"


def test_files_with_small_pages_use_zstd_level_1(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 2000
    wide = pa.table({"text": _text(rng, n, 250)})
    narrow = pa.table({"x": rng.random(n)})
    assert _small_page_codec(wide, WriteOptions()).compression_level == 1
    assert _small_page_codec(narrow, WriteOptions()).compression_level == 3  # 1 MiB pages
    assert _small_page_codec(wide, WriteOptions(compression_level=9)).compression_level == 9
    lz4 = WriteOptions(compression="lz4", compression_level=None)
    assert _small_page_codec(wide, lz4) == lz4
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("z", {"x": "double", "text": "string"})
        t.append(pa.table({"x": narrow.column("x"), "text": wide.column("text")}), "a")
        assert t.read(columns=["text"]).column("text").equals(wide.column("text"))


def test_selective_reads_of_mapped_and_streamed_files_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A selective read of a local file memory-maps it (page spans are views of the mapping);
    through a non-local filesystem the spans are read; both give the same rows and bytes."""
    import fsspec
    import pyarrow.fs as pafs

    from omnitable.format.fs import Location
    from omnitable.format.reader import FragmentReader

    handles: list[str] = []
    fetch = pages._fetch

    def recording(handle: pa.NativeFile, ranges: list[tuple[int, int]]) -> object:
        handles.append(type(handle).__name__)
        return fetch(handle, ranges)

    monkeypatch.setattr(pages, "_fetch", recording)
    spans = pages._pages_bytes

    def recording_spans(handle: pa.NativeFile, *args: np.ndarray) -> object:
        handles.append(type(handle).__name__)
        return spans(handle, *args)

    monkeypatch.setattr(pages, "_pages_bytes", recording_spans)
    rng = np.random.default_rng(5)
    n = 6_000
    data = pa.table({"x": rng.random(n), "text": _text(rng, n, 300)})
    where = pc.field("x") < 0.02
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("m", data.schema)
        t.append(data, "a", row_group_size=1_500)
        snap = t.snapshot()
        remote = Location(pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem("file"))),
                          t.location.path, "fsspec-" + t.location.uri)  # fmt: skip
        reads, kinds = [], []
        for location in (t.location, remote):
            clear_cache()
            handles.clear()
            reads.append(FragmentReader(location, snap, 0.5).read(["text"], where, None))
            kinds.append(set(handles))  # x's values are read (not mapped) in both
    assert "BufferReader" in kinds[0] and "BufferReader" not in kinds[1]  # a map's reader
    (mapped, mapped_stats), (streamed, streamed_stats) = reads
    assert mapped.equals(streamed) and mapped.equals(data.filter(where).select(["text"]))
    assert mapped_stats.bytes_read == streamed_stats.bytes_read < data.nbytes / 2


def test_the_dictionary_sample_is_taken_chunk_by_chunk() -> None:
    """The writer samples a column chunk by chunk (pyarrow's take of a chunked string column
    concatenates it first), with the same values and the same encoding choice."""
    from omnitable.format import writer

    rng = np.random.default_rng(9)
    texts = _text(rng, 20_000, 40)
    chunked = pa.chunked_array([texts[:7_000], [], texts[7_000:7_001], texts[7_001:]])
    idx = np.linspace(0, len(texts) - 1, 8_192).astype(np.int64)
    assert writer._take(chunked, idx).equals(chunked.take(idx))
    labels = pa.chunked_array([["a", "b"] * 3_000, ["c"] * 9_000])
    for column in (chunked, labels):
        table = pa.table({"v": column})
        assert writer.dictionary_columns(table, 131_072) == writer.dictionary_columns(
            table.combine_chunks(), 131_072)  # fmt: skip
    assert writer.dictionary_columns(pa.table({"v": chunked}), 131_072) == []


@_settings
@given(
    n=st.integers(50, 3000),
    nulls=st.sampled_from([0.0, 0.01]),
    row_group=st.sampled_from([100, 131_072]),
    delete_above=st.floats(0.5, 1.0),
    seed=st.integers(0, 2**31),
)
def test_filtered_reads_of_uncompressed_numbers_equal_full_reads_filtered(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    nulls: float,
    row_group: int,
    delete_above: float,
    seed: int,
) -> None:
    """Random numbers are stored uncompressed; a filtered read takes their surviving rows in
    place from the pages (format/plain_pages.py), in files of such columns alone or beside others, unless a page holds NULLs: the same rows as
    the full read filtered, deletes included, across groups and row groups."""
    rng = np.random.default_rng(seed)
    mask = rng.random(n) < nulls if nulls else None
    data = pa.table({"x": rng.random(n), "a": pa.array(rng.random(n), mask=mask),
                     "b": rng.integers(-(2**60), 2**60, n), "c": rng.random(n).astype(np.float32),
                     "d": pa.array(rng.integers(-(2**30), 2**30, n, dtype=np.int32)),
                     "s": rng.choice(["p", "q"], n)})  # fmt: skip
    with omnitable.connect(tmp_path_factory.mktemp("wh")) as wh:  # g1: s is decoded, a and b not
        t = wh.create_table("n", data.schema, groups={"g1": ["a", "b", "s"], "g2": ["c", "d"]})
        t.append(data, "a", row_group_size=row_group)
        t.delete(pc.field("x") > delete_above)
        everything = t.read()
        kept = data.filter(pc.field("x") <= delete_above)  # the model: append order
        assert everything.drop_columns([ROW_ID, APPEND_NAME]).equals(kept)
        for threshold in (0.0, 0.01, 0.2, 0.5):
            where = pc.field("x") < threshold
            columns = ["a", "b", "c", "d", "s", ROW_ID]
            got = t.scan(columns=columns, where=where)
            assert got.table.equals(everything.filter(where).select(columns))
            assert got.table.drop_columns([ROW_ID]).equals(kept.filter(where).select(columns[:-1]))


def test_a_filtered_read_of_uncompressed_numbers_decodes_none_of_their_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(3)
    n = 200_000
    data = pa.table({"x": rng.random(n), "f": rng.random(n), "g": rng.random(n)})
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("n", data.schema, groups={"p": ["f", "g"]})
        t.append(data, "a")
        full = t.scan(columns=["f", "g"], where=pc.field("x") >= 0)

        read_file = FragmentReader._read_file

        def whole_columns_only(self: FragmentReader, *args: Any) -> pa.Table:
            assert args[-1] is None, "a page of f or g was decoded"  # rows: a selective read
            return read_file(self, *args)

        monkeypatch.setattr(pages, "_assemble", whole_columns_only)
        monkeypatch.setattr(FragmentReader, "_read_file", whole_columns_only)
        for where in (pc.field("x") < 0.001, pc.field("x") < 0.2):
            few = t.scan(columns=["f", "g"], where=where)  # x alone is decoded, by pyarrow
            assert few.table.equals(data.filter(where).select(["f", "g"]))
            assert few.stats.bytes_read <= full.stats.bytes_read


def test_full_reads_take_plain_values_in_place_from_a_files_second_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file read once is read by pyarrow (parsing its footer in Python would cost more); from
    its second read on, its plain columns are taken in place, with the same result."""
    from omnitable.format import reader as reader_module

    gathered: list[str] = []
    gather = reader_module.gather_plain

    def recording(handle: pa.NativeFile, uri: str, column: str, rows: Any) -> Any:
        got = gather(handle, uri, column, rows)
        if rows is None and got is not None:
            gathered.append(column)
        return got

    monkeypatch.setattr(reader_module, "gather_plain", recording)
    rng = np.random.default_rng(4)
    data = pa.table({"f": rng.random(5000), "s": rng.choice(["a", "b"], 5000)})
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("twice", data.schema, groups={"p": ["f"]})
        t.append(data, "a", row_group_size=1000)  # pages read in one span: values at any byte
        clear_cache()
        first = t.read(columns=["f", "s"])
        assert gathered == []
        second = t.read(columns=["f", "s"])
        assert gathered == ["f"]  # s (a string column) is never tried
        assert first.equals(second) and first.equals(data)
        # values after a page header start at any byte: the chunks returned are aligned (Arrow's
        # kernels expect it; Acero warns on every batch that is not)
        for chunk in second.column("f").chunks:
            assert chunk.buffers()[1].address % 8 == 0
        assert (
            second.filter(pc.field("f") < 0.5).num_rows == pc.sum(pc.less(data["f"], 0.5)).as_py()
        )


def _read_in_child(path: str, out: Any, inherited: Any) -> None:
    assert inherited.get("any", None) is None  # the parent's snapshot cache, copied by fork
    with omnitable.connect(path) as wh:  # a fresh connection: the catalog's own engine
        t = wh.table("forked")
        out.put(t.read(columns=["text", "f"], where=pc.field("x") < 0.05).num_rows)


def test_a_forked_child_reads_though_the_parent_held_every_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DataLoader worker is a fork: the parent's decoding threads are not in it and a lock a
    parent thread held stays held, unless the page reader and the snapshot cache renew them."""
    rng = np.random.default_rng(6)
    n = 6_000
    data = pa.table({"x": rng.random(n), "f": rng.random(n), "text": _text(rng, n, 300)})
    monkeypatch.setattr(pages, "_PARALLEL_BYTES", 0)  # row groups decoded on the pool threads
    with omnitable.connect(tmp_path) as wh:
        t = wh.create_table("forked", data.schema)
        t.append(data, "a", row_group_size=1_500)
        where = pc.field("x") < 0.05
        want = t.read(columns=["text", "f"], where=where).num_rows  # the parent's pool exists
        out = FORK.Queue()
        locks = [pages._SEEN_LOCK, pages._CACHE._lock, wh.catalog.snapshots._lock]
        for lock in locks:
            lock.acquire()
        try:
            child = start_forked(_read_in_child, str(tmp_path), out, wh.catalog.snapshots)
        finally:
            for lock in locks:
                lock.release()
        wait_forked(child)
        assert out.get(timeout=5) == want
