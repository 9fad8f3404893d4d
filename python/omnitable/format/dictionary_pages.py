"""Values of dictionary-encoded, uncompressed, fixed-width Parquet data pages, read in place.

A numeric column of few distinct values (labels, small counts) is dictionary-encoded, and where
zstd does not shrink its bit-packed indices the writer stores it uncompressed (docs/format.md).
Each row group then holds one dictionary page (the distinct values, PLAIN) and data pages of
indices into it: after the page header and the definition levels, the indices' bit width and
RLE/bit-packed hybrid runs. A bit-packed run holds index ``k`` at bit ``k * width`` of its
bytes, an RLE run repeats one index (pyarrow writes runs of up to 504 values, and an RLE run
where 8 or more equal values follow each other, or for a page's last lone value). A page is
parsed once into its runs; then a selective read takes the wanted rows' indices straight from
the pages' bytes and looks them up in the dictionary, without decoding a page (what keyed
tables' 512-row pages make point lookups do).

Every check that a page is one of these is made on the page itself (header, encoding, sizes,
definition levels, runs that hold exactly the page's values); a page with NULLs, another
encoding, or any other column returns None and the caller decodes the pages as usual.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from omnitable.exceptions import CorruptInputError
from omnitable.format import thrift_compact as tc
from omnitable.format.plain_pages import run_header, values_start
from omnitable.format.thrift_compact import Struct

# Parquet physical type -> the little-endian dtype of its PLAIN values
_FIXED: dict[int, np.dtype] = {
    1: np.dtype("<i4"),
    2: np.dtype("<i8"),
    4: np.dtype("<f4"),
    5: np.dtype("<f8"),
}
_REQUIRED, _OPTIONAL = 0, 1  # FieldRepetitionType
_UNCOMPRESSED = 0  # CompressionCodec
_PLAIN, _PLAIN_DICTIONARY, _RLE_DICTIONARY = 0, 2, 8  # Encoding
_DICTIONARY_PAGE = 2  # PageType
_MAX_WIDTH = 32  # bits of a dictionary index at most (the format's limit)
# values of a page parsed into runs at most: parsing walks the runs in Python (~2 us a run),
# which for a large page of many short RLE runs costs more than pyarrow's decode of it; keyed
# tables' pages hold 512 values, and other tables' large pages are decoded as before
MAX_PAGE_VALUES = 4_096


def dictionary_type(
    elements: list[Struct], chunk_meta: Struct, arrow_type: pa.DataType | None
) -> tuple[np.dtype, pa.DataType, int] | None:
    """For a top-level column of one leaf (its schema ``elements``: the leaf alone) whose
    column chunk (``chunk_meta``: its ColumnMetaData) is uncompressed, fixed-width and has a
    dictionary page: the dictionary values' dtype, the Arrow type read (``arrow_type``, the
    file's stored type, or the physical type's) and the maximum definition level (0 or 1);
    None for any other column, and for Arrow types other than integers and floats."""
    if len(elements) != 1:
        return None
    leaf = elements[0]
    dtype = _FIXED.get(leaf.get(1))
    repetition = leaf.get(3, _REQUIRED)
    if dtype is None or repetition not in (_REQUIRED, _OPTIONAL):
        return None
    if chunk_meta.get(4) != _UNCOMPRESSED or chunk_meta.get(1) != leaf.get(1):
        return None
    if chunk_meta.get(11) is None:  # dictionary_page_offset: no dictionary
        return None
    if arrow_type is None:
        if leaf.get(6) is not None or leaf.get(10) is not None:
            return None  # annotated, and no stored Arrow type to say how
        arrow_type = pa.from_numpy_dtype(dtype.newbyteorder("="))
    if not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
        return None
    if pa.types.is_floating(arrow_type) != (dtype.kind == "f"):
        return None
    if arrow_type.bit_width > dtype.itemsize * 8:
        return None
    return dtype, arrow_type, int(repetition == _OPTIONAL)


@dataclass(frozen=True)
class IndexRuns:
    """The runs of a page's dictionary indices: run ``r`` holds the page's values from
    ``starts[r]`` on; a bit-packed run's ``at`` is the offset in the page of its packed
    indices (value ``k`` of the run at bit ``k * width`` there), an RLE run's is the index it
    repeats."""

    width: int  # bits per index
    starts: np.ndarray  # first value of each run in the page (int64, increasing from 0)
    packed: np.ndarray  # bool: bit-packed (else RLE)
    at: np.ndarray  # int64: where the packed indices start, or the repeated index

    def spacing(self, rows: int) -> tuple[int, int] | None:
        """For a page of ``rows`` values: ``(per_run, stride)`` when every run is bit-packed
        and they are evenly spaced: run ``r`` starts at value ``r * per_run`` and its indices
        at byte ``at[0] + r * stride``, and the last run holds at most ``per_run`` values;
        None otherwise."""
        if not self.packed.all():
            return None
        if len(self.starts) == 1:
            return 1 << 32, 0  # one run: every value in run 0
        per_run, stride = int(self.starts[1]), int(self.at[1] - self.at[0])
        runs = np.arange(len(self.starts))
        if np.any(self.starts != runs * per_run) or np.any(self.at != self.at[0] + runs * stride):
            return None
        if rows - int(self.starts[-1]) > per_run:
            return None  # a last run longer than the others: value k is not in run k // per_run
        return per_run, stride


def index_layout(page: memoryview, max_def: int, rows: int) -> IndexRuns | None:
    """The runs of the dictionary indices in a data page (``page``: the whole page, header
    included) holding ``rows`` rows of a flat leaf, when the page is dictionary-encoded,
    uncompressed, without NULLs and of at most ``MAX_PAGE_VALUES`` values; None otherwise (also
    for runs that do not hold exactly the page's values)."""
    if rows > MAX_PAGE_VALUES:
        return None
    if page.format != "B":
        page = page.cast("B")
    pos = values_start(page, len(page), (_RLE_DICTIONARY, _PLAIN_DICTIONARY), max_def, rows)
    if pos is None or pos >= len(page) or page[pos] > _MAX_WIDTH:
        return None
    return _runs(page, pos + 1, int(page[pos]), rows)


def _runs(page: memoryview, pos: int, width: int, rows: int) -> IndexRuns | None:
    """The runs from ``pos`` to the page's end (see :func:`index_layout`)."""
    starts: list[int] = []
    packed: list[bool] = []
    at: list[int] = []
    seen = 0
    value_bytes = (width + 7) // 8
    while pos < len(page) and seen < rows:
        found = run_header(page, pos)
        if found is None or not found[0] >> 1:
            return None  # cut short, or an empty run
        head, data = found
        starts.append(seen)
        packed.append(bool(head & 1))
        if head & 1:  # (head >> 1) groups of 8 indices, bit-packed
            at.append(data)
            seen += 8 * (head >> 1)
            pos = data + (head >> 1) * width
        else:  # head >> 1 copies of one index, in value_bytes little-endian bytes
            at.append(int.from_bytes(page[data : data + value_bytes], "little"))
            seen += head >> 1
            pos = data + value_bytes
    if pos != len(page) or not rows <= seen < rows + 8 or (seen > rows and not packed[-1]):
        return None  # bytes left over or missing, or runs that are not the page's values
    as64 = np.array(starts, np.int64), np.array(packed, bool), np.array(at, np.int64)
    return IndexRuns(width, *as64)


def dictionary_values(page: memoryview, dtype: np.dtype) -> np.ndarray | None:
    """The values of a PLAIN dictionary page (``page``: the whole page, header included) of
    fixed-width ``dtype`` values; None when it is not one."""
    if page.format != "B":
        page = page.cast("B")
    try:
        header, pos = tc.decode_struct(page)
    except CorruptInputError:
        return None
    body = header.get(7)
    size = header.get(3)
    if header.get(1) != _DICTIONARY_PAGE or body is None or size is None:
        return None
    count = body.get(1)
    if body.get(2) not in (_PLAIN, _PLAIN_DICTIONARY) or count is None or count < 0:
        return None
    if header.get(2) != size or pos + size != len(page) or size != count * dtype.itemsize:
        return None
    return np.frombuffer(page[pos:], dtype=dtype).copy()


def unpack_indices(blob: np.ndarray, at_bits: np.ndarray, width: int) -> np.ndarray:
    """The ``width``-bit little-endian values starting at bit ``at_bits`` of ``blob`` (uint8),
    as int64. Bytes past ``blob``'s end read as 0 (a run's last value may end in its last
    byte); with 8 bytes to spare after the last value, each value is one unaligned 64-bit
    load."""
    first = at_bits >> 3
    if len(first) and int(first.max()) + 8 <= len(blob):
        every_byte = np.ndarray((len(blob) - 7,), np.dtype("<u8"), blob, 0, (1,))
        word = every_byte[first]
    else:
        word = np.zeros(len(at_bits), dtype=np.uint64)
        for j in range((width + 7 + 7) // 8):  # bytes a value may span, its shift included
            pos = first + j
            inside = pos < len(blob)
            byte = np.zeros(len(at_bits), dtype=np.uint64)
            byte[inside] = blob[pos[inside]]
            word |= byte << np.uint64(8 * j)
    word >>= (at_bits & 7).astype(np.uint64)
    return (word & np.uint64((1 << width) - 1)).astype(np.int64)


def as_arrow(values: np.ndarray, arrow_type: pa.DataType) -> pa.Array:
    """Dictionary values of a physical dtype as an array of the column's Arrow type (integers
    narrowed or reinterpreted as unsigned, bit for bit as Parquet stores them)."""
    target = np.dtype(arrow_type.to_pandas_dtype())
    return pa.array(values.astype(target, copy=False), arrow_type)
