"""Hot column-group views: their records and fingerprints (docs/governance.md "Hot column-group
views").

A view materializes a few columns of a table (``_ai_unique_id_`` always among them) as a Delta
table under the table location (``views/<name>-<token>``), one partition per batch
(``_view_batch_`` = the batch id). Its record lives in the existing ``omnitable_meta`` table
under the key ``views:<table_id>`` (the catalog schema is not changed for it): a JSON object
``{name: {"columns": [...], "column_ids": {name: id}, "path": ..., "delta_version": v | null,
"batches": {batch_id: fingerprint}, "refreshed_version": v | null, "branch": b | null,
"files": [[relative path, size], ...] | null, "schema": spark schema json | null}}``.

``files`` and ``schema`` describe the Delta version's data files (paths relative to the view's
directory, in bytes) and its columns (without ``_view_batch_``), as recorded by the refresh: the
JVM rule reads those Parquet files directly, skipping Delta's snapshot and file listing per
query. They are null when the refresh could not record them (a Delta table with column mapping
or deletion vectors enabled, a record written before they existed): readers then read the Delta
table at ``delta_version``.

A batch's **fingerprint** (:func:`fingerprints`) names exactly what the view's rows of that batch
came from: the batch id and, per fragment (by id), its deletion vector id and the ids of its
visible files that carry a view column. A new, replaced or compacted batch, a delete, an update
or a backfill of a covered column changes it; writes to other columns do not. The JVM rule
(``UseFreshColumnViews``) computes the same text and hash from its own listing, so a view is
**fresh** for a snapshot exactly when the snapshot's fingerprints equal the recorded ones (same
batches, same hashes) and its column ids still carry the recorded names; readers then read the
Delta table at ``delta_version``, the version the fingerprints were recorded with.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import ValidationError
from omnitable.vocabulary.names import ROW_ID

BATCH_COLUMN = "_view_batch_"
"""The Delta partition column of a view: the batch id its rows came from."""


@dataclass(frozen=True)
class ViewRecord:
    """One declared view. ``delta_version``: the Delta version holding exactly ``batches`` (None:
    never refreshed); ``batches``: batch id -> fingerprint of what that version's rows came
    from; ``files``, ``schema``: that version's data files (relative path, bytes) and Spark
    schema (JSON, without ``_view_batch_``), None when not recorded (module docstring)."""

    name: str
    columns: tuple[str, ...]
    column_ids: dict[str, int]
    path: str
    delta_version: int | None = None
    batches: dict[str, str] = field(default_factory=dict)
    refreshed_version: int | None = None
    branch: str | None = None
    files: tuple[tuple[str, int], ...] | None = None
    schema: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "column_ids": dict(self.column_ids),
            "path": self.path,
            "delta_version": self.delta_version,
            "batches": dict(sorted(self.batches.items())),
            "refreshed_version": self.refreshed_version,
            "branch": self.branch,
            "files": None if self.files is None else [[p, n] for p, n in self.files],
            "schema": self.schema,
        }

    @classmethod
    def from_doc(cls, name: str, doc: dict[str, Any]) -> ViewRecord:
        dv = doc.get("delta_version")
        rv = doc.get("refreshed_version")
        files = doc.get("files")
        return cls(
            name,
            tuple(str(c) for c in doc["columns"]),
            {str(k): int(v) for k, v in doc["column_ids"].items()},
            str(doc["path"]),
            None if dv is None else int(dv),
            {str(k): str(v) for k, v in doc.get("batches", {}).items()},
            None if rv is None else int(rv),
            doc.get("branch"),
            None if files is None else tuple((str(p), int(n)) for p, n in files),
            doc.get("schema"),
        )

    def refreshed(
        self,
        delta_version: int,
        fps: dict[str, str],
        version: int,
        branch: str,
        files: tuple[tuple[str, int], ...] | None = None,
        schema: str | None = None,
    ) -> ViewRecord:
        """This view as recorded by a refresh to ``delta_version`` (``files``, ``schema``: that
        version's data files and columns, or None when not recorded)."""
        return replace(
            self, delta_version=delta_version, batches=dict(fps), refreshed_version=version,
            branch=branch, files=files, schema=schema,
        )  # fmt: skip


def meta_key(table_id: str) -> str:
    return f"views:{table_id}"


def read_views(conn: Connection, table_id: str) -> dict[str, ViewRecord]:
    """Every declared view of the table, by name."""
    raw = conn.execute(
        text("SELECT value FROM omnitable_meta WHERE key = :k"), {"k": meta_key(table_id)}
    ).scalar()
    if raw is None:
        return {}
    return {name: ViewRecord.from_doc(name, doc) for name, doc in json.loads(raw).items()}


def write_views(conn: Connection, table_id: str, views: dict[str, ViewRecord]) -> None:
    """Replace the table's view records (in the caller's transaction); records this process
    read before are then stale (:func:`records_written`; callers note it again once their
    transaction has committed)."""
    note_records_written()
    key = meta_key(table_id)
    conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": key})
    if not views:
        return
    doc = {name: v.to_doc() for name, v in sorted(views.items())}
    conn.execute(
        text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
        {"k": key, "v": json.dumps(doc, sort_keys=True)},
    )


_WRITTEN = 0
_WRITTEN_LOCK = threading.Lock()


def note_records_written() -> None:
    """Count a write of view records by this process (as it is made and once it committed)."""
    global _WRITTEN
    with _WRITTEN_LOCK:
        _WRITTEN += 1


def _after_fork_in_child() -> None:
    global _WRITTEN_LOCK
    _WRITTEN_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def records_written() -> int:
    """How many writes of view records this process has counted: records read while it changed,
    or cached when it was lower, may be stale."""
    return _WRITTEN


def view_columns(
    snap: Snapshot, name: str, columns: list[str]
) -> tuple[tuple[str, ...], dict[str, int]]:
    """The view's columns (``_ai_unique_id_`` first, then ``columns`` in order, no repeats) and
    their column ids in ``snap``.

    Raises:
        ValidationError: no column given, or a name that is not a column of the snapshot.
    """
    if isinstance(columns, str) or not columns:
        raise ValidationError(f"Cannot create view '{name}': give a non-empty list of column names")
    names = [ROW_ID] + [c for c in dict.fromkeys(columns) if c != ROW_ID]
    known = {c.name: c.column_id for c in snap.columns}
    missing = [c for c in names if c not in known]
    if missing:
        raise ValidationError(
            f"Cannot create view '{name}': unknown column(s) {', '.join(missing)}; the table "
            f"has {', '.join(snap.column_names())}"
        )
    return tuple(names), {c: known[c] for c in names}


def fingerprint_text(batch_id: str, fragments: list[tuple[str, str, list[str]]]) -> str:
    """The canonical text of a batch: ``batch_id`` then one line per fragment
    ``fragment_id|vector_id|file_id,file_id`` (fragments by id, file ids sorted; ``-`` for no
    vector). The JVM builds the same text (``ColumnViews.fingerprint``)."""
    lines = [batch_id]
    for frag, vector, files in sorted(fragments):
        lines.append(f"{frag}|{vector}|{','.join(sorted(files))}")
    return "\n".join(lines)


def fingerprints(snap: Snapshot, column_ids: set[int]) -> dict[str, str]:
    """Batch id -> SHA-256 (hex) of :func:`fingerprint_text`, for every batch with a visible
    fragment in ``snap`` (loaded with the files of the view's columns)."""
    per_batch: dict[str, list[tuple[str, str, list[str]]]] = defaultdict(list)
    for frag in snap.fragments:
        dv = snap.deletion(frag.fragment_id)
        files = [
            f.file_id
            for f in snap.files_by_fragment.get(frag.fragment_id, ())
            if column_ids & f.columns.keys()
        ]
        per_batch[frag.batch_id].append(
            (frag.fragment_id, "-" if dv is None else dv.vector_id, files)
        )
    return {
        b: hashlib.sha256(fingerprint_text(b, frags).encode()).hexdigest()
        for b, frags in per_batch.items()
    }
