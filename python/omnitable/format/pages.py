"""Point reads of Parquet pages: decode only the data pages that hold the wanted rows.

pyarrow reads whole row groups (131,072 rows by default); a point lookup wants a handful of
rows from each. With the file's page index (every file we write has one, docs/format.md), the
offset index of a column chunk says where each data page starts and which row it begins with.
:func:`read_pages` reads the footer and those offset indexes (both cached per file: files never
change), picks the pages holding the wanted rows, fetches their bytes (adjacent pages in one
read; of a memory-mapped file, views of the mapping) and assembles, per source row group with
hits, a small synthetic in-memory Parquet file: the selected columns' schema, one row group,
each column chunk made of its dictionary page and the selected data pages, with counts, sizes
and offsets rewritten. pyarrow decodes each file (on the decoding threads as soon as it is
built, when there is enough to decode) and the wanted rows are taken from it.

The pages of different leaf columns need not start at the same rows, so the rows read are
widened until every leaf's selected pages cover exactly the same rows (a fixed point; pages of
repeated columns start at record boundaries when a page index is written). Anything this module
does not handle (no offset index, encryption, an external column chunk, a footer or header that
does not parse, a read that would save little) returns None and the caller reads row groups as
before: never a wrong answer.
"""

from __future__ import annotations

import base64
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from omnitable.exceptions import CorruptInputError
from omnitable.format import thrift_compact as tc
from omnitable.format.dictionary_pages import (
    IndexRuns,
    as_arrow,
    dictionary_type,
    dictionary_values,
    index_layout,
    unpack_indices,
)
from omnitable.format.plain_pages import plain_type, value_offset
from omnitable.format.string_pages import (
    MAX_STEPS,
    SCRATCH_BYTES,
    StringLeaf,
    parse_headers,
    string_leaf,
    take_values,
)
from omnitable.format.thrift_compact import Struct, ThriftList

_TAIL = 64 * 1024  # bytes read from the end of a file for its footer, in one read
_GAP = 16 * 1024  # pages closer than this are fetched in one read
_PARALLEL_BYTES = 1024 * 1024  # pages at least this big: synthetic files decoded in parallel
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_MAX_FILES = 512  # files whose footer and offset indexes stay cached
_SCRATCH_MAX = 16 * 1024 * 1024  # reads up to this size reuse a per-thread buffer
_SCRATCH = threading.local()
_HEAD = 256  # bytes of a page read to find where its values start (header, levels)
_SAVING = 0.5  # use pages only when they are at most this fraction of the row groups' bytes
_DATA_PAGE, _DICTIONARY_PAGE, _DATA_PAGE_V2 = 0, 2, 3
_REPEATED = 2  # FieldRepetitionType
# ColumnMetaData fields that describe the whole source chunk (statistics, encoding stats,
# bloom filter, size and geospatial statistics, index page): dropped from the synthetic file
_CHUNK_ONLY = (10, 12, 13, 14, 15, 16, 17)


@dataclass
class _Pages:
    """The data pages of one leaf column over all row groups (from its offset indexes)."""

    starts: np.ndarray  # first row of each page, in file rows
    ends: np.ndarray  # one past its last row
    offsets: np.ndarray  # file offset of its header
    sizes: np.ndarray  # bytes, header included
    group: np.ndarray  # its row group


@dataclass
class _FileInfo:
    meta: Struct  # FileMetaData
    num_rows: int
    group_rows: np.ndarray  # rows of each row group
    group_starts: np.ndarray  # first file row of each row group
    tops: dict[str, tuple[list[Struct], list[int]]]  # top-level field -> schema elements, leaves
    arrow_schema: pa.Schema | None
    flat: set[int]  # leaves without a repeated ancestor: a data page's values are its rows
    pages: dict[int, _Pages] = field(default_factory=dict)
    plain: dict[int, _Plain | None] = field(default_factory=dict)  # leaf -> its plain layout
    dicts: dict[int, _Dictionary | None] = field(default_factory=dict)  # leaf -> its indices


@dataclass
class _Plain:
    """A leaf whose chunks are uncompressed fixed-width values (:func:`gather_plain`)."""

    dtype: np.dtype
    arrow_type: pa.DataType
    max_def: int
    values: np.ndarray  # per page: file offset of its first value; -1 unknown yet, -2 not plain


@dataclass
class _Dictionary:
    """A leaf whose chunks are uncompressed dictionary-encoded fixed-width values
    (:func:`gather_dictionary`). Per page, once parsed: its runs; and when they are evenly
    spaced bit-packed runs (what pyarrow writes where no value repeats 8 times in a row), where
    index ``k`` is, for all such pages at once (``first``, ``per_run``, ``stride``, ``width``)."""

    dtype: np.dtype  # of the dictionary's values
    arrow_type: pa.DataType
    max_def: int
    pages: int  # pages of the leaf in the file
    runs: dict[int, IndexRuns | None] = field(default_factory=dict)  # page -> its index runs
    values: dict[int, np.ndarray] = field(default_factory=dict)  # row group -> its dictionary
    even: np.ndarray = field(init=False)  # per page: 1 evenly spaced runs, 0 other, -1 not yet
    first: np.ndarray = field(init=False)  # file offset of the first run's packed indices
    per_run: np.ndarray = field(init=False)  # values in each run but the last
    stride: np.ndarray = field(init=False)  # bytes from one run's indices to the next one's
    width: np.ndarray = field(init=False)  # bits per index

    def __post_init__(self) -> None:
        self.even = np.full(self.pages, -1, dtype=np.int8)
        self.first, self.per_run, self.stride, self.width = (
            np.zeros(self.pages, dtype=np.int64) for _ in range(4)
        )

    def parsed(self, page: int, offset: int, rows: int, runs: IndexRuns | None) -> None:
        """Record the runs of page ``page`` of ``rows`` values (None: not a page read here),
        whose header is at ``offset``."""
        self.runs[page] = runs
        spacing = None if runs is None else runs.spacing(rows)
        if runs is not None and spacing is not None:
            self.first[page] = offset + int(runs.at[0])
            self.per_run[page], self.stride[page] = spacing
            self.width[page] = runs.width
        self.even[page] = int(spacing is not None)


@dataclass(frozen=True)
class PageRead:
    """What :func:`read_pages` returns: the rows, the file's row count, the bytes fetched."""

    table: pa.Table
    file_rows: int
    bytes_read: int


