"""Values of plain, uncompressed, fixed-width Parquet data pages, read in place.

A numeric column whose values do not compress (random floats, embeddings' scalars, hashes) is
written without compression (the writer measures it, docs/format.md), and its PLAIN data pages
then hold the values as a little-endian array right after the page header and definition
levels. When a page also has no NULL, value ``k`` of the page is row ``k`` of the page: a
selective read takes the wanted rows straight from the page's bytes (of a memory-mapped file:
from the OS's cache) without decoding the page at all, which is what lets a 1 % read of a few
columns cost a fraction of reading them.

Every check that the page is one of these is made on the page itself (header, encoding, codec,
sizes, definition levels); anything else returns None and the caller decodes the page as usual.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from omnitable.exceptions import CorruptInputError
from omnitable.format import thrift_compact as tc
from omnitable.format.thrift_compact import Struct

# Parquet physical type -> (little-endian dtype, the Arrow type of an unannotated column)
_FIXED: dict[int, tuple[np.dtype, pa.DataType]] = {
    1: (np.dtype("<i4"), pa.int32()),
    2: (np.dtype("<i8"), pa.int64()),
    4: (np.dtype("<f4"), pa.float32()),
    5: (np.dtype("<f8"), pa.float64()),
}
_REQUIRED, _OPTIONAL = 0, 1  # FieldRepetitionType
_UNCOMPRESSED = 0  # CompressionCodec
_PLAIN, _RLE = 0, 3  # Encoding
_DATA_PAGE, _DATA_PAGE_V2 = 0, 3  # PageType


def plain_type(
    elements: list[Struct], chunk_meta: Struct, arrow_type: pa.DataType | None
) -> tuple[np.dtype, pa.DataType, int] | None:
    """For a top-level column of one leaf (its schema ``elements``: the leaf alone) stored
    uncompressed in a column chunk (``chunk_meta``: its ColumnMetaData): the values' dtype,
    Arrow type and maximum definition level (0 or 1); None for any other column."""
    if len(elements) != 1:
        return None
    leaf = elements[0]
    fixed = _FIXED.get(leaf.get(1))
    repetition = leaf.get(3, _REQUIRED)
    annotated = leaf.get(6) is not None or leaf.get(10) is not None  # converted / logical type
    if fixed is None or annotated or repetition not in (_REQUIRED, _OPTIONAL):
        return None
    if chunk_meta.get(4) != _UNCOMPRESSED or chunk_meta.get(1) != leaf.get(1):
        return None
    if arrow_type is not None and not arrow_type.equals(fixed[1]):
        return None
    return fixed[0], fixed[1], int(repetition == _OPTIONAL)


def value_offset(
    head: memoryview, page_size: int, dtype: np.dtype, max_def: int, rows: int
) -> int | None:
    """Where the values start in a data page of ``page_size`` bytes (header included) holding
    ``rows`` rows of a flat leaf, given its first bytes ``head`` (the header and the
    definition levels at least), when the page is PLAIN, uncompressed and holds no NULL (so
    value ``k`` is row ``k``); None otherwise (also when ``head`` is too short to tell)."""
    pos = values_start(head, page_size, (_PLAIN,), max_def, rows)
    return pos if pos is not None and page_size - pos == rows * dtype.itemsize else None


def values_start(
    head: memoryview, page_size: int, encodings: tuple[int, ...], max_def: int, rows: int
) -> int | None:
    """Where the encoded values start in a data page (v1 or v2) of ``page_size`` bytes (header
    included) holding ``rows`` rows of a flat leaf of maximum definition level ``max_def``,
    given its first bytes ``head`` (the header and the definition levels at least), when the
    page is uncompressed as a whole (header sizes equal), its values are in one of
    ``encodings`` and it holds no NULL (definition levels all ones); None otherwise (also when
    ``head`` is too short to tell)."""
    if head.format != "B":
        head = head.cast("B")
    try:
        header, pos = tc.decode_struct(head)
    except CorruptInputError:
        return None  # cut short (or not a page): decode the page as usual
    size = header.get(3)
    if size is None or header.get(2) != size or pos + size != page_size:
        return None
    kind = header.get(1)
    if kind == _DATA_PAGE:
        body = header.get(5)
        if body.get(2) not in encodings or body.get(1) != rows:
            return None
        if max_def:
            if body.get(3) != _RLE or pos + 4 > len(head):
                return None
            levels = int.from_bytes(head[pos : pos + 4], "little")
            if pos + 4 + levels > len(head) or not all_ones(head[pos + 4 : pos + 4 + levels], rows):
                return None
            pos += 4 + levels
    elif kind == _DATA_PAGE_V2:
        body = header.get(8)
        if body.get(4) not in encodings or body.get(1) != rows or body.get(3) != rows:
            return None
        if body.get(2) != 0 or body.get(6, 0) != 0:  # NULLs, or repetition levels
            return None
        pos += body.get(5, 0)
    else:
        return None
    return pos


def all_ones(levels: memoryview, count: int) -> bool:
    """Whether RLE/bit-packed hybrid definition levels of bit width 1 are ``count`` ones (a
    page without NULLs), in RLE runs of ones or bit-packed groups of set bits."""
    pos = seen = 0
    while seen < count:
        found = run_header(levels, pos)
        if found is None:
            return False
        head, pos = found
        if head & 1:  # bit-packed: head >> 1 groups of 8 values, one byte each at width 1
            values = min((head >> 1) * 8, count - seen)
            end = pos + (head >> 1)
            if end > len(levels) or any(b != 0xFF for b in levels[pos : pos + values // 8]):
                return False
            tail = values % 8
            if tail and levels[pos + values // 8] & ((1 << tail) - 1) != (1 << tail) - 1:
                return False
        else:  # an RLE run: head >> 1 copies of the one-byte value
            values, end = head >> 1, pos + 1
            if end > len(levels) or levels[pos] != 1 or values > count - seen:
                return False
        pos, seen = end, seen + values
    return pos == len(levels)


def run_header(levels: bytes | memoryview, pos: int) -> tuple[int, int] | None:
    """The header of the RLE/bit-packed hybrid run at ``pos`` of ``levels`` (a ULEB128 varint
    of at most 5 bytes) and the position after it; None when it is cut or longer."""
    head = shift = 0
    while pos < len(levels) and shift <= 28:
        byte = levels[pos]
        pos += 1
        head |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return head, pos
    return None
