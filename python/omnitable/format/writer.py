"""Writing fragments and aligned column files (docs/format.md).

Writers put files at their final, uniquely named paths; nothing is visible until a catalog commit
lists them. Each column file holds exactly the rows it is given, in order (alignment).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from omnitable import settings
from omnitable.format.fs import Location
from omnitable.format.stitch import LeadingPart, stitch
from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor
from omnitable.vocabulary.names import BASE_GROUP, ROW_ID
from omnitable.vocabulary.stats import compute_stats

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
SMALL_DICTIONARY_BYTES = 64 * 1024  # dictionary page limit of files with write.page_rows
_MIN_WIDE_PAGE_ROWS = 16  # pages of a very wide column (embeddings) hold at least this many
_DICTIONARY_SAMPLE = 8192  # values sampled per column to choose its encoding (dictionary_columns)
_MIN_DICTIONARY_SAMPLE = 64  # fewer values: keep the dictionary (too few to judge)
WIDE_FILE_GROUP = f"{BASE_GROUP}.wide"  # file label of the base group's wide columns


@dataclass(frozen=True)
class WriteOptions:
    """How files are laid out. Readers accept any values; these only tune size and speed.

    Each field is the setting ``write.<field>`` of :mod:`omnitable.settings` (docs/settings.md).
    """

    row_group_size: int = settings.WRITE_ROW_GROUP_SIZE.default
    row_group_bytes: int | None = settings.WRITE_ROW_GROUP_BYTES.default
    compression: str | None = settings.WRITE_COMPRESSION.default
    compression_level: int | None = settings.WRITE_COMPRESSION_LEVEL.default
    wide_row_bytes: int = settings.WRITE_WIDE_ROW_BYTES.default
    wide_data_page_size: int = settings.WRITE_WIDE_DATA_PAGE_SIZE.default
    page_rows: int | None = settings.WRITE_PAGE_ROWS.default
    target_fragment_rows: int = settings.WRITE_TARGET_FRAGMENT_ROWS.default
    target_fragment_bytes: int = settings.WRITE_TARGET_FRAGMENT_BYTES.default

    def validated(self) -> WriteOptions:
        """These options with every field checked by its setting's parser (ValidationError)."""
        return dataclasses.replace(
            self,
            **{s.name: s.check(getattr(self, s.name), "write", s.name) for s in _WRITE_SETTINGS},
        )

    def as_settings(self) -> dict[str, Any]:
        """The fields that differ from their defaults, as ``{"write.<field>": value}`` (what a
        warehouse's write options set; the rest is left to table properties and defaults)."""
        return {
            s.key: getattr(self, s.name)
            for s in _WRITE_SETTINGS
            if getattr(self, s.name) != s.default
        }

    @classmethod
    def resolve(cls, sources: settings.Sources, **arguments: Any) -> WriteOptions:
        """Every field through the precedence chain (``arguments``: field -> value or None)."""
        return cls(**sources.resolve_fields("write.", arguments)).validated()


_WRITE_SETTINGS = [s for s in settings.SETTINGS.values() if s.key.startswith("write.")]


def batch_directory(batch_name: str, batch_id: str) -> str:
    """``data/<slug>-<batch8>``: the batch's directory relative to the table location."""
    slug = _SLUG_UNSAFE.sub("_", batch_name)[:64] or "_"
    return f"data/{slug}-{batch_id[:8]}"


def new_id() -> str:
    return uuid.uuid4().hex