class _Cache:
    """Parsed footers by file URI (files never change), least recently used evicted first."""

    def __init__(self, max_files: int) -> None:
        self.max_files = max_files
        self._items: OrderedDict[str, _FileInfo] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, uri: str) -> _FileInfo | None:
        with self._lock:
            found = self._items.get(uri)
            if found is not None:
                self._items.move_to_end(uri)
            return found

    def put(self, uri: str, info: _FileInfo) -> None:
        with self._lock:
            self._items[uri] = info
            while len(self._items) > self.max_files:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def reset_lock(self) -> None:
        """A new lock (in a forked child, where another thread may have held the old one)."""
        self._lock = threading.Lock()


_CACHE = _Cache(_MAX_FILES)
_MAX_SEEN = 8192  # files remembered as read once (read_before)
_SEEN: OrderedDict[str, None] = OrderedDict()
_SEEN_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    """In a forked child (a DataLoader worker) the parent's decoding threads do not exist and
    a lock another parent thread held stays held: start a new pool on first use and new locks
    (the cached footers stay valid: files never change)."""
    global _POOL, _POOL_LOCK, _SEEN_LOCK
    _POOL, _POOL_LOCK, _SEEN_LOCK = None, threading.Lock(), threading.Lock()
    _CACHE.reset_lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
# what a file this module does not read raises (a missing footer field reads as None)
_NOT_FOR_PAGES = (
    CorruptInputError,
    OSError,
    ValueError,
    LookupError,
    TypeError,
    AttributeError,
    ArithmeticError,
    pa.ArrowException,
)
log = logging.getLogger(__name__)


def clear_cache() -> None:
    """Forget every cached footer and offset index, and which files were read."""
    _CACHE.clear()
    with _SEEN_LOCK:
        _SEEN.clear()


def footer_cached(uri: str) -> bool:
    """Whether the footer of the file at ``uri`` is parsed and cached here."""
    return _CACHE.get(uri) is not None


def read_before(uri: str) -> bool:
    """Whether the file at ``uri`` was asked about here before (then noted as asked about):
    a file read twice is likely read again, worth parsing its footer for."""
    with _SEEN_LOCK:
        if uri in _SEEN:
            _SEEN.move_to_end(uri)
            return True
        _SEEN[uri] = None
        while len(_SEEN) > _MAX_SEEN:
            _SEEN.popitem(last=False)
        return False


def read_pages(
    handle: pa.NativeFile,
    uri: str,
    columns: list[str],
    rows: np.ndarray,
    max_fraction: float = _SAVING,
) -> PageRead | None:
    """The rows at ``rows`` (sorted, distinct file rows) of the top-level ``columns`` of a
    Parquet file, decoding only the data pages holding them; None when the file or the read is
    not one for page reads (the caller reads row groups instead), or when the pages hold more
    than ``max_fraction`` of the bytes of the row groups they lie in."""
    if len(rows) == 0 or len(set(columns)) != len(columns):
        return None
    try:
        found = _footer_for(handle, uri, columns, rows)
        if found is None:
            return None
        info, leaves = found
        pages = _leaf_pages(handle, info, leaves)
        if pages is None:
            return None
        picked = _cover(rows, pages)
        if picked is None or not _worth_it(info, leaves, pages, picked, max_fraction):
            return None
        return _assemble(handle, info, columns, leaves, pages, picked, rows)
    except _NOT_FOR_PAGES as exc:
        # not a file this module reads: the caller's row-group read answers, or reports it
        log.debug("Point read of %s by row groups: %s: %s", uri, type(exc).__name__, exc)
        return None


def gather_plain(
    handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray | None
) -> PageRead | None:
    """The rows at ``rows`` (sorted, distinct file rows; None: every row) of the top-level
    ``column`` taken straight from the bytes of the pages holding them, with no page decoded,
    when the column is one uncompressed fixed-width leaf and those pages are PLAIN without
    NULLs (:mod:`omnitable.format.plain_pages`): the pages' values are read (adjacent ones in
    one read; of a memory-mapped file, viewed in the mapping); None otherwise (the
    caller decodes pages or row groups)."""

    def gather(info: _FileInfo, leaf: int, p: _Pages) -> PageRead | None:
        if rows is None:
            return _gather_all(handle, info, column, leaf, p, None)
        if 2 * len(rows) > info.num_rows:  # most rows (a delete's live ones): every page read
            got = _gather_all(handle, info, column, leaf, p, rows)
            if got is not None:
                return got  # else a page no wanted row lies in may not be plain
        return _gather(handle, info, column, leaf, p, rows)

    return _by_pages("pages", handle, uri, column, rows, gather)


def gather_dictionary(
    handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray
) -> PageRead | None:
    """The rows at ``rows`` (sorted, distinct file rows) of the top-level ``column`` looked up
    in its row groups' dictionaries by the indices taken straight from the bytes of the pages
    holding them, with no page decoded, when the column is one uncompressed fixed-width
    dictionary-encoded leaf and those pages hold no NULL (their indices in bit-packed and RLE
    runs: :mod:`omnitable.format.dictionary_pages`); None otherwise (the caller decodes pages
    or row groups)."""

    def gather(info: _FileInfo, leaf: int, p: _Pages) -> PageRead | None:
        return _gather_indices(handle, info, column, leaf, p, rows)

    return _by_pages("dictionary pages", handle, uri, column, rows, gather)


def _gather_indices(
    handle: pa.NativeFile, info: _FileInfo, column: str, leaf: int, p: _Pages, rows: np.ndarray
) -> PageRead | None:
    layout = _dictionary_of(info, column, leaf, len(p.starts))
    if layout is None:
        return None
    page = np.searchsorted(p.starts, rows, side="right") - 1  # the page holding each row
    new_page = np.empty(len(page), dtype=bool)  # rows are sorted: a page's rows are one run
    new_page[0] = True
    np.not_equal(page[1:], page[:-1], out=new_page[1:])
    hit = page[new_page]
    if np.any(np.diff(p.offsets[hit]) <= 0):
        return None  # row groups not stored in their order: the span below assumes they are
    if not _parse_pages(handle, p, layout, hit):
        return None
    group = p.group[page]
    groups = group[np.r_[True, group[1:] != group[:-1]]]
    if not _load_dictionaries(handle, info, leaf, layout, groups):
        return None
    k = rows - p.starts[page]  # the row's value in its page
    index = np.empty(len(rows), dtype=np.int64)
    even = layout.even[page] == 1
    lo = int(p.offsets[hit[0]])
    # 8 bytes more where the file has them (the next page or the footer follows): every index
    # is then one 64-bit load (dictionary_pages.unpack_indices)
    hi = min(int(p.offsets[hit[-1]] + p.sizes[hit[-1]]) + 8, handle.size())
    blob, bytes_read = _span_or_pages(handle, p, hit, lo, hi)
    if even.all():  # the common case: every value's bits by arithmetic
        index[:] = _even_indices(layout, blob, lo, page, k)
    else:
        at = np.flatnonzero(even)
        index[at] = _even_indices(layout, blob, lo, page[at], k[at])
        other = np.flatnonzero(~even)
        index[other] = _run_indices(layout, blob, lo, p, page[other], k[other])
    found = np.empty(len(rows), dtype=layout.dtype)
    for g in groups.tolist():
        in_group = group == g
        values = layout.values[g]
        if int(index[in_group].max()) >= len(values) or int(index[in_group].min()) < 0:
            raise CorruptInputError(f"a dictionary index past row group {g}'s dictionary")
        found[in_group] = values[index[in_group]]
    table = pa.Table.from_arrays([as_arrow(found, layout.arrow_type)], names=[column])
    return PageRead(table, info.num_rows, bytes_read)


