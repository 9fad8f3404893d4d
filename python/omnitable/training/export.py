"""Incremental, exactly-once exports of a table to Delta Lake (deltalake) and Iceberg (pyiceberg).

The first export writes the pinned snapshot. A later one compares the snapshot it exports with
the one the target holds (the version recorded in the target, below) fragment by fragment: a
fragment whose deletion vector or files changed, or that is gone, is *affected* — the target's
rows of it (its live row ids at the exported version) are deleted and its live rows now are
written again; fragments that are new are appended; unchanged fragments are not read. A schema
change (columns added, renamed, retyped, retired) rewrites the whole target. Data is streamed
one fragment at a time.

The exported version and table id are recorded in the target: Delta — the table's
configuration ``omnitable.table_id`` and, per commit, a transaction (app id
``omnitable:<table id>``, version) plus commit metadata ``omnitable.version``; Iceberg — the
table property ``omnitable.table_id`` and the snapshot summary property ``omnitable.version``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import ValidationError
from omnitable.format.fs import Location
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.names import ROW_ID

TABLE_ID_KEY = "omnitable.table_id"
TABLE_NAME_KEY = "omnitable.table"
VERSION_KEY = "omnitable.version"
BRANCH_KEY = "omnitable.branch"
MAX_ROW_DELETES = 200_000  # more affected rows than this: rewrite the target instead


@dataclass(frozen=True)
class ExportResult:
    """What an export did: ``mode`` is ``"full"`` (the whole snapshot written), ``"incremental"``
    or ``"unchanged"`` (the target already held ``version``); ``rows_written`` and
    ``rows_deleted`` count rows sent to and removed from the target."""

    target: str
    version: int
    previous: int | None
    mode: str
    rows_written: int
    rows_deleted: int


@dataclass(frozen=True)
class ChangePlan:
    """What to change in a target holding ``old`` to make it hold ``new``."""

    full: bool
    delete_ids: np.ndarray  # row ids to remove from the target (live in ``old``)
    write: list[FragmentRecord]  # fragments of ``new`` whose live rows to write


def export_schema(snap: Snapshot) -> pa.Schema:
    """The exported columns: system columns, then user columns (nullable)."""
    fields = list(snap.arrow_schema())
    return pa.schema([f if i < 2 else f.with_nullable(True) for i, f in enumerate(fields)])


def plan_changes(location: Location, old: Snapshot | None, new: Snapshot) -> ChangePlan:
    """The fragments to write and the row ids to delete to move a target from ``old`` to
    ``new`` (``old`` None, or a different schema: write everything)."""
    live = new.live_fragments(None)
    if old is None or export_schema(old) != export_schema(new):
        return ChangePlan(True, np.empty(0, np.int64), live)
    before = {f.fragment_id: f for f in old.live_fragments(None)}
    write: list[FragmentRecord] = []
    affected: list[FragmentRecord] = []
    for frag in live:
        prior = before.pop(frag.fragment_id, None)
        if prior is None:
            write.append(frag)
        elif _signature(old, frag.fragment_id) != _signature(new, frag.fragment_id):
            write.append(frag)
            affected.append(prior)
    affected.extend(before.values())  # gone (fully deleted, rolled back, compacted)
    if sum(old.live_rows(f) for f in affected) > MAX_ROW_DELETES:
        return ChangePlan(True, np.empty(0, np.int64), live)
    reader = FragmentReader(location, old)
    ids = [reader.read_fragment(f, [ROW_ID]).column(0).to_numpy() for f in affected]
    delete_ids = np.concatenate(ids) if ids else np.empty(0, np.int64)
    return ChangePlan(False, delete_ids.astype(np.int64), write)


def _signature(snap: Snapshot, fragment_id: str) -> tuple[str | None, frozenset[str]]:
    dv = snap.deletion(fragment_id)
    files = frozenset(f.file_id for f in snap.files_by_fragment.get(fragment_id, ()))
    return (None if dv is None else dv.vector_id, files)


def stream(
    location: Location, snap: Snapshot, fragments: list[FragmentRecord]
) -> tuple[pa.RecordBatchReader, list[int]]:
    """A reader of the live rows of ``fragments`` (one fragment in memory at a time) and a
    one-element list that counts the rows it has produced."""
    schema = export_schema(snap)
    reader = FragmentReader(location, snap)
    names = schema.names
    produced = [0]

    def batches() -> Iterator[pa.RecordBatch]:
        for frag in fragments:
            part = reader.read_fragment(frag, names).cast(schema)
            produced[0] += part.num_rows
            yield from part.to_batches()

    return pa.RecordBatchReader.from_batches(schema, batches()), produced


def check_version(previous: int | None, version: int, target: str, table: str) -> None:
    if previous is not None and previous > version:
        raise ValidationError(
            f"Cannot export version {version} of table '{table}' to {target}: the target "
            f"already holds the newer version {previous}; export version {previous} or later"
        )


def check_owner(found: str | None, table_id: str, target: str, table: str) -> None:
    if found != table_id:
        held = "a table not written by OmniTable" if found is None else f"table id {found}"
        raise ValidationError(
            f"Cannot export table '{table}' (id {table_id}) to {target}: the target already "
            f"holds {held}; export to a new path or name"
        )


def require(module: str) -> Any:
    """Import an optional dependency of the ``export`` extra, with the install hint."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"Cannot export: {module} is not installed; pip install 'omnitable[export]'"
        ) from exc


def local_target(path: object, table: str) -> str:
    """``path`` as a Delta table URI (local paths made absolute)."""
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValidationError(
            f"Cannot export table '{table}' to Delta: path must be a directory path or URI, "
            f"got {path!r}"
        )
    text = str(path)
    return text if "://" in text else str(Path(text).expanduser().resolve())
