"""Column sets and per-file statistics: how a file's columns are stored (schema.sql, ``files``
and ``column_sets``; docs/catalog.md, "Column sets").

A file row names its column set (``set_id``) and holds its statistics as one JSON array in the
set's position order. A set is stored once per table and shared by every file carrying the same
columns with the same feature versions, so a file costs one row however many columns it has.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.commit_sql import sql
from omnitable.catalog.sql import in_list
from omnitable.exceptions import CatalogError
from omnitable.vocabulary.stats import ColumnStats

_CHUNK = 500


@dataclass(frozen=True)
class ColumnSet:
    """The columns of a file in ascending column id, with their feature versions (None: raw)."""

    members: tuple[tuple[int, str | None], ...]

    @classmethod
    def of(cls, feature_versions: Mapping[int, str | None]) -> ColumnSet:
        return cls(tuple(sorted(feature_versions.items())))

    @cached_property
    def set_id(self) -> str:
        """The content hash schema.sql specifies (shared by both languages)."""
        key = ";".join(f"{cid}:{fv or ''}" for cid, fv in self.members)
        return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]

    @property
    def column_ids(self) -> list[int]:
        return [cid for cid, _ in self.members]


def encode_stats(column_set: ColumnSet, stats: Mapping[int, ColumnStats]) -> str | None:
    """``files.stats`` of a file: ``[null_count, min, max]`` per set position (None: no entry)."""
    if not stats:
        return None
    entries: list[Any] = []
    for cid in column_set.column_ids:
        st = stats.get(cid)
        entries.append(None if st is None else [st.null_count, st.min_value, st.max_value])
    return json.dumps(entries, separators=(",", ":"))


def decode_stats(raw: str | None, position: int) -> ColumnStats:
    """The statistics at ``position`` of a ``files.stats`` value (unknown: null count 0, no
    bounds)."""
    if raw is None:
        return ColumnStats(0)
    return stats_entry(json.loads(raw), position)


def stats_entry(entries: list[Any], position: int) -> ColumnStats:
    """The statistics at ``position`` of decoded ``files.stats`` entries."""
    if position >= len(entries):
        raise CatalogError(
            f"Cannot read file statistics: position {position} is past the {len(entries)} "
            "entries stored; the catalog is inconsistent (files.stats vs column_sets)"
        )
    entry = entries[position]
    if entry is None:
        return ColumnStats(0)
    nc, lo, hi = entry
    return ColumnStats(0 if nc is None else int(nc), lo, hi)


def insert_missing_sets(conn: Connection, table_id: str, sets: Iterable[ColumnSet]) -> None:
    """Insert the sets the table does not have yet (a set's rows are its content, so a set a
    concurrent writer inserted first is the same rows)."""
    wanted = {s.set_id: s for s in sets}
    ids = sorted(wanted)
    existing: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        params: dict[str, Any] = {"t": table_id}
        of_ids = in_list("set_id", "s", ids[i : i + _CHUNK], params)
        existing.update(
            r[0]
            for r in conn.execute(
                text(f"SELECT DISTINCT set_id FROM column_sets WHERE table_id = :t AND {of_ids}"),
                params,
            )
        )
    rows = [
        {"t": table_id, "s": sid, "c": cid, "p": pos, "fv": fv}
        for sid in ids
        if sid not in existing
        for pos, (cid, fv) in enumerate(wanted[sid].members)
    ]
    if rows:
        conn.execute(text(sql("insert_column_set")), rows)
