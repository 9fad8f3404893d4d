"""Values of PLAIN byte-array data pages (strings, binaries), taken without decoding the pages.

A selective read of a wide text column wants one or two values from each of thousands of small
pages. pyarrow decodes every page it is given whole: it decompresses the page and builds an
Arrow array of all its values, of which the reader then keeps one. Here the pages holding the
wanted rows are decompressed by one reused zstd context per thread (zstd releases the GIL, so
the fragments a read decodes in parallel use every core), their length-prefixed values walked
for all the pages at once (one vectorised step per value skipped) and only the wanted values
copied out: at 1 % random rows of a ~250-byte text, about half the time of the page decode.

The page headers are parsed for all pages at once from their first bytes, in the layout every
Parquet writer we know emits (fields in id order); a header that does not match is parsed
field by field. Every check is made on the pages themselves (page type, encoding, codec, sizes,
definition levels); anything else raises :class:`CorruptInputError` and the caller decodes the
pages as usual, which reports a genuinely corrupt page with its cause.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from omnitable.exceptions import CorruptInputError
from omnitable.format import thrift_compact as tc
from omnitable.format.plain_pages import run_header
from omnitable.format.thrift_compact import Struct

_BYTE_ARRAY = 6  # Parquet physical type
_REQUIRED, _OPTIONAL = 0, 1  # FieldRepetitionType
_UNCOMPRESSED, _ZSTD = 0, 6  # CompressionCodec
_PLAIN, _RLE = 0, 3  # Encoding
_DATA_PAGE = 0  # PageType
_UTF8 = 0  # ConvertedType
_STRING_LOGICAL = 1  # LogicalType union: STRING
_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
_HEAD = 48  # first bytes of a page parsed in bulk (a header whose prefix is longer: one by one)
# values skipped in one page at most: each step costs ~10 us of NumPy calls whatever the pages,
# so a row deeper in its page (a 512-row page of a keyed table) is decoded as usual, by pyarrow
MAX_STEPS = 64
# decompressed pages handled at once: a buffer kept by each thread that read pages this way
SCRATCH_BYTES = 8 * 1024 * 1024
_LOCAL = threading.local()


@dataclass(frozen=True)
class StringLeaf:
    """A flat byte-array leaf read here: its Arrow type, maximum definition level, codec."""

    arrow_type: pa.DataType
    max_def: int
    codec: int

    @property
    def uncompressed(self) -> bool:
        return self.codec == _UNCOMPRESSED


def string_leaf(
    elements: list[Struct], chunk_metas: list[Struct], arrow_type: pa.DataType | None
) -> StringLeaf | None:
    """For a top-level column of one leaf (its schema ``elements``: the leaf alone) whose
    column chunks (``chunk_metas``: their ColumnMetaData) are byte arrays without a dictionary,
    stored uncompressed or in zstd: how to read it; None for any other column."""
    if len(elements) != 1:
        return None
    leaf = elements[0]
    repetition = leaf.get(3, _REQUIRED)
    if leaf.get(1) != _BYTE_ARRAY or repetition not in (_REQUIRED, _OPTIONAL):
        return None
    codecs = {m.get(4) for m in chunk_metas}
    if len(codecs) != 1 or not codecs <= {_UNCOMPRESSED, _ZSTD}:
        return None
    if any(m.get(1) != _BYTE_ARRAY or m.get(11) is not None for m in chunk_metas):
        return None  # a dictionary page: its data pages hold indices
    if arrow_type is None:
        logical = leaf.get(10)
        text = leaf.get(6) == _UTF8 or (logical is not None and logical.get(_STRING_LOGICAL))
        arrow_type = pa.string() if text else pa.binary()
    if arrow_type not in _TYPES:
        return None
    return StringLeaf(arrow_type, int(repetition == _OPTIONAL), codecs.pop())


@dataclass(frozen=True)
class Headers:
    """Where each page's values are, from its header: all offsets into the fetched bytes."""

    body: np.ndarray  # first byte of the page's (compressed) values
    stored: np.ndarray  # their bytes as stored
    size: np.ndarray  # their bytes uncompressed
    values: np.ndarray  # values in the page, NULLs included