def _even_indices(
    layout: _Dictionary, blob: np.ndarray, lo: int, page: np.ndarray, k: np.ndarray
) -> np.ndarray:
    """The indices of values ``k`` of pages ``page``, all of evenly spaced bit-packed runs,
    from ``blob`` (the file's bytes from ``lo``)."""
    out = np.empty(len(page), dtype=np.int64)
    run = k // layout.per_run[page]
    width = layout.width[page]
    bit = (layout.first[page] + run * layout.stride[page] - lo) * 8
    bit += (k - run * layout.per_run[page]) * width
    widths = np.unique(width) if len(width) and width.min() != width.max() else width[:1]
    for w in widths.tolist():
        sel = slice(None) if len(widths) == 1 else width == w
        out[sel] = unpack_indices(blob, bit[sel], w)
    return out


def _run_indices(
    layout: _Dictionary, blob: np.ndarray, lo: int, p: _Pages, page: np.ndarray, k: np.ndarray
) -> np.ndarray:
    """The indices of values ``k`` of pages ``page`` (sorted) from their runs, RLE ones
    included, from ``blob`` (the file's bytes from ``lo``)."""
    hit = np.unique(page)
    runs = [layout.runs[i] for i in hit.tolist()]
    counts = np.array([len(r.starts) for r in runs if r is not None], np.int64)
    if len(counts) != len(runs):
        raise CorruptInputError("a page's runs were not parsed")  # not reached: checked before
    # every run of the pages, keyed by (the page's place in ``hit``, its first value)
    key = np.repeat(np.arange(len(hit), dtype=np.int64) << 32, counts)
    key += np.concatenate([r.starts for r in runs if r is not None])
    packed = np.concatenate([r.packed for r in runs if r is not None])
    at = np.concatenate([r.at for r in runs if r is not None])  # in the page, or the index
    page_at = np.repeat(p.offsets[hit], counts)  # the file offset of the run's page
    width = np.repeat(np.array([r.width for r in runs if r is not None], np.int64), counts)
    run = np.searchsorted(key, (np.searchsorted(hit, page) << 32) + k, side="right") - 1
    out = at[run]  # right for RLE runs; bit-packed ones are unpacked below
    bits = np.flatnonzero(packed[run])
    for w in np.unique(width[run[bits]]).tolist():
        sel = bits[width[run[bits]] == w]
        r = run[sel]
        bit = (page_at[r] + at[r] - lo) * 8 + (k[sel] - (key[r] & 0xFFFFFFFF)) * w
        out[sel] = unpack_indices(blob, bit, w)
    return out


def _span_or_pages(
    handle: pa.NativeFile, p: _Pages, hit: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, int]:
    """The bytes ``[lo, hi)`` of the file as uint8, and the bytes read: of a memory-mapped file
    a view of the mapping (only the pages ``hit`` are touched); else a read of the whole span
    when its pages are close, or of each page into its place (the rest left zero)."""
    if _in_memory(handle):
        blob = np.frombuffer(_span(handle, lo, hi), dtype=np.uint8)
        return blob, int(p.sizes[hit].sum())
    gaps = p.offsets[hit[1:]] - (p.offsets[hit[:-1]] + p.sizes[hit[:-1]])
    if np.all(gaps <= _GAP):
        return np.frombuffer(_span(handle, lo, hi), dtype=np.uint8), hi - lo
    blob = np.zeros(hi - lo, dtype=np.uint8)
    ranges = list(zip(p.offsets[hit].tolist(), p.sizes[hit].tolist(), strict=True))
    fetched, bytes_read = _fetch(handle, ranges)
    for off, size in ranges:
        blob[off - lo : off - lo + size] = np.frombuffer(fetched[off], dtype=np.uint8)
    return blob, bytes_read


def _dictionary_of(info: _FileInfo, column: str, leaf: int, pages: int) -> _Dictionary | None:
    """The leaf's dictionary layout (cached; ``pages``: its data pages in the file): None when
    a chunk is not uncompressed, dictionary-encoded and fixed-width (with an Arrow type this
    module reads)."""
    if leaf not in info.dicts:
        kind = _leaf_kind(info, column, leaf, dictionary_type)
        info.dicts[leaf] = None if kind is None else _Dictionary(*kind, pages)
    return info.dicts[leaf]


_Kind = TypeVar("_Kind")


def _leaf_kind(
    info: _FileInfo,
    column: str,
    leaf: int,
    classify: Callable[[list[Struct], Struct, pa.DataType | None], _Kind | None],
) -> _Kind | None:
    """``classify(the column's schema elements, a chunk's ColumnMetaData, the column's stored
    Arrow type)`` of the leaf when every row group's chunk gives the same answer; else None."""
    schema = info.arrow_schema
    found = schema is not None and schema.get_field_index(column) >= 0
    arrow_type = schema.field(column).type if schema is not None and found else None
    groups: list[Struct] = info.meta.get(4).items
    kinds = {classify(info.tops[column][0], g.get(1).items[leaf].get(3), arrow_type)
             for g in groups}  # fmt: skip
    return kinds.pop() if len(kinds) == 1 else None


def _parse_pages(handle: pa.NativeFile, p: _Pages, layout: _Dictionary, pages: np.ndarray) -> bool:
    """Parse the runs of ``pages`` not parsed yet (each read whole, once); whether every one
    is a dictionary page without NULLs."""
    for i in pages[layout.even[pages] == -1].tolist():
        offset, rows = int(p.offsets[i]), int(p.ends[i] - p.starts[i])
        page = _span(handle, offset, offset + int(p.sizes[i]))
        layout.parsed(i, offset, rows, index_layout(page, layout.max_def, rows))
    return all(layout.runs[i] is not None for i in pages[layout.even[pages] == 0].tolist())


