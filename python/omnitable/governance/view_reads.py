"""``Table.read`` answered from a fresh hot column-group view (docs/governance.md "Hot
column-group views", "Reading").

The rule is the JVM's (``UseFreshColumnViews``): a read of every batch whose columns, and the
columns its filter names, a declared view covers is answered from the smallest such view (fewest
columns, then name) that is **fresh** for the snapshot read: its column ids still carry the
recorded names and the snapshot's per-batch fingerprints equal the recorded ones, so its files
hold exactly the snapshot's live rows of those columns. Only views whose refresh recorded their
data files are read (plain Parquet, no Delta needed), batch by batch in the snapshot's batch
order. Anything else, or files that cannot answer exactly (format/view_reader.py), leaves the
read to the table's files.

Freshness answers are kept per (snapshot, view record), as the JVM keeps them: a committed
snapshot's fragments never change (catalog/snapshot_cache.py), and a refresh records a new Delta
version, so a changed record is a different key.
"""

from __future__ import annotations

from collections.abc import Hashable

import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.snapshot import Snapshot, SnapshotScope, columns_named
from omnitable.catalog.views import ViewRecord, fingerprints
from omnitable.context import TableContext
from omnitable.format.reader import FragmentReader, ReadStats
from omnitable.format.view_reader import ViewFiles, read_view_files
from omnitable.governance.views import list_views, warehouse_key
from omnitable.settings import READ_VIEWS
from omnitable.vocabulary.lru import Lru
from omnitable.vocabulary.names import APPEND_NAME

RECORDS_MAX_AGE_S = 1.0
"""How old the view records a read goes by may be (read by this process, which wrote none
since): a view another process refreshes, declares or drops is seen within this time. An older
record is never wrong: its files hold exactly the rows of the snapshots it is fresh for."""


def read_from_view(
    ctx: TableContext,
    columns: list[str],
    where: pc.Expression | None,
    version: int | None,
    branch: str | None,
    tag: str | None,
) -> tuple[pa.Table, ReadStats, Snapshot] | None:
    """The rows ``Table.read(columns, where, version, branch=..., tag=...)`` of every batch
    returns, read from a fresh view that covers them (module docstring), what the read touched
    and the snapshot read; None when no view answers (the setting ``read.views`` off, none covers
    the read or is fresh for its snapshot, or its files cannot answer exactly). The rows come
    batch by batch in the snapshot's order, each batch's sorted by the view's sort column
    (governance/views.py ``_sort_column``)."""
    if not _names(columns) or (where is not None and not isinstance(where, pc.Expression)):
        return None  # the zip read reports what is wrong with them
    if not ctx.settings.resolve(READ_VIEWS):
        return None
    listed = list_views(ctx, max_age_s=RECORDS_MAX_AGE_S)
    views = [v for v in listed if v.files is not None and v.delta_version is not None]
    for rec in sorted(views, key=lambda v: (len(v.columns), v.name)):
        covered = {*rec.columns, APPEND_NAME}  # the view's files hold the batch name too
        if not set(columns) <= covered:
            continue
        scope = SnapshotScope(columns=frozenset(rec.columns), stats=False)
        snap = ctx.snapshot(version=version, branch=branch, tag=tag, scope=scope, reuse=True)
        filtered = [] if where is None else columns_named(str(where), snap.column_names())
        if not set(filtered) <= covered or not _fresh(rec, snap, warehouse_key(ctx)):
            continue
        reader = FragmentReader(ctx.location, snap)
        types = {name: reader.output_schema([name]).field(0).type for name in filtered}
        files = ViewFiles(rec.path, _in_batch_order(rec, snap))
        got = read_view_files(ctx.location, files, reader.output_schema(columns), where, types)
        if got is None:
            return None
        total = len(snap.live_fragments(None))
        stats = ReadStats(total, 0, got.files_opened, got.bytes_read, view=rec.name)
        return got.table, stats, snap
    return None


def _names(columns: object) -> bool:
    """Whether ``columns`` is a non-empty list of distinct names (else the zip read checks it)."""
    return (
        isinstance(columns, list)
        and bool(columns)
        and all(isinstance(c, str) for c in columns)
        and len(set(columns)) == len(columns)
    )


def _in_batch_order(rec: ViewRecord, snap: Snapshot) -> tuple[tuple[str, int], ...]:
    """The view's recorded files ordered by their batch's position in ``snap`` (a file's first
    path segment is its partition, ``_view_batch_=<batch id>``), then by path."""
    position = {b.batch_id: i for i, b in enumerate(snap.batches)}

    def where(file: tuple[str, int]) -> tuple[int, str]:
        batch = file[0].split("/", 1)[0].partition("=")[2]
        return position.get(batch, len(position)), file[0]

    return tuple(sorted(rec.files or (), key=where))


def _fresh(rec: ViewRecord, snap: Snapshot, warehouse: str) -> bool:
    """Whether ``rec``'s files hold exactly ``snap``'s live rows of its columns (remembered per
    snapshot of ``warehouse`` and record, module docstring: segments decide a snapshot within
    one catalog only, and copies of a warehouse share table ids)."""
    ids = {c.name: c.column_id for c in snap.columns}
    if any(ids.get(name) != cid for name, cid in rec.column_ids.items()):
        return False
    key: Hashable = (warehouse, snap.table.table_id, tuple(snap.segments), snap.version,
                     snap.branch, snap.scope, rec.path, rec.delta_version,
                     frozenset(rec.batches.items()))  # fmt: skip
    found, answer = _FRESH.get(key)
    if not found:
        answer = fingerprints(snap, set(rec.column_ids.values())) == rec.batches
        _FRESH.put(key, answer)
    return bool(answer)


_FRESH: Lru[bool] = Lru(256)  # freshness answers kept