def parse_headers(
    blob: np.ndarray, starts: np.ndarray, ends: np.ndarray, one_by_one: bool = False
) -> Headers:
    """The headers of the pages ``[starts, ends)`` of ``blob`` (uint8), each of which must be a
    v1 data page of PLAIN values with RLE definition levels; raises CorruptInputError for any
    other page. In bulk, a page's values are taken to end where the page ends (its offset
    index's size); ``one_by_one`` parses every header field by field, checking that, for
    uncompressed pages, where nothing else would notice values read from the wrong place."""
    if one_by_one:
        parsed = [_header(blob, int(a), int(b)) for a, b in zip(starts, ends, strict=True)]
        return Headers(*(np.array(c, dtype=np.int64) for c in zip(*parsed, strict=True)))
    n = len(starts)
    cols = np.minimum(starts[:, None] + np.arange(_HEAD), len(blob) - 1)
    head = blob[cols].astype(np.int64)
    head[starts[:, None] + np.arange(_HEAD) >= ends[:, None]] = 0  # past the page: no field
    rows = np.arange(n)
    cur = np.zeros(n, dtype=np.int64)
    ok = np.ones(n, dtype=bool)
    fields = []
    for _ in range(3):  # type, uncompressed_page_size, compressed_page_size: i32s
        ok &= _byte(head, rows, cur) == 0x15
        value, cur, good = _varints(head, rows, cur + 1)
        ok &= good
        fields.append(_zigzag(value))
    crc = _byte(head, rows, cur) == 0x15  # crc (field 4): skipped
    _, after_crc, good = _varints(head, rows, cur + 1)
    ok &= good | ~crc
    cur = np.where(crc, after_crc, cur)
    ok &= _byte(head, rows, cur) == np.where(crc, 0x1C, 0x2C)  # data_page_header (field 5)
    cur += 1
    inner = []
    for _ in range(4):  # num_values, encoding, definition and repetition level encodings
        ok &= _byte(head, rows, cur) == 0x15
        value, cur, good = _varints(head, rows, cur + 1)
        ok &= good
        inner.append(_zigzag(value))
    kind, size, stored = fields
    ok &= (kind == _DATA_PAGE) & (inner[1] == _PLAIN) & (inner[2] == _RLE)
    body = ends - stored
    ok &= (stored >= 0) & (size >= 0) & (body >= starts + cur)
    values = inner[0]
    for i in np.flatnonzero(~ok).tolist():  # parsed field by field: the page or an error
        body[i], stored[i], size[i], values[i] = _header(blob, int(starts[i]), int(ends[i]))
    return Headers(body, stored, size, values)


def _byte(head: np.ndarray, rows: np.ndarray, cur: np.ndarray) -> np.ndarray:
    """The byte at ``cur`` of each row of ``head`` (0 past its end: no field starts there)."""
    return np.where(cur < head.shape[1], head[rows, np.minimum(cur, head.shape[1] - 1)], 0)


