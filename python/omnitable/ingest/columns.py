"""``Table.add_columns``: attach new columns to existing rows by ``_ai_unique_id_``.

Only new column files are written (one per fragment holding at least one of the given ids);
rows a fragment has but the input lacks read as NULL. Nothing existing is rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, NewColumn
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.exceptions import AlreadyExistsError, CommitOutcomeUnknown, ValidationError
from omnitable.format.fs import delete_quietly
from omnitable.format.reader import FragmentReader
from omnitable.format.writer import write_column_file
from omnitable.ingest.local import duplicate_ids
from omnitable.ingest.sources import is_spark_dataframe, record_batches
from omnitable.vocabulary.descriptors import FileDescriptor
from omnitable.vocabulary.names import APPEND_NAME, ROW_ID, check_column_name, check_group_name
from omnitable.vocabulary.types import canonical_arrow_type, to_ddl

_IDS = SnapshotScope(columns=frozenset({ROW_ID}))

if TYPE_CHECKING:
    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext


@dataclass(frozen=True)
class NewValues:
    """The validated input of one ``add_columns``: the new columns (cast to their canonical
    types) and the ids they belong to."""

    names: list[str]
    types: dict[str, pa.DataType]
    values: pa.Table
    ids: np.ndarray


def add_columns(ctx: TableContext, data: Any, group: str | None) -> int:
    """Attach the columns of ``data`` (keyed by ``ROW_ID``) as a new group; returns the version
    (see ``Table.add_columns``). Files written before a failure are deleted."""
    snap = ctx.snapshot(scope=_IDS)  # the id files only: new files align to them
    new = _new_values(ctx, snap, data)
    group = group if group is not None else _default_group(snap, new.names[0])
    check_group_name(group)
    if group in {c.group_name for c in snap.columns}:
        raise ValidationError(
            f"Cannot add columns to group '{group}' of table '{ctx.name}': the group already "
            "holds columns, and adding to it would mean rewriting its files; choose a new group "
            "name (governance can merge groups later)"
        )
    written: list[str] = []
    try:
        files, matched = _write_aligned(ctx, snap, new, group, written)
        if matched != len(new.ids):
            reader = FragmentReader(ctx.location, snap)
            unknown = np.setdiff1d(new.ids, _all_ids(reader, snap))[:5]
            raise ValidationError(
                f"Cannot add columns to table '{ctx.name}': {len(new.ids) - matched} "
                f"{ROW_ID} value(s) match no row, e.g. {[int(x) for x in unknown]}"
            )
        req = CommitRequest(
            op="add_columns",
            base_version=snap.version,
            summary={"columns": new.names, "group": group, "rows": matched, "files": len(files)},
            new_columns=[NewColumn(n, to_ddl(new.types[n]), True, group) for n in new.names],
            new_files=files,
        )
        failpoint("add_columns.before_commit")
        return ctx.commit(req)
    except BaseException as exc:
        if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
            delete_quietly(ctx.location.fs, written)
        raise


def rows_by_id(data: Any, what: str) -> tuple[pa.Table, np.ndarray]:
    """``data`` (Arrow, pandas or Spark) as a table, and its ``ROW_ID`` values (int64), checked:
    present, no nulls, no duplicates. ``what`` starts the error messages ("add columns to
    table 't'").

    Raises:
        ValidationError: no id column, null or duplicate ids.
    """
    if is_spark_dataframe(data):
        data = data.toArrow()
    batches = list(record_batches(data))
    if batches:
        incoming: pa.Table | None = pa.Table.from_batches(batches)
    else:  # an empty Arrow table has no batches but still its columns (a schema-only add)
        incoming = data if isinstance(data, pa.Table) else None
    if incoming is None or ROW_ID not in incoming.column_names:
        raise ValidationError(
            f"Cannot {what}: the data needs a {ROW_ID} column saying which row each value "
            "belongs to"
        )
    ids = incoming.column(ROW_ID)
    if ids.null_count:
        raise ValidationError(f"Cannot {what}: {ids.null_count} row(s) have a null {ROW_ID}")
    ids_np = ids.cast(pa.int64()).to_numpy()
    dupes = duplicate_ids(ids_np)
    if dupes:
        raise ValidationError(f"Cannot {what}: duplicate {ROW_ID} values, e.g. {dupes}")
    return incoming, ids_np


def _new_values(ctx: TableContext, snap: Snapshot, data: Any) -> NewValues:
    """``data`` checked: an id column without nulls or duplicates, new valid column names."""
    incoming, ids_np = rows_by_id(data, f"add columns to table '{ctx.name}'")
    names = [c for c in incoming.column_names if c != ROW_ID]
    if not names:
        raise ValidationError(f"Cannot add columns to table '{ctx.name}': no new column given")
    for name in names:
        if name == APPEND_NAME:
            raise ValidationError(f"Cannot add column {APPEND_NAME}: it is a system column")
        check_column_name(name)
        if snap.has_column(name):
            raise AlreadyExistsError(
                f"Cannot add column '{name}' to table '{ctx.name}': it already exists "
                "(recompute existing columns with a feature backfill)"
            )
    types = {n: canonical_arrow_type(incoming.column(n).type, n) for n in names}
    values = pa.Table.from_arrays([incoming.column(n).cast(types[n]) for n in names], names=names)
    return NewValues(names, types, values, ids_np)


def _write_aligned(
    ctx: TableContext, snap: Snapshot, new: NewValues, group: str, written: list[str]
) -> tuple[list[FileDescriptor], int]:
    """One column file per fragment holding some of the ids, rows aligned to the fragment's
    (NULL where the input has no value); returns the files and how many ids matched. Every
    file written is recorded in ``written`` as it is written."""
    lo, hi = (int(new.ids.min()), int(new.ids.max())) if len(new.ids) else (0, -1)
    location = ctx.location
    reader = FragmentReader(location, snap)
    row_id = snap.column(ROW_ID)
    id_set = pa.array(new.ids)
    options = ctx.options()
    files: list[FileDescriptor] = []
    matched = 0
    for frag in snap.fragments:
        provider = snap.resolve(frag.fragment_id, [row_id.column_id])[row_id.column_id]
        if provider is None or frag.row_count == 0:
            continue
        if not provider.stats(row_id.column_id).may_overlap(lo, hi):
            continue
        positions = pc.index_in(  # every row, deleted ones too: the file aligns by offset
            reader.read_all_rows(frag, [ROW_ID]).column(ROW_ID), value_set=id_set
        )
        hits = len(positions) - positions.null_count
        if hits == 0:
            continue
        matched += hits
        desc = write_column_file(location, frag.fragment_id, frag.path, group,
                                 new.values.take(positions), {}, options)  # fmt: skip
        written.append(location.child_path(desc.path))
        files.append(desc)
    return files, matched


def _default_group(snap: Any, first: str) -> str:
    used = {c.group_name for c in snap.columns}
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", first)[:56] or "cols"
    name, i = base, 2
    while name in used:
        name, i = f"{base}-{i}", i + 1
    return name


def _all_ids(reader: FragmentReader, snap: Any) -> np.ndarray:
    parts = [reader.read_fragment(f, [ROW_ID]).column(ROW_ID).to_numpy() for f in snap.fragments]
    return np.concatenate(parts) if parts else np.array([], np.int64)
