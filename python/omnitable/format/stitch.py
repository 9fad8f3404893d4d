"""One Parquet file from parts written in parallel (docs/format.md: a large file is written in
parts).

pyarrow's writer encodes and compresses all pages of a file on one thread, so the largest file
of a fragment (a text column's) bounds an append. The writer may instead write a file's rows as
several parts, each a complete Parquet file of whole row groups written with the same settings
on its own thread (the first straight to the destination through a :class:`LeadingPart`, the
others in memory), and :func:`stitch` joins them into one ordinary file: the parts' column
chunks one after the other, their column indexes as they are, their offset indexes with every
page offset moved to the page's new position, and one footer (the first part's, with every
part's row groups, offsets moved and ordinals renumbered). Readers cannot tell it from a file
one writer wrote: the same row groups, pages, statistics and page index.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from omnitable.format import thrift_compact as tc
from omnitable.format.thrift_compact import Struct, ThriftList

MAGIC = b"PAR1"

# field ids of the Parquet Thrift structs used here (parquet.thrift)
_FILE_SCHEMA, _FILE_ROWS, _FILE_GROUPS, _FILE_ENCRYPTION = 2, 3, 4, 8
_GROUP_COLUMNS, _GROUP_FILE_OFFSET, _GROUP_ORDINAL = 1, 5, 7
_CHUNK_FILE_PATH, _CHUNK_FILE_OFFSET, _CHUNK_META = 1, 2, 3
_CHUNK_OFFSET_INDEX, _CHUNK_OFFSET_INDEX_LEN = 4, 5
_CHUNK_COLUMN_INDEX, _CHUNK_COLUMN_INDEX_LEN, _CHUNK_CRYPTO = 6, 7, 8
_META_COMPRESSED, _META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE = 7, 9, 10, 11
_META_BLOOM_FILTER = 14
_PAGE_OFFSET = 1
_BUFFER = 4 * 1024 * 1024


class LeadingPart(io.RawIOBase):
    """The sink of a file's first part: what its writer writes until :meth:`end_of_data` (the
    column chunks) goes straight to the file, the rest (page indexes and footer, written when
    the writer closes) is kept for :func:`stitch`, so the first part needs no copy."""

    def __init__(self, sink: Any) -> None:
        super().__init__()
        self.sink = sink
        self.tail = bytearray()
        self.data_end: int | None = None
        self._pos = 0
        # what the part's writer writes to: pages reach this object in 4 MiB writes, not
        # one Python call (and GIL hand-over) per page header and page
        self.stream = pa.BufferedOutputStream(pa.PythonFile(self, mode="w"), _BUFFER)

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        n = memoryview(b).nbytes
        if self.data_end is None:
            self.sink.write(b)
        else:
            self.tail += b
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def end_of_data(self) -> None:
        """The writer wrote its last row group: what follows is its page index and footer."""
        self.stream.flush()
        self.data_end = self._pos

    def finish(self) -> memoryview:
        """The page indexes and footer, once the part's writer has closed."""
        if not self.stream.closed:
            self.stream.flush()
        return memoryview(self.tail)