def _varints(
    head: np.ndarray, rows: np.ndarray, cur: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unsigned varints (up to 5 bytes) at ``cur`` of each row of ``head``: values, the
    positions after them, and whether each ended within ``head``."""
    value = np.zeros(len(rows), dtype=np.int64)
    done = np.zeros(len(rows), dtype=bool)
    width = head.shape[1]
    end = cur.copy()
    for k in range(5):
        at = cur + k
        byte = head[rows, np.minimum(at, width - 1)]
        live = ~done & (at < width)
        value |= np.where(live, (byte & 0x7F) << (7 * k), 0)
        end += live
        done |= live & (byte < 0x80)
    return value, end, done


def _zigzag(v: np.ndarray) -> np.ndarray:
    return (v >> 1) ^ -(v & 1)


def _header(blob: np.ndarray, start: int, end: int) -> tuple[int, int, int, int]:
    """One page's header parsed field by field: its body's offset, stored and uncompressed
    bytes, its values; raises CorruptInputError unless it is a v1 PLAIN data page with RLE
    levels whose values end where the page ends."""
    header, pos = tc.decode_struct(blob[start:end].data)
    data = header.get(5)
    if header.get(1) != _DATA_PAGE or data is None:
        raise CorruptInputError("not a v1 data page")
    if data.get(2) != _PLAIN or data.get(3) != _RLE:
        raise CorruptInputError("not a PLAIN page with RLE definition levels")
    stored, size = header.get(3), header.get(2)
    if stored is None or size is None or start + pos + stored != end or size < 0:
        raise CorruptInputError("a page's sizes do not match its offset index")
    return start + pos, stored, size, data.get(1)


def take_values(
    blob: np.ndarray,
    headers: Headers,
    leaf: StringLeaf,
    counts: np.ndarray,
    page_of: np.ndarray,
    at: np.ndarray,
    pool: Executor | None = None,
) -> pa.Array:
    """The values at rows ``at`` (row within its page; sorted within a page) of the pages
    ``page_of`` (indices into ``headers``, non-decreasing) holding ``counts`` values each
    (NULLs included), as an array of ``leaf.arrow_type`` (NULL where the row is NULL). The
    pages are taken in runs of at most ``SCRATCH_BYTES`` uncompressed, on ``pool``'s threads
    when given and there are several."""
    if np.any(headers.values != counts):
        raise CorruptInputError("a page holds another number of values than its rows")
    runs, lo = [], 0
    sizes = headers.size + 8  # room for a decoder's overrun, never read
    while lo < len(headers.body):
        # pages decompressed together: as many as fit in the scratch buffer (at least one)
        fit = int(np.searchsorted(np.cumsum(sizes[lo:]), SCRATCH_BYTES, side="right"))
        hi = lo + max(1, fit)
        a, b = np.searchsorted(page_of, [lo, hi])
        if b > a:
            runs.append((blob, headers, leaf, counts, lo, hi, page_of[a:b] - lo, at[a:b]))
        lo = hi
    if not runs:
        return pa.array([], type=leaf.arrow_type)
    if pool is None or len(runs) == 1:
        parts = [_take_chunk(*run) for run in runs]
    else:
        parts = [f.result() for f in [pool.submit(_take_chunk, *run) for run in runs]]
    return parts[0] if len(parts) == 1 else pa.concat_arrays(parts)


def _take_chunk(
    blob: np.ndarray,
    headers: Headers,
    leaf: StringLeaf,
    counts: np.ndarray,
    lo: int,
    hi: int,
    page_of: np.ndarray,
    at: np.ndarray,
) -> pa.Array:
    """:func:`take_values` for the pages ``[lo, hi)`` (``page_of`` relative to ``lo``)."""
    data, starts = _decompress(blob, headers, leaf.codec, lo, hi)
    ends = starts + headers.size[lo:hi]
    first = starts.copy()  # each page's first value, after its definition levels
    index = at.astype(np.int64)  # each wanted row's value within its page; -1: NULL
    if leaf.max_def:
        _levels(data, starts, ends, counts[lo:hi], first, page_of, index)
    position = _walk(data, first, ends, page_of, index)
    valid = index >= 0
    every = np.ndarray((max(len(data) - 3, 0),), np.dtype("<u4"), data, 0, (1,))
    begin = np.where(valid, position + 4, 0)
    length = np.where(valid, every[np.where(valid, position, 0)], 0).astype(np.int64)
    if np.any(valid & (begin + length > ends[page_of])):
        raise CorruptInputError("a value runs past its page")
    return _gathered(data, begin, length, valid, leaf.arrow_type)


def _decompress(
    blob: np.ndarray, headers: Headers, codec: int, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """The pages ``[lo, hi)``'s values uncompressed, one after the other (of an uncompressed
    page: ``blob`` itself), and where each page starts in them."""
    body, stored, size = (x[lo:hi] for x in (headers.body, headers.stored, headers.size))
    if codec == _UNCOMPRESSED:
        if np.any(stored != size):
            raise CorruptInputError("an uncompressed page's sizes differ")
        return blob, body
    starts = np.concatenate([[0], np.cumsum(size)[:-1]]).astype(np.int64)
    total = int(size.sum())
    out = _scratch(total + 8)
    view, source = out.data, blob.data
    decompress = _decompressor().decompress
    for b, s, u, o in zip(body.tolist(), stored.tolist(), size.tolist(), starts.tolist(),
                          strict=True):  # fmt: skip
        try:
            page = decompress(source[b : b + s], max_output_size=u)
        except Exception as exc:  # zstandard.ZstdError: not a frame of this page
            raise CorruptInputError(f"a zstd page does not decompress: {exc}") from exc
        if len(page) != u:
            raise CorruptInputError("a page decompressed to another size than its header's")
        view[o : o + u] = page
    return out[: total + 8], starts


def _decompressor() -> Any:
    """This thread's zstd context (one per thread: a context is not thread-safe)."""
    found = getattr(_LOCAL, "zstd", None)
    if found is None:
        import zstandard

        found = _LOCAL.zstd = zstandard.ZstdDecompressor()
    return found