def write_column_file(
    location: Location,
    fragment_id: str,
    fragment_path: str,
    group: str,
    data: pa.Table,
    physical_names: dict[str, str],
    options: WriteOptions,
    feature_versions: dict[str, str] | None = None,
    threads: int = 1,
) -> FileDescriptor:
    """Write ``data`` (logical column names, canonical types) as one column file of a fragment,
    its row groups encoded by up to ``threads`` threads (:func:`file_parts`)."""
    file_id = new_id()
    rel = f"{fragment_path}/{group}-{file_id}.parquet"
    stats = {name: compute_stats(data.column(name)) for name in data.column_names}
    physical = data.rename_columns([physical_names.get(n, n) for n in data.column_names])
    path = location.child_path(rel)
    location.fs.create_dir(location.child_path(fragment_path), recursive=True)
    rows = row_group_rows(data, options)
    settings_ = _writer_settings(physical, options)
    parts = file_parts(physical, rows, threads)
    if len(parts) == 1:
        with location.fs.open_output_stream(path) as sink:
            _write_parquet(physical, sink, rows, settings_)
    else:  # pyarrow encodes and compresses without the GIL; the first part goes to the file
        with (
            ThreadPoolExecutor(len(parts) - 1, thread_name_prefix="omnitable-part") as pool,
            location.fs.open_output_stream(path) as sink,
        ):
            later = [pool.submit(_parquet_bytes, p, rows, settings_) for p in parts[1:]]
            lead = LeadingPart(sink)
            _write_parquet(parts[0], lead.stream, rows, settings_, lead.end_of_data)
            stitch([f.result() for f in later], sink, lead)
    size = location.fs.get_file_info(path).size or 0
    return FileDescriptor(
        file_id=file_id,
        fragment_id=fragment_id,
        group_name=group,
        path=rel,
        row_count=data.num_rows,
        size_bytes=int(size),
        columns=stats,
        feature_versions=dict(feature_versions or {}),
    )


PART_MIN_BYTES = 32 * 1024 * 1024  # Arrow bytes of data per part of a file written in parts