class _Part:
    """One part: its bytes from file offset ``start`` on (a leading part's column chunks were
    written before), decoded footer and where its column chunks end."""

    def __init__(self, data: memoryview, start: int = 0) -> None:
        self.data, self.start = data, start
        size = len(data)
        if (
            size < 8 + (12 if start == 0 else 0)
            or data[-4:] != MAGIC
            or (start == 0 and data[:4] != MAGIC)
        ):
            raise ValueError("a part is not an unencrypted Parquet file")
        footer_len = int.from_bytes(data[-8:-4], "little")
        self.meta, _ = tc.decode_struct(data, size - 8 - footer_len)
        if self.meta.get(_FILE_ENCRYPTION) is not None:
            raise ValueError("encrypted parts cannot be stitched")
        self.groups: list[Struct] = self.meta.get(_FILE_GROUPS, ThriftList(tc.STRUCT, [])).items
        self.data_end = self._data_end(start + size - 8 - footer_len)
        if start and self.data_end != start:
            raise ValueError("the leading part's writer wrote column data after its last row group")

    def at(self, offset: int, length: int) -> memoryview:
        """``length`` bytes at file offset ``offset`` of this part."""
        if offset < self.start:
            raise ValueError("a part's page index lies in its column data")
        return self.data[offset - self.start : offset - self.start + length]

    def chunks(self) -> list[Struct]:
        return [c for g in self.groups for c in g.get(_GROUP_COLUMNS).items]

    def _data_end(self, footer_start: int) -> int:
        """Where the column chunks end (the page indexes, then the footer, follow)."""
        end, indexes = 4, []
        for chunk in self.chunks():
            meta = chunk.get(_CHUNK_META)
            if (
                meta is None
                or chunk.get(_CHUNK_FILE_PATH) is not None
                or chunk.get(_CHUNK_CRYPTO) is not None
                or meta.get(_META_BLOOM_FILTER) is not None
            ):
                raise ValueError(
                    "a part's column chunk is external, encrypted or has a bloom filter"
                )
            start = meta.get(_META_DICTIONARY_PAGE) or meta.get(_META_DATA_PAGE)
            end = max(end, start + meta.get(_META_COMPRESSED))
            indexes += [chunk.get(_CHUNK_COLUMN_INDEX), chunk.get(_CHUNK_OFFSET_INDEX)]
        limit = min([i for i in indexes if i is not None], default=footer_start)
        if end > limit:
            raise ValueError("a part's column chunks overlap its page index")
        return end


def stitch(parts: Sequence[pa.Buffer], sink: Any, lead: LeadingPart | None = None) -> int:
    """Write the Parquet file holding the rows of ``parts`` in order to ``sink`` (a writable
    stream at position 0; or, after ``lead``, the first part, whose writer wrote its column
    chunks to ``sink`` through it and then closed); returns the file's size.

    Every part must be an unencrypted Parquet file of the same schema written by the same
    writer settings, without bloom filters or external column chunks.

    Raises:
        ValueError: a part breaks those rules (the file is not usable).
    """
    decoded = [_Part(memoryview(p).cast("B")) for p in parts]  # pa.Buffer views: signed bytes
    if lead is not None:
        if lead.data_end is None:
            raise ValueError("the leading part's writer did not mark the end of its data")
        decoded.insert(0, _Part(lead.finish(), lead.data_end))
    schema = tc.encode_struct(Struct([[1, tc.LIST, decoded[0].meta.get(_FILE_SCHEMA)]]))
    for part in decoded[1:]:
        if tc.encode_struct(Struct([[1, tc.LIST, part.meta.get(_FILE_SCHEMA)]])) != schema:
            raise ValueError("parts with different schemas cannot be stitched")
    if lead is None:
        sink.write(MAGIC)
    pos = len(MAGIC) if lead is None else decoded[0].data_end
    shifts = [] if lead is None else [0]
    for part in decoded[len(shifts) :]:
        shifts.append(pos - len(MAGIC))
        _write_in_pieces(sink, part.at(len(MAGIC), part.data_end - len(MAGIC)))
        pos += part.data_end - len(MAGIC)
    pos = _write_indexes(decoded, shifts, sink, pos)
    groups: list[Struct] = []
    for part, shift in zip(decoded, shifts, strict=True):
        for group in part.groups:
            _shift_group(group, shift, len(groups))
            groups.append(group)
    meta = decoded[0].meta
    meta.set(_FILE_ROWS, tc.I64, sum(int(g.get(3)) for g in groups))
    meta.set(_FILE_GROUPS, tc.LIST, ThriftList(tc.STRUCT, groups))
    footer = tc.encode_struct(meta)
    sink.write(footer + len(footer).to_bytes(4, "little") + MAGIC)
    return pos + len(footer) + 8


