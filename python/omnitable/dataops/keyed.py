"""What keyed-table operations share: the table's key, incoming rows screened for bad keys, and
the live rows holding given keys (through the global index, omnitable.format.keyindex)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.format.keyindex import FragmentSlot, probe_fragments
from omnitable.vocabulary.keys import key_hashes, table_key


def require_key(ctx: TableContext, what: str) -> list[str]:
    """The table's key columns. Raises ValidationError for a table declared without a key."""
    key = table_key(ctx.record.properties)
    if key is None:
        raise ValidationError(
            f"Cannot {what} table '{ctx.name}': it has no key; create keyed tables with "
            "create_table(..., key=['column', ...])"
        )
    return key


@dataclass(frozen=True)
class Screened:
    """Rows of an input with a usable key (``positions`` in the input, their hashes), and the
    rejected rows: (position, kind, message)."""

    positions: np.ndarray
    h1: np.ndarray
    h2: np.ndarray
    rejected: list[tuple[int, str, str]]


def screen(table: pa.Table, key: list[str]) -> Screened:
    """Reject rows with a NULL in a key column, and every row of a key given more than once."""
    null = np.zeros(table.num_rows, dtype=bool)
    for k in key:
        null |= np.asarray(pc.is_null(table.column(k)).to_numpy(zero_copy_only=False), bool)
    rejected = [(int(i), "null_key", f"key column(s) {', '.join(key)} hold NULL") for i in np.flatnonzero(null)]  # fmt: skip
    positions = np.flatnonzero(~null)
    h1, h2 = key_hashes([table.column(k).take(pa.array(positions)) for k in key])
    dup = _duplicates(h1, h2)
    if dup.any():
        counts: dict[tuple[int, int], int] = {}
        for a, b in zip(h1[dup], h2[dup], strict=True):
            counts[(int(a), int(b))] = counts.get((int(a), int(b)), 0) + 1
        for i in np.flatnonzero(dup):
            pos = int(positions[i])
            n = counts[(int(h1[i]), int(h2[i]))]
            rejected.append((pos, "duplicate_key", f"key {key_repr(table, key, pos)} occurs {n} times in this input"))  # fmt: skip
        positions, h1, h2 = positions[~dup], h1[~dup], h2[~dup]
    return Screened(positions, h1, h2, sorted(rejected))


def _duplicates(h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """True for every row whose hash another row shares."""
    order = np.lexsort((h2, h1))
    s1, s2 = h1[order], h2[order]
    same = (s1[1:] == s1[:-1]) & (s2[1:] == s2[:-1])
    flagged = np.zeros(len(h1), dtype=bool)
    flagged[1:] |= same
    flagged[:-1] |= same
    out = np.zeros(len(h1), dtype=bool)
    out[order] = flagged
    return out


def key_repr(table: pa.Table, key: list[str], pos: int) -> str:
    values = [table.column(k)[pos].as_py() for k in key]
    return repr(values[0]) if len(values) == 1 else repr(tuple(values))


def live_slots(snap: Snapshot) -> tuple[list[FragmentRecord], list[FragmentSlot]]:
    """The snapshot's live fragments and what probing their index files needs."""
    fragments = snap.live_fragments(None)
    slots = []
    for frag in fragments:
        dv = snap.deletion(frag.fragment_id)
        slots.append(FragmentSlot(frag.path, frag.row_count, None if dv is None else dv.mask()))
    return fragments, slots


def locate(
    ctx: TableContext, snap: Snapshot, h1: np.ndarray, h2: np.ndarray
) -> tuple[list[FragmentRecord], np.ndarray, np.ndarray]:
    """The live fragments of ``snap``, and for each hash the position of the fragment holding
    its live row and the row's offset (-1, -1: no live row has the key)."""
    fragments, slots = live_slots(snap)
    where, offsets = probe_fragments(ctx.location, slots, h1, h2)
    return fragments, where, offsets
