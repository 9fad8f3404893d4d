"""``Table.update``: new values for some columns of some rows, keyed by ``_ai_unique_id_``.

Strategy: **rewritten column files.** For every fragment holding an updated row and every column
group among the updated columns, one new file carrying exactly the updated columns of that group
for every row of the fragment: the current values, and the given ones at the updated offsets. The
new file provides those columns from the commit on (the newest file wins, docs/catalog.md); the
group's other columns keep coming from their files, so an update writes only the updated
columns of the touched fragments, never another column's data. Updating a feature's output
records lineage (engine ``update``) and makes the features reading it stale (their input
changed). Concurrent writes of the same (fragment, column) conflict at commit.
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, LineageEntry
from omnitable.catalog.records import ColumnRecord, FragmentRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import CommitOutcomeUnknown, NotFoundError, ValidationError
from omnitable.format.fs import delete_quietly
from omnitable.format.reader import FragmentReader
from omnitable.format.writer import write_column_file
from omnitable.ingest.columns import rows_by_id
from omnitable.vocabulary.descriptors import FileDescriptor
from omnitable.vocabulary.keys import table_key
from omnitable.vocabulary.names import ROW_ID, SYSTEM_COLUMNS
from omnitable.vocabulary.types import ARROW_VALUE_ERRORS


@dataclass(frozen=True)
class UpdateResult:
    """What an update did: the new version, rows updated, fragments touched, files written and
    their bytes."""

    version: int
    rows: int
    fragments: int
    files: int
    bytes_written: int


@dataclass(frozen=True)
class _Values:
    columns: list[ColumnRecord]
    ids: pa.Array  # int64, no nulls, no duplicates
    values: pa.Table  # one column per updated column, cast to its type


def update_rows(
    ctx: TableContext, data: Any, columns: list[str] | None, *, why: str | None = None
) -> UpdateResult:
    """Set ``columns`` (None: every column of ``data`` but the id) of the rows ``data`` names.

    Raises:
        ValidationError: no id column, no rows, null or duplicate ids, system or unconvertible
            columns.
        UnknownColumnError: a column the table does not have (or has retired).
        NotFoundError: ids that are not live rows (nothing is committed).
        CommitConflict: a concurrent commit wrote one of the same (fragment, column) cells.
    """
    scope = SnapshotScope(columns=frozenset([ROW_ID, *(columns or [])]), stats=True)
    snap = ctx.snapshot(scope=scope)
    new = _values(ctx, snap, data, columns)
    if columns is None:  # the scope did not know the columns yet: load their files too
        names = [c.name for c in new.columns]
        snap = ctx.snapshot(scope=SnapshotScope(columns=frozenset([ROW_ID, *names]), stats=True))
    written: list[str] = []
    try:
        files, lineage, hits = _write(ctx, snap, new, written)
        if hits != len(new.ids):
            raise NotFoundError(
                f"Cannot update table '{ctx.name}': {len(new.ids) - hits} of the "
                f"{len(new.ids)} {ROW_ID} values are not live rows (never written, or deleted); "
                "nothing was updated"
            )
        summary = {"columns": [c.name for c in new.columns], "rows": hits,
                   "fragments": len({f.fragment_id for f in files}), "files": len(files),
                   "user": getpass.getuser(), **({"why": why} if why is not None else {})}  # fmt: skip
        req = CommitRequest(
            op="update", base_version=snap.version, summary=summary, new_files=files,
            lineage=lineage,
        )  # fmt: skip
        failpoint("update.before_commit")
        version = ctx.commit(req)
    except BaseException as exc:
        if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
            delete_quietly(ctx.location.fs, written)
        raise
    size = sum(f.size_bytes for f in files)
    return UpdateResult(version, hits, len({f.fragment_id for f in files}), len(files), size)


def _values(ctx: TableContext, snap: Snapshot, data: Any, columns: list[str] | None) -> _Values:
    incoming, ids = rows_by_id(data, f"update table '{ctx.name}'")
    names = [c for c in incoming.column_names if c != ROW_ID] if columns is None else columns
    if isinstance(names, str) or not names:
        raise ValidationError(
            f"Cannot update table '{ctx.name}': give the columns to update (a list of names), "
            "found none"
        )
    missing = [n for n in names if n not in incoming.column_names]
    if missing:
        raise ValidationError(f"Cannot update table '{ctx.name}': data has no column(s) {missing}")
    if len(ids) == 0:
        raise ValidationError(
            f"Cannot update table '{ctx.name}': data has no rows; give at least one row to update"
        )
    records = []
    for name in names:
        if name in SYSTEM_COLUMNS:
            raise ValidationError(f"Cannot update {name} of table '{ctx.name}': a system column")
        if name in (table_key(ctx.record.properties) or []):
            raise ValidationError(
                f"Cannot update key column '{name}' of table '{ctx.name}': a row's key never "
                "changes; delete the row and upsert it under its new key"
            )
        records.append(snap.column(name))  # UnknownColumnError for unknown or retired ones
    return _Values(
        records, pa.array(ids), pa.table({c.name: _cast(ctx, incoming, c) for c in records})
    )


def _cast(ctx: TableContext, incoming: pa.Table, col: ColumnRecord) -> pa.Array:
    try:
        return incoming.column(col.name).cast(col.arrow_type).combine_chunks()
    except ARROW_VALUE_ERRORS as exc:
        raise ValidationError(
            f"Cannot update column '{col.name}' ({col.data_type}) of table '{ctx.name}': the "
            f"given values ({incoming.column(col.name).type}) do not convert: {exc}"
        ) from exc


def _write(
    ctx: TableContext, snap: Snapshot, new: _Values, written: list[str]
) -> tuple[list[FileDescriptor], list[LineageEntry], int]:
    """The new files (and lineage of feature outputs) of every touched fragment; how many
    given ids were found among live rows."""
    reader = FragmentReader(ctx.location, snap)
    rid = snap.column(ROW_ID).column_id
    lo, hi = int(pc.min(new.ids).as_py()), int(pc.max(new.ids).as_py())
    files: list[FileDescriptor] = []
    lineage: list[LineageEntry] = []
    hits = 0
    for frag in snap.live_fragments(None):
        provider = snap.resolve(frag.fragment_id, [rid])[rid]
        if provider is None or not provider.stats(rid).may_overlap(lo, hi):
            continue
        index = _index(snap, reader, frag, new.ids)
        if index is None:
            continue
        hits += int((index >= 0).sum())
        for group in dict.fromkeys(c.group_name for c in new.columns):
            cols = [c for c in new.columns if c.group_name == group]
            desc = _rewrite(ctx, snap, reader, frag, cols, new, index)
            written.append(ctx.location.child_path(desc.path))
            files.append(desc)
            lineage += rewrite_lineage(desc, cols, "update")
    return files, lineage, hits


def rewrite_lineage(desc: FileDescriptor, cols: list[ColumnRecord], op: str) -> list[LineageEntry]:
    """Lineage of a rewritten file's feature outputs (engine ``op``: their values were set, not
    computed, so the features reading them become stale)."""
    return [
        LineageEntry(desc.file_id, c.name, c.feature, desc.feature_versions.get(c.name, ""), [], op)
        for c in cols
        if c.feature is not None
    ]


def _index(
    snap: Snapshot, reader: FragmentReader, frag: FragmentRecord, ids: pa.Array
) -> np.ndarray | None:
    """Per row of the fragment, the index of its new values in ``ids`` (-1: not updated; a
    deleted row is never updated); None when no row is."""
    frag_ids = reader.read_all_rows(frag, [ROW_ID]).column(ROW_ID)
    where = pc.index_in(frag_ids, value_set=ids).to_numpy(zero_copy_only=False)
    index = np.where(np.isnan(where), -1, where).astype(np.int64)
    dv = snap.deletion(frag.fragment_id)
    if dv is not None:
        index[dv.mask()] = -1
    return index if (index >= 0).any() else None


def _rewrite(
    ctx: TableContext,
    snap: Snapshot,
    reader: FragmentReader,
    frag: FragmentRecord,
    cols: list[ColumnRecord],
    new: _Values,
    index: np.ndarray,
) -> FileDescriptor:
    """One file of ``cols`` for every row of ``frag``: current values, new ones where
    ``index`` points into ``new``."""
    current = reader.read_all_rows(frag, [c.name for c in cols])
    return rewrite_file(ctx, snap, frag, cols, patched(current, new.values, index))


def patched(current: pa.Table, values: pa.Table, index: np.ndarray) -> pa.Table:
    """``current``'s columns (every row of a fragment) with row ``i`` replaced by row
    ``index[i]`` of ``values`` wherever ``index[i] >= 0``."""
    changed = pa.array(index >= 0)
    take = pa.array(np.maximum(index, 0))
    return pa.table(
        {
            name: pc.if_else(
                changed, values.column(name).take(take), current.column(name).combine_chunks()
            )
            for name in current.column_names
        }
    )


def rewrite_file(
    ctx: TableContext, snap: Snapshot, frag: FragmentRecord, cols: list[ColumnRecord],
    table: pa.Table,
) -> FileDescriptor:  # fmt: skip
    """Write ``table`` (every row of ``frag``, the columns ``cols`` of one group) as the new
    file providing those columns; feature outputs keep the feature version they had."""
    providers = snap.resolve(frag.fragment_id, [c.column_id for c in cols])
    versions = {}
    for c in cols:
        p = providers[c.column_id]
        version = p.columns[c.column_id].feature_version if p is not None else None
        if c.feature is not None and version is not None:
            versions[c.name] = version
    desc = write_column_file(
        ctx.location, frag.fragment_id, frag.path, cols[0].group_name, table,
        {c.name: c.physical_name for c in cols}, ctx.options(), versions,
    )  # fmt: skip
    desc.column_ids = {c.name: c.column_id for c in cols}
    return desc