def _write_in_pieces(sink: Any, data: memoryview) -> None:
    """``data`` written ``_BUFFER`` bytes at a time. One write of a part's tens of MB into a new
    file's page cache was measured 50x slower than the same bytes in 4 MiB writes on this
    project's (virtual) machines: 0.7-0.9 s against 0.017 s for 66 MB (docs/format.md)."""
    for start in range(0, len(data), _BUFFER):
        sink.write(data[start : start + _BUFFER])


def _write_indexes(parts: list[_Part], shifts: list[int], sink: Any, pos: int) -> int:
    """Every chunk's column index (as is), then its offset index (page offsets moved by its
    part's shift), pointing the chunks at their new places; returns the position after."""
    for part in parts:
        for chunk in part.chunks():
            offset, length = chunk.get(_CHUNK_COLUMN_INDEX), chunk.get(_CHUNK_COLUMN_INDEX_LEN)
            if offset is not None and length:
                sink.write(part.at(offset, length))
                chunk.set(_CHUNK_COLUMN_INDEX, tc.I64, pos)
                pos += length
    for part, shift in zip(parts, shifts, strict=True):
        for chunk in part.chunks():
            offset = chunk.get(_CHUNK_OFFSET_INDEX)
            if offset is None or not chunk.get(_CHUNK_OFFSET_INDEX_LEN):
                continue
            length = chunk.get(_CHUNK_OFFSET_INDEX_LEN)
            blob = shift_offset_index(part.at(offset, length), shift)
            sink.write(blob)
            chunk.set(_CHUNK_OFFSET_INDEX, tc.I64, pos)
            chunk.set(_CHUNK_OFFSET_INDEX_LEN, tc.I32, len(blob))
            pos += len(blob)
    return pos


def _shift_group(group: Struct, shift: int, ordinal: int) -> None:
    """Move a row group's data offsets by ``shift`` and give it its place in the file."""
    if group.get(_GROUP_FILE_OFFSET):
        group.set(_GROUP_FILE_OFFSET, tc.I64, group.get(_GROUP_FILE_OFFSET) + shift)
    if group.get(_GROUP_ORDINAL) is not None:
        group.set(_GROUP_ORDINAL, tc.I16, ordinal)
    for chunk in group.get(_GROUP_COLUMNS).items:
        if chunk.get(_CHUNK_FILE_OFFSET):  # 0 (unset by some writers) is never a chunk's place
            chunk.set(_CHUNK_FILE_OFFSET, tc.I64, chunk.get(_CHUNK_FILE_OFFSET) + shift)
        meta = chunk.get(_CHUNK_META)
        for fid in (_META_DATA_PAGE, _META_INDEX_PAGE, _META_DICTIONARY_PAGE):
            if meta.get(fid) is not None:
                meta.set(fid, tc.I64, meta.get(fid) + shift)


def shift_offset_index(blob: memoryview | bytes, shift: int) -> bytes:
    """The Thrift ``OffsetIndex`` ``blob`` with every page offset moved by ``shift``: a
    vectorized rewrite of the page locations as writers lay them out (offset, size, first
    row), the generic codec for any other layout."""
    fast = _shift_page_locations(np.frombuffer(blob, dtype=np.uint8), shift)
    if fast is not None:
        return fast
    index, _ = tc.decode_struct(blob)
    for page in index.get(1).items:
        page.set(_PAGE_OFFSET, tc.I64, page.get(_PAGE_OFFSET) + shift)
    return tc.encode_struct(index)


_I64_FIELD_1, _I32_FIELD_2, _I64_FIELD_3, _STOP = 0x16, 0x15, 0x16, 0x00
_MAX_VARINT = 10


