"""The rows a deletion vector leaves, in the forms readers drop deleted rows with.

A read of a fragment with deleted rows decodes every row and then keeps the live ones: a filter
(True: live) for the columns decoded by pyarrow, and the live offsets for the columns taken from
their pages (:func:`omnitable.format.pages.gather_plain`) or gathered by index. Working both out
costs about 1 ms per million rows (inverting the mask, ``np.flatnonzero``, packing the filter),
paid again on every read of the fragment; this module keeps them for the vectors read last, up
to ``MAX_BYTES`` in all (4.1 bytes per row of the fragment: the int32 offsets and the bitmap),
least recently used evicted first. Entries are keyed by the vector's content, which never
changes, so a kept entry is always the right one.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np
import pyarrow as pa

from omnitable.catalog.records import DeletionRecord

MAX_BYTES = 256 * 1024 * 1024  # live rows kept in all, per process

LiveRows = tuple[pa.BooleanArray, pa.Array]
"""A vector's live rows: the filter (True: live) and the live offsets, ascending (int32 for
fragments below 2**31 rows, else int64)."""

_KEPT: OrderedDict[tuple[str, int, str], LiveRows] = OrderedDict()
_LOCK = threading.Lock()
_kept_bytes = 0


def live_rows(vector: DeletionRecord) -> LiveRows:
    """The live rows of ``vector``'s fragment (kept for the next read of the same vector).

    Raises:
        CorruptInputError: the stored vector does not decode to the fragment's rows.
    """
    global _kept_bytes
    key = (vector.fragment_id, vector.row_count, vector.vector)
    with _LOCK:
        found = _KEPT.get(key)
        if found is not None:
            _KEPT.move_to_end(key)
            return found
    live = ~vector.mask()
    kind = np.int32 if vector.row_count < 2**31 else np.int64
    made = (pa.array(live), pa.array(np.flatnonzero(live).astype(kind, copy=False)))
    size = _size(made)
    if size > MAX_BYTES:
        return made
    with _LOCK:
        if key not in _KEPT:
            _KEPT[key] = made
            _kept_bytes += size
        while _kept_bytes > MAX_BYTES:
            _, gone = _KEPT.popitem(last=False)
            _kept_bytes -= _size(gone)
    return made


def forget() -> None:
    """Drop every kept entry."""
    global _kept_bytes
    with _LOCK:
        _KEPT.clear()
        _kept_bytes = 0


def _start_empty() -> None:
    """In a forked child: no entry, and a new lock (another thread may have held the
    parent's at the fork)."""
    global _LOCK, _kept_bytes
    _LOCK = threading.Lock()
    _KEPT.clear()
    _kept_bytes = 0


def _size(rows: LiveRows) -> int:
    return int(rows[0].nbytes + rows[1].nbytes)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_start_empty)
