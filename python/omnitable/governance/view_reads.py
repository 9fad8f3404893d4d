"""``Table.read`` answered from a fresh hot column-group view (docs/governance.md "Hot
column-group views", "Reading").

The rule is the JVM's (``UseFreshColumnViews``): a read of every batch whose columns, and the
columns its filter names, a declared view covers is answered from the smallest such view (fewest
columns, then name) that is **fresh** for the snapshot read: its column ids still carry the
recorded names and the snapshot's per-batch fingerprints equal the recorded ones, so its files
hold exactly the snapshot's live rows of those columns. Only views whose refresh recorded their
data files are read (plain Parquet, no Delta needed). Anything else, or files that cannot answer
exactly (format/view_reader.py), leaves the read to the table's files.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.catalog.views import ViewRecord, fingerprints
from omnitable.context import TableContext
from omnitable.format.reader import FragmentReader, ReadStats
from omnitable.format.view_reader import ViewFiles, read_view_files
from omnitable.governance.views import list_views
from omnitable.settings import READ_VIEWS
from omnitable.vocabulary.names import APPEND_NAME

_TOKEN = re.compile(r"[^\s()<>=!,&|~\"'\[\]]+")


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
    and the snapshot read; None when no view answers (the setting ``read.views`` off, none covers the read or
    is fresh for its snapshot, or its files cannot answer exactly). The rows come in the view's
    order: per batch, sorted by the view's first declared column."""
    if not _names(columns) or (where is not None and not isinstance(where, pc.Expression)):
        return None  # the zip read reports what is wrong with them
    if not ctx.settings.resolve(READ_VIEWS):
        return None
    tokens = set() if where is None else set(_TOKEN.findall(str(where)))
    views = [v for v in list_views(ctx) if v.files is not None and v.delta_version is not None]
    for rec in sorted(views, key=lambda v: (len(v.columns), v.name)):
        if not set(columns) <= {*rec.columns, APPEND_NAME}:  # its files hold the batch name
            continue
        scope = SnapshotScope(columns=frozenset(rec.columns), stats=False)
        snap = ctx.snapshot(version=version, branch=branch, tag=tag, scope=scope, reuse=True)
        filtered = sorted(tokens & set(snap.column_names()))
        if not set(filtered) <= {*rec.columns, APPEND_NAME} or not _fresh(rec, snap):
            continue
        reader = FragmentReader(ctx.location, snap)
        types = {name: reader.output_schema([name]).field(0).type for name in filtered}
        assert rec.files is not None
        got = read_view_files(ctx.location, ViewFiles(rec.path, rec.files),
                              reader.output_schema(columns), where, types)  # fmt: skip
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


def _fresh(rec: ViewRecord, snap: Snapshot) -> bool:
    """Whether ``rec``'s files hold exactly ``snap``'s live rows of its columns."""
    ids = {c.name: c.column_id for c in snap.columns}
    if any(ids.get(name) != cid for name, cid in rec.column_ids.items()):
        return False
    return fingerprints(snap, set(rec.column_ids.values())) == rec.batches