def _shift_page_locations(raw: np.ndarray, shift: int) -> bytes | None:
    """The fast path of :func:`shift_offset_index`: None unless ``raw`` starts with field 1,
    a list of structs each exactly ``{1: i64, 2: i32, 3: i64}``.

    Every byte below 0x80 ends a token (a field header, a varint, a stop), so each page
    location is 7 tokens; the offset is token 1, a zigzag varint (2x for x >= 0), re-encoded
    after adding ``2 * shift``; every other byte is copied."""
    if len(raw) < 2 or raw[0] != 0x19 or raw[1] & 0x0F != tc.STRUCT:
        return None
    count, start = int(raw[1]) >> 4, 2
    if count == 15:  # long form: the element count as a varint
        count, shift_bits = 0, 0
        while start < len(raw) and shift_bits < 35:
            count |= (int(raw[start]) & 0x7F) << shift_bits
            start += 1
            if raw[start - 1] < 0x80:
                break
            shift_bits += 7
    body = raw[start:]
    tokens = np.flatnonzero(body < 0x80)
    if count == 0 or len(tokens) < 7 * count:
        return None
    ends = tokens[: 7 * count].reshape(count, 7)
    starts = np.empty_like(ends)
    starts[:, 1:] = ends[:, :-1] + 1
    starts[0, 0] = 0
    starts[1:, 0] = ends[:-1, 6] + 1
    headers = ends[:, [0, 2, 4, 6]]
    expected = np.array([_I64_FIELD_1, _I32_FIELD_2, _I64_FIELD_3, _STOP], dtype=np.uint8)
    if not (np.all(starts[:, [0, 2, 4, 6]] == headers) and np.all(body[headers] == expected)):
        return None
    lengths = ends[:, 1] - starts[:, 1] + 1
    if lengths.max() > _MAX_VARINT - 1:
        return None
    zigzag = np.zeros(count, dtype=np.uint64)
    for k in range(int(lengths.max())):
        byte = body[np.minimum(starts[:, 1] + k, len(body) - 1)].astype(np.uint64) & 0x7F
        zigzag |= np.where(k < lengths, byte << np.uint64(7 * k), np.uint64(0))
    if np.any(zigzag & 1) or np.any(zigzag >> np.uint64(1) < -min(shift, 0)):
        return None  # a negative offset, or one the shift would make negative
    moved = (zigzag.astype(np.int64) + 2 * shift).astype(np.uint64)
    return _relay(body, ends, moved, raw[:start], body[ends[-1, 6] + 1 :])


def _relay(
    body: np.ndarray, ends: np.ndarray, moved: np.ndarray, prefix: np.ndarray, suffix: np.ndarray
) -> bytes:
    """The page locations of ``body`` (token ``ends``) with their offsets' varints replaced
    by ``moved`` (zigzag values), between ``prefix`` and ``suffix``."""
    count = len(moved)
    sizes = np.ones(count, dtype=np.int64)
    for k in range(1, _MAX_VARINT):
        sizes += moved >= np.uint64(1) << np.uint64(7 * k)
    rest_from = ends[:, 1] + 1
    rest_len = ends[:, 6] - ends[:, 1]
    page_len = 1 + sizes + rest_len
    at = np.concatenate([[0], np.cumsum(page_len)[:-1]])
    out = np.empty(int(page_len.sum()), dtype=np.uint8)
    out[at] = _I64_FIELD_1
    for k in range(int(sizes.max())):
        has = k < sizes
        byte = (moved >> np.uint64(7 * k)) & np.uint64(0x7F)
        byte = byte | np.where(k < sizes - 1, np.uint64(0x80), np.uint64(0))
        out[(at + 1 + k)[has]] = byte[has].astype(np.uint8)
    within = np.arange(int(rest_len.sum())) - np.repeat(np.cumsum(rest_len) - rest_len, rest_len)
    out[np.repeat(at + 1 + sizes, rest_len) + within] = body[
        np.repeat(rest_from, rest_len) + within
    ]
    return prefix.tobytes() + out.tobytes() + suffix.tobytes()