def _scratch(n: int) -> np.ndarray:
    """This thread's buffer of at least ``n`` bytes (reused: fresh memory costs a page fault
    per 4 KiB, about as much as decompressing into it); valid until its next call."""
    buf: np.ndarray | None = getattr(_LOCAL, "buf", None)
    if buf is None or len(buf) < n:
        buf = np.empty(max(n, 1 << 20), dtype=np.uint8)
        if n <= SCRATCH_BYTES + (1 << 20):
            _LOCAL.buf = buf  # a larger one (one huge page) is not kept
    return buf


def _levels(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    first: np.ndarray,
    page_of: np.ndarray,
    index: np.ndarray,
) -> None:
    """Skip each page's definition levels (``first`` moved past them) and turn ``index`` (row
    within the page) into the value within the page, -1 for a NULL. A page of no NULL (one RLE
    run of ones, the common case) is recognised in bulk; the others are decoded one by one."""
    if np.any(starts + 4 > ends):
        raise CorruptInputError("a page ends before its definition levels")
    every = np.ndarray((max(len(data) - 3, 0),), np.dtype("<u4"), data, 0, (1,))
    length = every[starts].astype(np.int64)
    first += 4 + length
    if np.any(first > ends):
        raise CorruptInputError("a page's definition levels run past it")
    run = counts.astype(np.int64) << 1  # an RLE run of `count` ones: varint(count << 1), 0x01
    width = np.ones(len(run), dtype=np.int64)
    for k in (7, 14, 21, 28):
        width += run >= (1 << k)
    expected = length == width + 1
    pos = starts + 4
    value = np.zeros(len(run), dtype=np.int64)
    for k in range(5):
        byte = data[np.minimum(pos + k, len(data) - 1)].astype(np.int64)
        value |= np.where(k < width, (byte & 0x7F) << (7 * k), 0)
    expected &= (value == run) & (data[np.minimum(pos + width, len(data) - 1)] == 1)
    for page in np.flatnonzero(~expected).tolist():
        rows = np.flatnonzero(page_of == page)
        if len(rows) == 0:
            continue
        levels = _hybrid(data[starts[page] + 4 : first[page]], int(counts[page]))
        before = np.cumsum(levels) - levels  # values (non-NULL rows) before each row
        wanted = index[rows]
        index[rows] = np.where(levels[wanted] == 1, before[wanted], -1)