def file_parts(data: pa.Table, group_rows: int, threads: int) -> list[pa.Table]:
    """``data`` cut into the parts written on their own threads and stitched into one file
    (:mod:`omnitable.format.stitch`): up to ``threads`` runs of whole row groups of
    ``group_rows`` rows, each at least ``PART_MIN_BYTES`` of data; one part (``data``) for a
    file too small to gain from it, or of one row group."""
    groups = -(-data.num_rows // max(1, group_rows))
    count = min(threads, groups, data.nbytes // PART_MIN_BYTES)
    if count < 2:
        return [data]
    per_part = -(-groups // count) * group_rows
    return [data.slice(start, per_part) for start in range(0, data.num_rows, per_part)]


def _writer_settings(physical: pa.Table, options: WriteOptions) -> dict[str, Any]:
    """pyarrow ``ParquetWriter`` arguments for a file of ``physical`` (chosen from the whole
    file's data, so every part of a file written in parts is written alike)."""
    pages = _page_settings(physical, options)
    return {
        "use_compliant_nested_type": True,
        "write_page_index": True,
        **_codec_settings(physical, _small_page_codec(physical, options), pages["use_dictionary"]),
        **pages,
    }


def _write_parquet(
    data: pa.Table,
    sink: Any,
    rows: int,
    settings_: dict[str, Any],
    before_close: Callable[[], None] | None = None,
) -> None:
    with pq.ParquetWriter(sink, data.schema, **settings_) as writer:
        writer.write_table(data, row_group_size=rows)
        if before_close is not None:
            before_close()


def _parquet_bytes(data: pa.Table, rows: int, settings_: dict[str, Any]) -> pa.Buffer:
    sink = pa.BufferOutputStream()
    _write_parquet(data, sink, rows, settings_)
    return sink.getvalue()


def row_group_rows(data: pa.Table, options: WriteOptions) -> int:
    """Rows per row group for ``data``: ``row_group_size``, fewer where that many rows of the
    average size would exceed ``row_group_bytes`` (never below 1)."""
    rows = options.row_group_size
    if options.row_group_bytes is not None and data.num_rows and data.nbytes:
        rows = min(rows, max(1, int(options.row_group_bytes * data.num_rows // data.nbytes)))
    return rows


def _page_settings(data: pa.Table, options: WriteOptions) -> dict[str, Any]:
    """Page and dictionary choices for a file of ``data`` (docs/format.md, "Pages")."""
    out: dict[str, Any] = {
        "use_dictionary": dictionary_columns(data, row_group_rows(data, options))
    }
    widest = max((_value_bytes(c) for c in data.columns), default=0.0)
    if widest >= options.wide_row_bytes:
        # pages of the widest column hold ~`rows` values (about wide_data_page_size bytes), so
        # a selective read decodes few of them; pyarrow checks a page's size once per write
        # batch, hence batches of half that and a limit just under it. Narrower columns get
        # pages of that limit in bytes.
        rows = max(_MIN_WIDE_PAGE_ROWS, int(options.wide_data_page_size // widest))
        out["data_page_size"] = max(1024, int(0.9 * rows * widest))
        out["write_batch_size"] = min(64, rows // 2)
    if options.page_rows is not None:
        # small pages for point reads (format/pages.py); a column of mostly distinct values
        # falls back from its dictionary early, so a point read decodes a small dictionary
        out["max_rows_per_page"] = options.page_rows
        out["dictionary_pagesize_limit"] = SMALL_DICTIONARY_BYTES
        out["write_batch_size"] = min(out.get("write_batch_size", 1024), options.page_rows)
    return out


SMALL_PAGE_ZSTD_LEVEL = 1  # zstd level of files with small pages (level <= 3 configured)


def _small_page_codec(data: pa.Table, options: WriteOptions) -> WriteOptions:
    """``options`` for the codec of a file of ``data``: where the file gets small pages (a
    wide column, :func:`_page_settings`) and ``write.compression`` is zstd at level 2 or 3,
    level ``SMALL_PAGE_ZSTD_LEVEL``. Each ~8 KiB page is compressed on its own, where level 3
    finds nothing level 1 misses (a 1 M-row text file: 0.9 % smaller at level 1) but costs
    ~25 % more CPU; higher levels, chosen for size, are kept."""
    level = options.compression_level
    if (options.compression or "").lower() != "zstd" or level is None or not 1 < level <= 3:
        return options
    if max((_value_bytes(c) for c in data.columns), default=0.0) < options.wide_row_bytes:
        return options  # pyarrow's 1 MiB pages (_page_settings)
    return dataclasses.replace(options, compression_level=SMALL_PAGE_ZSTD_LEVEL)


def _codec_settings(
    data: pa.Table, options: WriteOptions, dictionary: bool | list[str] = False
) -> dict[str, Any]:
    """``write.compression`` (at ``write.compression_level`` where the codec takes a level:
    not snappy, not uncompressed) for every column but the fixed-width ones whose stored form it
    does not shrink by a tenth: the values themselves (random floats, hashes), or, for a
    column ``dictionary`` (``use_dictionary``: True for all) encodes, its bit-packed
    dictionary indices (labels, small counts). Those are stored uncompressed, which reads them
    3-4x faster for the same bytes (docs/format.md); more so in the small pages of keyed
    tables, where zstd's cost per page dominates a point read."""
    if options.compression is None or options.compression.lower() in ("none", "uncompressed"):
        return {"compression": options.compression, "compression_level": None}
    level = options.compression_level
    if not pa.Codec.supports_compression_level(options.compression):
        level = None  # snappy: ``write.compression_level`` does not apply
    out: dict[str, Any] = {"compression": options.compression, "compression_level": level}
    codec = pa.Codec(options.compression, compression_level=level)
    plain = {
        name
        for name, column in zip(data.column_names, data.columns, strict=True)
        if _incompressible(column, codec, _encoded(dictionary, name), options)
    }
    if not plain:
        return out
    paths = _leaf_paths(data.schema)
    out["compression"] = {p: "none" if p in plain else options.compression for p in paths}
    if level is not None:
        out["compression_level"] = {p: level for p in paths if p not in plain}
    return out


def _incompressible(
    column: pa.ChunkedArray, codec: pa.Codec, encoded: bool, options: WriteOptions
) -> bool:
    t = column.type
    fixed = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)
    if not fixed or len(column) < _MIN_DICTIONARY_SAMPLE:
        return False
    sample = column.slice(0, _DICTIONARY_SAMPLE).combine_chunks()
    if encoded:
        return _encoded_incompressible(sample, options)
    if not _numeric(t):
        return False
    width, data = t.bit_width // 8, sample.buffers()[1]
    if data is None:
        return False
    raw = data[sample.offset * width : (sample.offset + len(sample)) * width]
    return len(codec.compress(raw)) > 0.9 * len(raw)


def _numeric(t: pa.DataType) -> bool:
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_temporal(t)) and (
        t.bit_width >= 32
    )


def _value_bytes(column: pa.ChunkedArray) -> float:
    """Average Arrow bytes per value of ``column`` (offsets and validity included)."""
    return column.nbytes / len(column) if len(column) else 0.0


def dictionary_columns(data: pa.Table, row_group: int) -> bool | list[str]:
    """Leaf paths to dictionary-encode (True: all): every leaf but the flat columns whose
    values are mostly distinct — about ``row_group / 4`` or more distinct values per row group,
    estimated from a spread sample (ids, measurements, free text). There a dictionary only costs:
    pyarrow hashes values into it until it outgrows its 1 MiB page and falls back to plain, for a
    larger, slower file whose page reads must fetch it whole. Fewer than
    ``_MIN_DICTIONARY_SAMPLE`` values are too few to judge: dictionary kept."""
    plain = set()
    for name, column in zip(data.column_names, data.columns, strict=True):
        t = column.type
        if pa.types.is_nested(t) or pa.types.is_dictionary(t) or pa.types.is_boolean(t):
            continue
        if len(column) >= _MIN_DICTIONARY_SAMPLE and _many_distinct(column, row_group):
            plain.add(name)
    if not plain:
        return True
    return [p for p in _leaf_paths(data.schema) if p not in plain]


def _many_distinct(column: pa.ChunkedArray, row_group: int) -> bool:
    """Whether ``column`` has about ``row_group / 4`` or more distinct values per row group,
    from the repeats in an evenly spread sample of ``_DICTIONARY_SAMPLE`` values (exact for
    shorter columns)."""
    n = len(column)
    if n <= _DICTIONARY_SAMPLE:
        return _distinct(column) >= min(n, row_group) / 4
    idx = np.linspace(0, n - 1, _DICTIONARY_SAMPLE).astype(np.int64)
    repeats = _DICTIONARY_SAMPLE - _distinct(_take(column, idx))
    # m values sampled from D equally likely ones repeat about m^2 / (2 D) times
    return repeats * min(n, row_group) <= 2 * _DICTIONARY_SAMPLE**2


def _distinct(values: pa.ChunkedArray) -> int:
    """How many distinct values ``values`` holds (NULL counting as one): by numpy's sort for
    numbers without NULLs (NaNs counted as one; 10x faster than Arrow's hash kernel on a few
    thousand values), else by ``count_distinct``."""
    t = values.type
    if values.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return int(np.unique(values.to_numpy()).size)
    return int(pc.count_distinct(values, mode="all").as_py())


def _take(column: pa.ChunkedArray, idx: np.ndarray) -> pa.ChunkedArray:
    """``column.take(idx)`` (``idx`` sorted) chunk by chunk: pyarrow's take of a chunked
    variable-width column concatenates every chunk first (0.6 s for a 1 M-row ~250-byte
    text column of several chunks, against 2 ms)."""
    if column.num_chunks <= 1:
        return column.take(idx)
    bounds = np.cumsum([0, *(len(c) for c in column.chunks)])
    cuts = np.searchsorted(idx, bounds)
    return pa.chunked_array(
        [chunk.take(pa.array(idx[cuts[i] : cuts[i + 1]] - bounds[i]))
         for i, chunk in enumerate(column.chunks) if cuts[i + 1] > cuts[i]],
        type=column.type,
    )  # fmt: skip


def _encoded(dictionary: bool | list[str], name: str) -> bool:
    """Whether ``use_dictionary`` (``dictionary``) encodes the column ``name``."""
    return dictionary is True or (isinstance(dictionary, list) and name in dictionary)


def _encoded_incompressible(sample: pa.Array, options: WriteOptions) -> bool:
    """Whether ``write.compression`` shrinks the dictionary-encoded data pages of ``sample``
    (as this writer would page them) by less than a tenth. The dictionary page is left out:
    one per row group, it weighs far more in a sample than in a file."""
    sizes = []
    for compression in (options.compression, "none"):
        sink = pa.BufferOutputStream()
        pq.write_table(
            pa.table({"v": sample}),
            sink,
            compression=compression,
            compression_level=(
                options.compression_level
                if compression != "none" and pa.Codec.supports_compression_level(compression)
                else None
            ),
            use_dictionary=True,
            max_rows_per_page=options.page_rows or _DICTIONARY_SAMPLE,
            write_statistics=False,
        )
        chunk = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata.row_group(0).column(0)
        dictionary = chunk.data_page_offset - (
            chunk.dictionary_page_offset or chunk.data_page_offset
        )
        sizes.append(chunk.total_compressed_size - dictionary)
    return sizes[0] > 0.9 * sizes[1]


@functools.lru_cache(maxsize=256)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet leaf column paths (``a.list.element``) of files written with ``schema``."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, use_compliant_nested_type=True)
    meta = pq.ParquetFile(pa.BufferReader(sink.getvalue())).metadata
    return tuple(meta.schema.column(i).path for i in range(meta.num_columns))


def split_wide_columns(
    data: pa.Table, by_group: dict[str, list[str]], options: WriteOptions
) -> dict[str, list[str]]:
    """``by_group`` with the wide columns of the base group (at least ``wide_row_bytes`` per
    value in ``data``) moved to a file of their own, labelled ``WIDE_FILE_GROUP``, when the
    base group also has narrower columns. The base group holds the columns the user placed in
    no group, so their files are the writer's to lay out: the wide columns' small pages
    (:func:`_page_settings`) then apply to them only, not to every column of the file. The
    catalog's groups are unchanged; readers find each column in the file carrying it."""
    names = by_group.get(BASE_GROUP)
    if not names or len(names) < 2 or data.num_rows == 0 or WIDE_FILE_GROUP in by_group:
        return by_group
    wide = [n for n in names
            if n != ROW_ID and _value_bytes(data.column(n)) >= options.wide_row_bytes]  # fmt: skip
    if not wide or len(wide) == len(names):
        return by_group
    out: dict[str, list[str]] = {}
    for group, cols in by_group.items():  # the wide file right after the base file
        if group == BASE_GROUP:
            out[group] = [n for n in cols if n not in wide]
            out[WIDE_FILE_GROUP] = wide
        else:
            out[group] = cols
    return out


def write_fragment(
    location: Location,
    batch_name: str,
    batch_id: str,
    data: pa.Table,
    group_of: dict[str, str],
    physical_names: dict[str, str],
    options: WriteOptions,
    seq: int = 0,
    threads: int | None = None,
) -> FragmentDescriptor:
    """Write one fragment: one column file per group present in ``data`` (the base group's
    wide columns in one more, :func:`split_wide_columns`), listed in the order the groups
    first appear in ``data``, written by up to ``threads`` threads at once, a large file's
    row groups too (:func:`file_parts`; default: one per core; a Spark task, which has one
    core, passes 1).

    Args:
        seq: position of the fragment within its batch (readers order fragments by it).
        data: rows of the fragment, logical names, canonical types, ``_ai_unique_id_`` included.
        group_of: column name → group name for every column of ``data``.
    """
    fragment_id = new_id()
    frag_path = f"{batch_directory(batch_name, batch_id)}/{fragment_id}"
    by_group: dict[str, list[str]] = {}
    for name in data.column_names:
        by_group.setdefault(group_of[name], []).append(name)
    by_group = split_wide_columns(data, by_group, options)

    cores = threads or os.cpu_count() or 1

    def write(group: str) -> FileDescriptor:
        return write_column_file(location, fragment_id, frag_path, group,
                                 data.select(by_group[group]), physical_names, options,
                                 threads=cores)  # fmt: skip

    workers = min(len(by_group), cores)
    if workers <= 1:
        files = [write(group) for group in by_group]
    else:  # pyarrow encodes and compresses without the GIL; every write ends before a raise
        with ThreadPoolExecutor(workers, thread_name_prefix="omnitable-write") as pool:
            files = list(pool.map(write, by_group))
    return FragmentDescriptor(fragment_id, batch_id, data.num_rows, frag_path, files, seq)
