"""What keyed-table operations share: the table's key, incoming rows screened for bad keys, and
the live rows holding given keys (through the global index, omnitable.format.keyindex)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.format.keyindex import FragmentSlot, probe_fragments
from omnitable.format.reader import FragmentReader
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
        groups: dict[tuple[int, int], list[int]] = {}
        for i in np.flatnonzero(dup):
            groups.setdefault((int(h1[i]), int(h2[i])), []).append(int(positions[i]))
        for rows in groups.values():
            shown = [key_repr(table, key, pos) for pos in rows]
            counts = Counter(shown)  # more than one distinct key: a hash collision
            first_two = list(counts)[:2]
            for pos, this in zip(rows, shown, strict=True):
                other = next((s for s in first_two if s != this), None)
                rejected.append(
                    (pos, "duplicate_key", f"key {this} occurs {counts[this]} times in this input")
                    if counts[this] > 1 or other is None
                    else (pos, "key_collision", collision_message(table, key, pos, other))
                )
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


def collision_message(table: pa.Table, key: list[str], pos: int, other: str) -> str:
    """Why the row at ``pos`` of ``table`` is rejected: its key is not ``other`` but hashes
    the same (keys of several integer or date columns are hashed to 64 bits)."""
    return (
        f"key {key_repr(table, key, pos)} has the same 64-bit hash as key {other}, and a table "
        f"keyed by several integer or date columns ({', '.join(key)}) cannot hold both; add a "
        "string column to the key (docs/dataops.md, upserts)"
    )


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


def read_found(
    reader: FragmentReader,
    fragments: list[FragmentRecord],
    where: np.ndarray,
    offsets: np.ndarray,
    columns: list[str],
) -> pa.Table:
    """``columns`` of the rows the keys found point at (``where``: each key's fragment, -1 for
    keys not found; ``offsets``: its row there), one fragment after the other, in the order of
    the keys found."""
    parts, order = [], []
    for pos in np.unique(where[where >= 0]):
        hits = np.flatnonzero(where == pos)
        hits = hits[np.argsort(offsets[hits])]
        parts.append(reader.read_rows(fragments[int(pos)], columns, offsets[hits]))
        order.append(hits)
    schema = pa.schema([reader.snapshot.arrow_schema().field(c) for c in columns])
    read = pa.concat_tables([p.cast(schema) for p in parts])
    return read.take(pa.array(np.argsort(np.concatenate(order), kind="stable")))


def same_keys(found: pa.Table, given: pa.Table, key: list[str]) -> pa.Array:
    """Row by row, whether the row read holds the key asked for (a hash collision does not)."""
    same = None
    for k in key:
        eq = pc.equal(found.column(k), given.column(k))
        same = eq if same is None else pc.and_(same, eq)
    assert same is not None
    return same