def _load_dictionaries(
    handle: pa.NativeFile, info: _FileInfo, leaf: int, layout: _Dictionary, groups: np.ndarray
) -> bool:
    """Read the dictionaries of the row groups ``groups`` not read yet; whether every one is a
    PLAIN dictionary page of the leaf's values."""
    row_groups: list[Struct] = info.meta.get(4).items
    for g in groups.tolist():
        if g in layout.values:
            continue
        chunk = row_groups[g].get(1).items[leaf]
        span = _dictionary_range(chunk, int(chunk.get(3).get(9)))
        if span is None:
            return False
        values = dictionary_values(_span(handle, span[0], span[0] + span[1]), layout.dtype)
        if values is None:
            return False
        layout.values[g] = values
    return True


def gather_strings(
    handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray
) -> PageRead | None:
    """The rows at ``rows`` (sorted, distinct file rows) of the top-level ``column`` taken
    from the pages holding them without decoding those pages, when the column is one flat
    byte-array leaf (string, binary) stored PLAIN, uncompressed or in zstd
    (:mod:`omnitable.format.string_pages`): the pages are fetched (adjacent ones in one read; of
    a memory-mapped file, viewed in the mapping), decompressed and only the wanted values
    copied out; None otherwise (the caller decodes pages or row groups)."""

    def gather(info: _FileInfo, index: int, p: _Pages) -> PageRead | None:
        leaf = _string_leaf(info, column, index)
        if leaf is None:
            return None
        page = np.searchsorted(p.starts, rows, side="right") - 1
        if int((rows - p.starts[page]).max()) >= MAX_STEPS:
            return None  # a row too deep in its page to walk to (string_pages.MAX_STEPS)
        return _gather_strings(handle, info, column, leaf, p, rows, page)

    return _by_pages("string pages", handle, uri, column, rows, gather)


def _string_leaf(info: _FileInfo, column: str, leaf: int) -> StringLeaf | None:
    schema = info.arrow_schema
    found = schema is not None and schema.get_field_index(column) >= 0
    arrow_type = schema.field(column).type if schema is not None and found else None
    groups: list[Struct] = info.meta.get(4).items
    metas = [g.get(1).items[leaf].get(3) for g in groups]
    return string_leaf(info.tops[column][0], metas, arrow_type)


def _gather_strings(
    handle: pa.NativeFile,
    info: _FileInfo,
    column: str,
    leaf: StringLeaf,
    p: _Pages,
    rows: np.ndarray,
    page: np.ndarray,
) -> PageRead:
    """``rows`` of ``column`` from the pages ``page`` (the page holding each row)."""
    hit, page_of = np.unique(page, return_inverse=True)
    offsets, ends = p.offsets[hit], p.offsets[hit] + p.sizes[hit]
    counts = p.ends[hit] - p.starts[hit]
    at = rows - p.starts[page]
    data, starts, fetched = _pages_bytes(handle, offsets, ends)
    headers = parse_headers(data, starts, starts + (ends - offsets), leaf.uncompressed)
    pool = _decode_pool() if int(headers.size.sum()) >= 2 * SCRATCH_BYTES else None
    values = take_values(data, headers, leaf, counts, page_of, at, pool)
    table = pa.Table.from_arrays([values], names=[column])
    return PageRead(table, info.num_rows, fetched)