def _hybrid(encoded: np.ndarray, count: int) -> np.ndarray:
    """``count`` definition levels of bit width 1 from their RLE/bit-packed hybrid encoding."""
    out = np.zeros(count, dtype=np.int64)
    pos = seen = 0
    raw = encoded.tobytes()
    while seen < count:
        found = run_header(raw, pos)
        if found is None:
            raise CorruptInputError("definition levels end early")
        head, pos = found
        if head & 1:  # bit-packed: head >> 1 groups of 8 values, a byte each at width 1
            groups = head >> 1
            bits = np.unpackbits(
                np.frombuffer(raw[pos : pos + groups], np.uint8), bitorder="little"
            )
            take = min(len(bits), count - seen)
            out[seen : seen + take] = bits[:take]
            pos, seen = pos + groups, seen + take
            if len(bits) < groups * 8:
                raise CorruptInputError("definition levels end early")
        else:  # an RLE run of head >> 1 copies of a one-byte value
            if pos >= len(raw) or raw[pos] > 1:
                raise CorruptInputError("a definition level above 1")
            take = min(head >> 1, count - seen)
            out[seen : seen + take] = raw[pos]
            pos, seen = pos + 1, seen + take
    return out


def _walk(
    data: np.ndarray, first: np.ndarray, ends: np.ndarray, page_of: np.ndarray, index: np.ndarray
) -> np.ndarray:
    """Where each wanted value (``index`` within page ``page_of``; -1: none) starts in
    ``data``: from each page's ``first`` value, one length prefix skipped per step, for every
    page at once."""
    position = np.zeros(len(index), dtype=np.int64)
    if not len(index):
        return position
    steps = int(index.max()) + 1
    if steps > MAX_STEPS:
        raise CorruptInputError("values too deep in their page to walk to")  # decoded instead
    order = np.argsort(index, kind="stable")
    bounds = np.searchsorted(index[order], np.arange(-1, steps + 1))
    need = np.zeros(len(first), dtype=np.int64)  # steps each page needs
    np.maximum.at(need, page_of, index + 1)
    every = np.ndarray((max(len(data) - 3, 0),), np.dtype("<u4"), data, 0, (1,))
    pages = np.flatnonzero(need > 0)
    pos = first[pages]
    local = np.full(len(first), -1, dtype=np.int64)
    for step in range(steps):
        local[pages] = np.arange(len(pages))
        rows = order[bounds[step + 1] : bounds[step + 2]]
        position[rows] = pos[local[page_of[rows]]]
        if np.any(pos + 4 > ends[pages]):
            raise CorruptInputError("a page ends before its values")
        pos = pos + 4 + every[pos].astype(np.int64)
        keep = need[pages] > step + 1
        pages, pos = pages[keep], pos[keep]
    return position


def _gathered(
    data: np.ndarray, begin: np.ndarray, length: np.ndarray, valid: np.ndarray, t: pa.DataType
) -> pa.Array:
    """The byte ranges ``[begin, begin + length)`` of ``data`` (in order, not overlapping) as
    an array of ``t``, NULL where not ``valid``: a large-binary array over ``data`` whose
    values alternate between a wanted range and the bytes before the next one, of which Arrow's
    take copies the wanted ones."""
    bounds = np.empty(2 * len(begin) + 1, dtype=np.int64)
    end = begin + length
    bounds[0] = 0
    bounds[1::2] = np.where(valid, begin, 0)
    bounds[2::2] = np.where(valid, end, 0)
    bounds = np.maximum.accumulate(bounds)  # a NULL row: an empty range where the last ended
    spread = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(bounds) - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    )
    taken = spread.take(pa.array(np.arange(1, len(bounds) - 1, 2)))
    mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    compact = pa.Array.from_buffers(
        pa.large_binary(), len(begin), [mask, *taken.buffers()[1:]], null_count=-1
    )
    if t.equals(pa.large_binary()):
        return compact
    large = (
        compact.view(pa.large_string())
        if pa.types.is_string(t) or pa.types.is_large_string(t)
        else compact
    )
    return large if large.type.equals(t) else large.cast(t)
