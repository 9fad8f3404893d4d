"""Snapshots a catalog connection already loaded, by the segments that determine them.

A snapshot is a function of its table, its segments (``(branch, upto)`` pairs: what every
catalog row's visibility is decided by, docs/catalog.md "Resolving a snapshot") and the scope
loaded. Committed rows never change what they say about a version at or below the head that
saw them: a commit adds rows at a new version (versions are allocated per table, never
reused) and marks removals with it; a fast-forward merge re-labels rows of versions above the
target's head and moves that head; a deleted branch's rows move to a unique name; expiry
deletes only rows no retained version sees. So a read that resolves its head (one or two
statements) and finds the same segments can reuse the snapshot loaded for them, which on a
table of a few hundred columns saves ten statements and the records' construction (1.1-1.4 ms
of a 5 ms `Table.read`).

Only reads use it (``Table.read``/``scan``/``plan``, exports); writers load their own
snapshot, and each caller gets its own containers (records are shared and never mutated by
readers). At most ``MAX_RECORDS`` fragments and files are held in all (a few tens of MB at
most): large snapshots are not kept (they are rare per process and costly to hold), including
those of many fragments loaded without their files (a full scan's plan).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable

from omnitable.catalog.records import TableRecord
from omnitable.catalog.snapshot import Snapshot

MAX_SNAPSHOTS = 16  # per catalog connection, least recently used evicted first
MAX_RECORDS = 30_000  # fragments and files of all snapshots kept, per connection


class SnapshotCache:
    """A thread-safe LRU of loaded snapshots by key (see :func:`key`)."""

    def __init__(self, max_snapshots: int = MAX_SNAPSHOTS, max_records: int = MAX_RECORDS) -> None:
        self.max_snapshots = max_snapshots
        self.max_records = max_records
        self._items: OrderedDict[Hashable, Snapshot] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.add(self)

    def get(self, key: Hashable, table: TableRecord) -> Snapshot | None:
        """A copy of the snapshot kept under ``key`` (its own containers, the caller's record
        of the table: its name or properties may have changed since), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
        return _copy(found, table)

    def put(self, key: Hashable, snap: Snapshot) -> None:
        """Keep a copy of ``snap`` under ``key``, evicting the least recently used snapshots
        until at most ``max_snapshots`` holding at most ``max_records`` fragments and files in all
        are kept (a snapshot of more than that is not kept)."""
        size = _records(snap)
        if size > self.max_records:
            return
        kept = _copy(snap, snap.table)
        with self._lock:
            self._items[key] = kept
            self._items.move_to_end(key)
            total = sum(_records(s) for s in self._items.values())
            while len(self._items) > self.max_snapshots or total > self.max_records:
                _, gone = self._items.popitem(last=False)
                total -= _records(gone)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


_CACHES: weakref.WeakSet[SnapshotCache] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """In a forked child (a DataLoader worker) a lock another parent thread held stays held:
    give every cache a new one (the snapshots kept stay valid)."""
    for cache in list(_CACHES):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def key(
    table_id: str, segments: list[tuple[str, int]], version: int, branch: str | None,
    scope: Hashable,
) -> Hashable:  # fmt: skip
    """What determines a loaded snapshot: table, segments, version, commit branch, scope."""
    return (table_id, tuple(segments), version, branch, scope)


def _records(s: Snapshot) -> int:
    """The fragments and files ``s`` holds (what a kept copy costs)."""
    return len(s.fragments) + sum(len(files) for files in s.files_by_fragment.values())


def _copy(s: Snapshot, table: TableRecord) -> Snapshot:
    """``s`` of ``table`` with its own lists and maps (the records in them shared)."""
    return Snapshot(
        table,
        s.version,
        s.branch,
        list(s.segments),
        list(s.columns),
        list(s.batches),
        list(s.fragments),
        {fid: list(files) for fid, files in s.files_by_fragment.items()},
        s.scope,
        dict(s.deletions),
    )