def _pages_bytes(
    handle: pa.NativeFile, offsets: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """The byte ranges ``[offsets, ends)`` (sorted, disjoint) in one array: of a memory-mapped
    file, a view of the mapping from the first to the last; else the reads of the ranges
    closer than ``_GAP``, one after the other. Also where each range starts in it, and the
    bytes read (of a mapping: those the reads would have read, as :func:`_fetch` counts)."""
    heads, nexts, reach = _runs(offsets, ends, _GAP)
    lows, highs = offsets[heads], reach[nexts - 1]
    place = np.concatenate([[0], np.cumsum(highs - lows)]).astype(np.int64)
    if _in_memory(handle):
        lo = int(offsets[0])
        blob = _span(handle, lo, int(reach[-1]))
        return np.frombuffer(blob, dtype=np.uint8), offsets - lo, int(place[-1])
    data = np.empty(int(place[-1]), dtype=np.uint8)
    for lo, hi, at in zip(lows.tolist(), highs.tolist(), place.tolist(), strict=False):
        _read_into(handle, lo, data[at : at + hi - lo])
    read = np.repeat(np.arange(len(heads)), nexts - heads)  # the read holding each range
    return data, offsets - lows[read] + place[read], int(place[-1])


def _by_pages(
    what: str,
    handle: pa.NativeFile,
    uri: str,
    column: str,
    rows: np.ndarray | None,
    gather: Callable[[_FileInfo, int, _Pages], PageRead | None],
) -> PageRead | None:
    """``gather(info, leaf, pages)`` of the top-level ``column`` of the file when it is one
    flat leaf with an offset index (:func:`_one_leaf_pages`); None when it is not, when
    ``rows`` is empty, or when reading the file's pages fails in a way that only means they
    cannot be read in place (``_NOT_FOR_PAGES``, logged at debug: the caller decodes pages or
    row groups instead)."""
    if rows is not None and len(rows) == 0:
        return None
    try:
        found = _one_leaf_pages(handle, uri, column, rows)
        return None if found is None else gather(*found)
    except _NOT_FOR_PAGES as exc:
        log.debug("Gather of %s by %s: %s: %s", uri, what, type(exc).__name__, exc)
        return None


def _one_leaf_pages(
    handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray | None
) -> tuple[_FileInfo, int, _Pages] | None:
    """The file's parsed footer, the leaf of ``column`` and that leaf's pages, when the column
    is one leaf without a repeated ancestor (:func:`_flat_leaf`) whose chunks all have an
    offset index (:func:`_leaf_pages`); else None."""
    flat = _flat_leaf(handle, uri, column, rows)
    if flat is None:
        return None
    info, leaf = flat
    found = _leaf_pages(handle, info, [leaf])
    return None if found is None else (info, leaf, found[0])


def _flat_leaf(
    handle: pa.NativeFile, uri: str, column: str, rows: np.ndarray | None
) -> tuple[_FileInfo, int] | None:
    """The file's parsed footer and the leaf of ``column`` when the column is one leaf
    without a repeated ancestor (see :func:`_footer_for`); else None."""
    footer = _footer_for(handle, uri, [column], rows)
    if footer is None:
        return None
    info, leaves = footer
    if len(leaves) != 1 or leaves[0] not in info.flat:
        return None
    return info, leaves[0]


def _footer_for(
    handle: pa.NativeFile, uri: str, columns: list[str], rows: np.ndarray | None
) -> tuple[_FileInfo, list[int]] | None:
    """The file's parsed footer and the leaves of ``columns``, when the file has rows, holds
    every column of ``columns`` at its top level and ``rows`` (sorted; None: every row) lie
    within it; else None."""
    info = _file_info(handle, uri)
    if info is None or info.num_rows == 0 or any(c not in info.tops for c in columns):
        return None
    if rows is not None and (rows[-1] >= info.num_rows or rows[0] < 0):
        return None
    return info, [leaf for c in columns for leaf in info.tops[c][1]]


def _gather_all(
    handle: pa.NativeFile,
    info: _FileInfo,
    column: str,
    leaf: int,
    p: _Pages,
    rows: np.ndarray | None = None,
) -> PageRead | None:
    """Every row (``rows`` None), or ``rows`` (sorted, distinct, most of the file's): each
    page's values read straight into their place in one array, then ``rows`` taken from it.
    For every row that array is new (one allocation, aligned, no copy of a read); for
    ``rows``, this thread's scratch buffer where it fits (the values of the rows left out are
    read into memory already faulted in: fresh memory costs page faults, ~5x the read)."""
    plain = _plain_of(info, column, leaf, p)
    every = np.arange(len(p.starts))
    if plain is None or not _locate(handle, p, plain, every):
        return None
    if p.starts[0] != 0 or p.ends[-1] != info.num_rows or np.any(p.starts[1:] != p.ends[:-1]):
        return None  # the pages do not tile the file's rows
    width = plain.dtype.itemsize
    size = info.num_rows * width
    scratch = rows is not None and size <= _SCRATCH_MAX
    into = _scratch(size) if scratch else np.empty(size, dtype=np.uint8)
    for at, a, b in zip(plain.values.tolist(), (p.starts * width).tolist(),
                        (p.ends * width).tolist(), strict=True):  # fmt: skip
        _read_into(handle, at, into[a:b])
    values = pa.array(into.view(plain.dtype), plain.arrow_type)
    if rows is not None:  # a new array: the scratch buffer is reused by the next read
        values = values.take(pa.array(rows))
    table = pa.Table.from_arrays([values], names=[column])
    return PageRead(table, info.num_rows, size)


def _gather(
    handle: pa.NativeFile, info: _FileInfo, column: str, leaf: int, p: _Pages, rows: np.ndarray
) -> PageRead | None:
    plain = _plain_of(info, column, leaf, p)
    if plain is None:
        return None
    page = np.searchsorted(p.starts, rows, side="right") - 1  # the page holding each row
    first = np.empty(len(page), dtype=bool)  # rows sorted: a page's rows are one run
    first[0] = True
    np.not_equal(page[1:], page[:-1], out=first[1:])
    hit = page[first]
    if not _locate(handle, p, plain, hit):
        return None
    width = plain.dtype.itemsize
    starts = plain.values[hit]
    ends = starts + (p.ends[hit] - p.starts[hit]) * width
    gaps = starts[1:] - ends[:-1]
    mapped = _in_memory(handle)
    if np.all(gaps >= 0) and (mapped or np.all(gaps <= _GAP)):
        # the pages lie in order and close (one read), or in a mapping (a view of it: only
        # the pages of the values taken are touched)
        lo, hi = int(starts[0]), int(ends[-1])
        at = plain.values[page] + (rows - p.starts[page]) * width - lo
        values = _values_at(_scratch_read(handle, lo, hi), plain.dtype, at)
        bytes_read = int((ends - starts).sum()) if mapped else hi - lo
    else:
        values, bytes_read = _gather_streamed(handle, p, plain, rows, page, hit)
    table = pa.Table.from_arrays([pa.array(values, plain.arrow_type)], names=[column])
    return PageRead(table, info.num_rows, bytes_read)


def _values_at(blob: memoryview | np.ndarray, dtype: np.dtype, at: np.ndarray) -> np.ndarray:
    """The values of ``dtype`` starting at the bytes ``at`` of ``blob`` (any alignment), as
    a new array: ``blob`` viewed as one value starting at every byte, indexed by ``at``."""
    every_byte = np.ndarray((len(blob) - dtype.itemsize + 1,), dtype, blob, 0, (1,))
    return every_byte[at]


def _gather_streamed(
    handle: pa.NativeFile,
    p: _Pages,
    plain: _Plain,
    rows: np.ndarray,
    page: np.ndarray,
    hit: np.ndarray,
) -> tuple[np.ndarray, int]:
    """``rows`` from the values of the pages ``hit`` (adjacent ones fetched in one read; of a
    memory-mapped file, views of the mapping), copied out of them."""
    starts = plain.values[hit].tolist()
    lengths = ((p.ends[hit] - p.starts[hit]) * plain.dtype.itemsize).tolist()
    fetched, bytes_read = _fetch(handle, list(zip(starts, lengths, strict=True)))
    cuts = [*np.searchsorted(page, hit).tolist(), len(rows)]
    parts = [
        np.frombuffer(fetched[s], dtype=plain.dtype)[rows[a:b] - p.starts[i]]
        for s, i, a, b in zip(starts, hit.tolist(), cuts[:-1], cuts[1:], strict=True)
    ]
    return np.concatenate(parts), bytes_read


def _plain_of(info: _FileInfo, column: str, leaf: int, p: _Pages) -> _Plain | None:
    """The leaf's plain layout (cached): None when a chunk is not uncompressed fixed-width."""
    if leaf not in info.plain:
        kind = _leaf_kind(info, column, leaf, plain_type)
        info.plain[leaf] = None if kind is None else _Plain(
            *kind, np.full(len(p.starts), -1, dtype=np.int64)
        )  # fmt: skip
    return info.plain[leaf]


def _locate(handle: pa.NativeFile, p: _Pages, plain: _Plain, pages: np.ndarray) -> bool:
    """Find where the values of ``pages`` start (the first bytes of each page not seen yet);
    whether every one is a plain page without NULLs."""
    for i in pages[plain.values[pages] == -1].tolist():
        size = int(p.sizes[i])
        head = memoryview(handle.read_at(min(size, _HEAD), int(p.offsets[i])))
        rows = int(p.ends[i] - p.starts[i])
        pos = value_offset(head, size, plain.dtype, plain.max_def, rows)
        plain.values[i] = -2 if pos is None else int(p.offsets[i]) + pos
    return bool(np.all(plain.values[pages] >= 0))


# -- footer and offset indexes ----------------------------------------------------------------


def _file_info(handle: pa.NativeFile, uri: str) -> _FileInfo | None:
    cached = _CACHE.get(uri)
    if cached is not None:
        return cached
    size = handle.size()
    if size < 12:
        return None
    tail_len = min(size, _TAIL)
    tail = handle.read_at(tail_len, size - tail_len)
    if tail[-4:] != b"PAR1":  # "PARE": encrypted footer
        return None
    footer_len = int.from_bytes(tail[-8:-4], "little")
    if footer_len + 8 > size:
        return None
    if footer_len + 8 > tail_len:
        tail = handle.read_at(footer_len + 8, size - footer_len - 8)
    footer = tail[len(tail) - 8 - footer_len : len(tail) - 8]
    meta, _ = tc.decode_struct(footer)
    info = _parse_meta(meta)
    if info is not None:
        _CACHE.put(uri, info)
    return info


def _parse_meta(meta: Struct) -> _FileInfo | None:
    if meta.get(8) is not None:  # encryption_algorithm: encrypted columns
        return None
    schema: list[Struct] = meta.get(2).items
    groups: list[Struct] = meta.get(4, ThriftList(tc.STRUCT, [])).items
    tops: dict[str, tuple[list[Struct], list[int]]] = {}
    flat: set[int] = set()
    pos, leaf = 1, 0
    for _ in range(schema[0].get(5, 0)):
        start = pos
        pending = 1
        leaves: list[int] = []
        while pending:
            element = schema[pos]
            pending -= 1
            children = element.get(5)
            if children is None:
                leaves.append(leaf)
                leaf += 1
            else:
                pending += children
            pos += 1
        tops[schema[start].get(4).decode()] = (schema[start:pos], leaves)
        if all(e.get(3) != _REPEATED for e in schema[start:pos]):
            flat.update(leaves)
    for g in groups:
        for chunk in g.get(1).items:
            if chunk.get(1) is not None or chunk.get(8) is not None or chunk.get(3) is None:
                return None  # another file, or encrypted
    group_rows = np.array([g.get(3) for g in groups], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(group_rows)]).astype(np.int64)
    return _FileInfo(meta, int(meta.get(3)), group_rows, starts, tops, _arrow_schema(meta), flat)


def _arrow_schema(meta: Struct) -> pa.Schema | None:
    kv = meta.get(5)
    for item in [] if kv is None else kv.items:
        if item.get(1) == b"ARROW:schema" and item.get(2) is not None:
            raw = base64.b64decode(item.get(2))
            return pa.ipc.read_schema(pa.py_buffer(raw))
    return None


def _leaf_pages(handle: pa.NativeFile, info: _FileInfo, leaves: list[int]) -> list[_Pages] | None:
    """Each leaf's pages (their offset indexes read in one read and cached); None when a chunk
    has no offset index."""
    missing = [leaf for leaf in leaves if leaf not in info.pages]
    groups: list[Struct] = info.meta.get(4).items
    spans: list[tuple[int, int, int]] = []  # (offset, length, leaf)
    for leaf in missing:
        for g in groups:
            chunk = g.get(1).items[leaf]
            off, length = chunk.get(4), chunk.get(5)
            if off is None or length is None or length <= 0:
                return None
            spans.append((off, length, leaf))
    if spans:
        lo = min(s[0] for s in spans)
        hi = max(s[0] + s[1] for s in spans)
        blob = handle.read_at(hi - lo, lo)
        for leaf in missing:
            locs = [tc.decode_struct(blob, off - lo)[0] for off, _, lf in spans if lf == leaf]
            info.pages[leaf] = _pages_of(info, locs)
    return [info.pages[leaf] for leaf in leaves]


def _pages_of(info: _FileInfo, indexes: list[Struct]) -> _Pages:
    starts, ends, offsets, sizes, group = [], [], [], [], []
    for g, index in enumerate(indexes):
        locs = index.get(1).items
        if not locs or locs[0].get(3) != 0:
            raise CorruptInputError("an offset index does not start at the row group's row 0")
        first = [loc.get(3) for loc in locs]
        base = int(info.group_starts[g])
        starts += [base + f for f in first]
        ends += [base + f for f in first[1:]] + [base + int(info.group_rows[g])]
        offsets += [loc.get(1) for loc in locs]
        sizes += [loc.get(2) for loc in locs]
        group += [g] * len(locs)
    as64 = [np.array(x, dtype=np.int64) for x in (starts, ends, offsets, sizes, group)]
    if np.any(as64[1] <= as64[0]):
        raise CorruptInputError("an offset index holds an empty page")
    return _Pages(*as64)


# -- choosing pages ---------------------------------------------------------------------------


def _covering(p: _Pages, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of ``p``'s pages that overlap the row intervals ``[a, b)`` (sorted, distinct)."""
    first = np.searchsorted(p.starts, a, side="right") - 1
    last = np.searchsorted(p.starts, b - 1, side="right") - 1
    lengths = last - first + 1
    total = int(lengths.sum())
    shift = np.repeat(np.cumsum(lengths) - lengths, lengths)
    return np.unique(np.repeat(first, lengths) + np.arange(total) - shift)


def _merge(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of ``[a, b)`` (touching ones joined)."""
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    heads, nexts, reach = _runs(a, b, 0)
    return a[heads], reach[nexts - 1]


def _runs(
    starts: np.ndarray, ends: np.ndarray, gap: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ranges ``[starts, ends)`` (sorted by start) grouped into runs, a range joining the run
    before it when it starts at most ``gap`` past that run's reach: each run's first range,
    one past its last, and the reach (the running maximum of ``ends``)."""
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1] + gap
    heads = np.flatnonzero(new)
    return heads, np.append(heads[1:], len(starts)), reach


def _cover(rows: np.ndarray, pages: list[_Pages]) -> list[np.ndarray] | None:
    """Per leaf, the pages to read: the smallest sets holding ``rows`` that cover the same rows
    in every leaf."""
    a, b = rows.astype(np.int64), rows.astype(np.int64) + 1
    for _ in range(64):
        picked = [_covering(p, a, b) for p in pages]
        na, nb = _merge(
            np.concatenate([p.starts[i] for p, i in zip(pages, picked, strict=True)]),
            np.concatenate([p.ends[i] for p, i in zip(pages, picked, strict=True)]),
        )
        if np.array_equal(na, a) and np.array_equal(nb, b):
            return picked
        a, b = na, nb
    return None


def _worth_it(
    info: _FileInfo,
    leaves: list[int],
    pages: list[_Pages],
    picked: list[np.ndarray],
    max_fraction: float,
) -> bool:
    """Whether the pages are at most ``max_fraction`` of the bytes of their row groups."""
    groups: list[Struct] = info.meta.get(4).items
    hit = np.unique(pages[0].group[picked[0]])
    whole = part = 0
    for leaf, p, idx in zip(leaves, pages, picked, strict=True):
        part += int(p.sizes[idx].sum())
        for g in hit.tolist():
            chunk = groups[g].get(1).items[leaf]
            whole += chunk.get(3).get(7)
            found = _dictionary_range(chunk, int(p.offsets[np.searchsorted(p.group, g)]))
            part += 0 if found is None else found[1]
    return part <= max_fraction * whole


# -- the synthetic file -----------------------------------------------------------------------


def _fetch(
    handle: pa.NativeFile, ranges: list[tuple[int, int]]
) -> tuple[dict[int, memoryview], int]:
    """The bytes of each ``(offset, size)`` range by offset, ranges closer than ``_GAP`` read
    in one read (each range a view of its read, not a copy: a selective read of a wide column
    fetches tens of MB of pages; of a memory-mapped file, a view of the mapping); and the
    bytes read."""
    spans = np.array(sorted(set(ranges)), dtype=np.int64).reshape(-1, 2)
    offsets, ends = spans[:, 0], spans[:, 0] + spans[:, 1]
    heads, tails, reach = _runs(offsets, ends, _GAP)
    out: dict[int, memoryview] = {}
    total = 0
    for i, j in zip(heads.tolist(), tails.tolist(), strict=True):
        lo, hi = int(offsets[i]), int(reach[j - 1])
        blob = _span(handle, lo, hi)
        total += hi - lo
        for off, end in zip(offsets[i:j].tolist(), ends[i:j].tolist(), strict=True):
            out[off] = blob[off - lo : end - lo]
    return out, total


def _in_memory(handle: pa.NativeFile) -> bool:
    """Whether ``handle``'s reads are views of memory (a memory map, or a reader of one:
    ``omnitable.format.fs.mapped_file``), which a read of a long span does not copy."""
    return isinstance(handle, (pa.MemoryMappedFile, pa.BufferReader))


def _span(handle: pa.NativeFile, lo: int, hi: int) -> memoryview:
    """The bytes ``[lo, hi)`` of the file: read, or of a memory-mapped file a view of the
    mapping (read_at would copy them). Raises CorruptInputError when the file ends before."""
    if _in_memory(handle):
        handle.seek(lo)
        blob = memoryview(handle.read_buffer(hi - lo)).cast("B")
    else:
        blob = memoryview(handle.read_at(hi - lo, lo))
    if len(blob) != hi - lo:
        raise CorruptInputError(f"short read at byte {lo}")
    return blob


def _read_into(handle: pa.NativeFile, offset: int, into: np.ndarray) -> None:
    """Fill ``into`` (bytes) with the file's bytes from ``offset``. Raises CorruptInputError
    when the file ends before."""
    if _in_memory(handle):
        into[:] = np.frombuffer(_span(handle, offset, offset + len(into)), dtype=np.uint8)
        return
    handle.seek(offset)
    if handle.readinto(into) != len(into):
        raise CorruptInputError(f"short read at byte {offset}")


def _scratch_read(handle: pa.NativeFile, lo: int, hi: int) -> memoryview | np.ndarray:
    """The bytes ``[lo, hi)`` of the file, valid until this thread's next call: read into
    this thread's scratch buffer (reused, so no page faults of fresh memory, which cost ~5x
    the read of a few hundred KB) when at most ``_SCRATCH_MAX`` bytes; else as
    :func:`_span`."""
    n = hi - lo
    if n > _SCRATCH_MAX or _in_memory(handle):
        return _span(handle, lo, hi)
    buf = _scratch(n)
    _read_into(handle, lo, buf)
    return buf


def _scratch(n: int) -> np.ndarray:
    """``n`` bytes of this thread's scratch buffer (grown to fit; valid until the thread's
    next use of it)."""
    buf: np.ndarray | None = getattr(_SCRATCH, "buf", None)
    if buf is None or len(buf) < n:
        buf = _SCRATCH.buf = np.empty(max(n, 1 << 20), dtype=np.uint8)
    return buf[:n]


def _dictionary_range(chunk: Struct, first_page: int) -> tuple[int, int] | None:
    """The bytes before a chunk's first data page (its dictionary page), if any."""
    md = chunk.get(3)
    start = md.get(11) or md.get(9)
    if start is None or start >= first_page:
        return None
    return int(start), first_page - int(start)


def _page_values(page: bytes | memoryview, expect: int) -> tuple[int, int]:
    """A page's value count and uncompressed size (header included); ``expect``: its type."""
    header, end = tc.decode_struct(page)
    kind = header.get(1)
    if kind == _DICTIONARY_PAGE and expect == _DICTIONARY_PAGE:
        values = 0
    elif kind == _DATA_PAGE and expect != _DICTIONARY_PAGE:
        values = header.get(5).get(1)
    elif kind == _DATA_PAGE_V2 and expect != _DICTIONARY_PAGE:
        values = header.get(8).get(1)
    else:
        raise CorruptInputError(f"unexpected page type {kind}")
    return int(values), end + int(header.get(2))


def _chunk(
    out: bytearray,
    source: Struct,
    dictionary: memoryview | None,
    pages: list[memoryview],
    rows: int | None,
) -> tuple[Struct, int]:
    """Append a column chunk (``dictionary`` page, then ``pages``) to ``out``; its
    ColumnChunk and uncompressed size. ``rows``: the pages' rows for a flat leaf (its values,
    nulls included; no page header is decoded, and the uncompressed size stands at the
    compressed one, which readers do not use to read), None to count values from the headers."""
    start = len(out)
    uncompressed = 0
    if dictionary is not None:
        uncompressed += (
            len(dictionary) if rows is not None else _page_values(dictionary, _DICTIONARY_PAGE)[1]
        )
        out += dictionary
    data_start = len(out)
    values = 0 if rows is None else rows
    for page in pages:
        if rows is None:
            n, size = _page_values(page, _DATA_PAGE)
            values += n
        else:
            size = len(page)
        uncompressed += size
        out += page
    md = Struct([list(f) for f in source.get(3).fields])
    md.drop(*_CHUNK_ONLY, 11)
    md.set(5, tc.I64, values)
    md.set(6, tc.I64, uncompressed)
    md.set(7, tc.I64, len(out) - start)
    md.set(9, tc.I64, data_start)
    if dictionary is not None:
        md.set(11, tc.I64, start)
    return Struct([[2, tc.I64, start], [3, tc.STRUCT, md]]), uncompressed


def _ranges(
    info: _FileInfo, leaves: list[int], pages: list[_Pages], picked: list[np.ndarray]
) -> tuple[list[tuple[int, int]], dict[tuple[int, int], tuple[int, int]]]:
    """Every byte range to fetch, and each (leaf position, row group)'s dictionary range."""
    groups: list[Struct] = info.meta.get(4).items
    ranges: list[tuple[int, int]] = []
    dictionaries: dict[tuple[int, int], tuple[int, int]] = {}
    for li, (leaf, p, idx) in enumerate(zip(leaves, pages, picked, strict=True)):
        ranges += zip(p.offsets[idx].tolist(), p.sizes[idx].tolist(), strict=True)
        for g in np.unique(p.group[idx]).tolist():
            first = int(p.offsets[np.searchsorted(p.group, g)])
            found = _dictionary_range(groups[g].get(1).items[leaf], first)
            if found is not None:
                dictionaries[li, g] = found
                ranges.append(found)
    return ranges, dictionaries


def _assemble(
    handle: pa.NativeFile,
    info: _FileInfo,
    columns: list[str],
    leaves: list[int],
    pages: list[_Pages],
    picked: list[np.ndarray],
    rows: np.ndarray,
) -> PageRead | None:
    """Fetch the picked pages, build one small Parquet file per row group they lie in and
    decode it, taking ``rows``. Each file is handed to the decoding threads as soon as it is
    built (when there is enough to decode), so building the next overlaps decoding this one."""
    ranges, dictionaries = _ranges(info, leaves, pages, picked)
    fetched, bytes_read = _fetch(handle, ranges)
    hit = np.unique(pages[0].group[picked[0]])
    a, b = _merge(pages[0].starts[picked[0]], pages[0].ends[picked[0]])
    k = np.searchsorted(a, rows, side="right") - 1
    positions = (np.cumsum(b - a) - (b - a))[k] + rows - a[k]  # in the synthetic row groups
    page_rows = pages[0].ends[picked[0]] - pages[0].starts[picked[0]]
    counts = np.array([int(page_rows[pages[0].group[picked[0]] == g].sum()) for g in hit.tolist()])
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cuts = np.searchsorted(positions, starts)
    parallel = len(hit) > 1 and sum(r[1] for r in ranges) >= _PARALLEL_BYTES
    futures: list[Future[pa.Table]] = []
    tables: list[pa.Table] = []
    for i, g in enumerate(hit.tolist()):
        built = _group_file(info, columns, leaves, pages, picked, dictionaries, fetched, g)
        if built is None or built[1] != counts[i]:
            return None  # the leaves' pages cover other rows: not a file for page reads
        local = positions[cuts[i] : cuts[i + 1]] - starts[i]
        if parallel:
            futures.append(_decode_pool().submit(_decode, built[0], int(counts[i]), local))
        else:
            tables.append(_decode(built[0], int(counts[i]), local))
    tables += [f.result() for f in futures]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    return PageRead(_with_types(table, columns, info.arrow_schema), info.num_rows, bytes_read)


def _group_file(
    info: _FileInfo,
    columns: list[str],
    leaves: list[int],
    pages: list[_Pages],
    picked: list[np.ndarray],
    dictionaries: dict[tuple[int, int], tuple[int, int]],
    fetched: dict[int, memoryview],
    g: int,
) -> tuple[pa.Buffer, int] | None:
    """The Parquet file of row group ``g``'s picked pages of ``leaves`` (with their dictionary
    pages) and its rows; None when the leaves' pages hold different row counts."""
    groups: list[Struct] = info.meta.get(4).items
    out = bytearray(b"PAR1")
    chunks, uncompressed, counts = [], 0, set()
    for li, (leaf, p, idx) in enumerate(zip(leaves, pages, picked, strict=True)):
        sel = idx[p.group[idx] == g]
        rows_here = int((p.ends[sel] - p.starts[sel]).sum())
        counts.add(rows_here)
        dict_range = dictionaries.get((li, g))
        chunk, size = _chunk(
            out,
            groups[g].get(1).items[leaf],
            None if dict_range is None else fetched[dict_range[0]],
            [fetched[o] for o in p.offsets[sel].tolist()],
            rows_here if leaf in info.flat else None,
        )
        chunks.append(chunk)
        uncompressed += size
    if len(counts) != 1:
        return None
    rows = counts.pop()
    first = chunks[0].get(2)
    group = Struct(
        [
            [1, tc.LIST, ThriftList(tc.STRUCT, chunks)],
            [2, tc.I64, uncompressed],
            [3, tc.I64, rows],
            [5, tc.I64, first],
            [6, tc.I64, len(out) - first],
        ]
    )
    out += _footer(info, columns, leaves, [group])
    return pa.py_buffer(out), rows


def _decode(buffer: pa.Buffer, rows: int, positions: np.ndarray) -> pa.Table:
    """The rows at ``positions`` (sorted) of a synthetic file of one row group of ``rows``."""
    reader = pq.ParquetFile(pa.BufferReader(buffer))
    if reader.metadata.num_rows != rows:
        raise CorruptInputError("the synthetic file lost rows")
    return reader.read(use_threads=False).take(pa.array(positions))


def _decode_pool() -> ThreadPoolExecutor:
    """Threads decoding synthetic files' row groups (their own pool: callers may run on
    another pool's threads and wait on this one)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(
                max_workers=os.cpu_count() or 2, thread_name_prefix="omnitable-pages"
            )
        return _POOL


def _footer(
    info: _FileInfo, columns: list[str], leaves: list[int], row_groups: list[Struct]
) -> bytes:
    """The synthetic file's footer: the selected columns' schema, no key-value metadata."""
    meta = info.meta
    root = Struct([list(f) for f in meta.get(2).items[0].fields])
    root.set(5, tc.I32, len(columns))
    schema = [root, *(e for c in columns for e in info.tops[c][0])]
    fields: list[list[object]] = [
        [1, tc.I32, meta.get(1)],
        [2, tc.LIST, ThriftList(tc.STRUCT, schema)],
        [3, tc.I64, sum(g.get(3) for g in row_groups)],
        [4, tc.LIST, ThriftList(tc.STRUCT, row_groups)],
    ]
    if meta.get(6) is not None:
        fields.append([6, tc.BINARY, meta.get(6)])  # created_by: readers key workarounds on it
    orders = meta.get(7)
    if orders is not None:
        fields.append([7, tc.LIST, ThriftList(orders.elem_type, [orders.items[x] for x in leaves])])
    footer = tc.encode_struct(Struct(fields))
    return footer + len(footer).to_bytes(4, "little") + b"PAR1"


def _with_types(table: pa.Table, columns: list[str], schema: pa.Schema | None) -> pa.Table:
    """``table``'s columns in ``columns`` order, cast to the source file's Arrow types (what
    pyarrow would have read from the file itself)."""
    arrays = []
    for name in columns:
        arr = table.column(name)
        if schema is not None and schema.get_field_index(name) >= 0:
            target = schema.field(name).type
            if not arr.type.equals(target):
                arr = arr.cast(target)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=columns)
