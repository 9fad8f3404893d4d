"""Resolving a snapshot: ref or version → segments → visible columns, batches, fragments, files.

Implements docs/catalog.md "Resolving a snapshot" (the JVM reader implements the same rules).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, text

from omnitable.catalog.records import (
    BatchRecord,
    ColumnRecord,
    FileColumn,
    FileRecord,
    FragmentRecord,
    TableRecord,
)
from omnitable.exceptions import NotFoundError, UnknownColumnError, ValidationError
from omnitable.vocabulary.names import APPEND_NAME, MAIN, ROW_ID
from omnitable.vocabulary.stats import ColumnStats

Segment = tuple[str, int]


def segments_for(
    conn: Connection,
    table: TableRecord,
    *,
    branch: str | None = None,
    tag: str | None = None,
    version: int | None = None,
) -> tuple[list[Segment], int, str | None]:
    """Segments of a snapshot named by a branch, a tag or a version (at most one of branch/tag).

    Returns:
        ``(segments, version, branch)``: ``branch`` is the branch a new commit on this snapshot
        would go to (None for tags and for versions behind a branch head).

    Raises:
        NotFoundError: unknown ref or version, or a version not in the branch's history.
    """
    if branch is not None and tag is not None:
        raise ValidationError("Cannot resolve snapshot: give a branch or a tag, not both")
    if tag is not None:
        ref = _ref(conn, table, tag)
        if ref is None or ref.kind != "tag":
            raise NotFoundError(f"Cannot find tag '{tag}' of table '{table.name}'")
        if version is not None:
            raise ValidationError("Cannot resolve snapshot: a tag already pins a version")
        return (
            _branch_segments(conn, table, ref.parent_branch, int(ref.version)),
            int(ref.version),
            None,
        )
    if version is not None:
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValidationError(f"Cannot resolve version {version!r}: versions are integers >= 0")
        row = conn.execute(
            text("SELECT branch FROM commits WHERE table_id = :t AND version = :v"),
            {"t": table.table_id, "v": version},
        ).first()
        if row is None:
            raise NotFoundError(
                f"Cannot find version {version} of table '{table.name}'; see Table.history()"
            )
        segs = _branch_segments(conn, table, row.branch, version)
        if branch is not None:
            head_segs = _branch_segments(conn, table, branch, _head(conn, table, branch))
            if not _covers(head_segs, row.branch, version):
                raise NotFoundError(
                    f"Cannot find version {version} in the history of branch '{branch}'"
                )
        return segs, version, None
    name = branch or MAIN
    head = _head(conn, table, name)
    return _branch_segments(conn, table, name, head), head, name


def _covers(segs: list[Segment], branch: str, version: int) -> bool:
    return any(b == branch and version <= u for b, u in segs)


def _ref(conn: Connection, table: TableRecord, name: str) -> Any:
    return conn.execute(
        text(
            "SELECT kind, version, parent_branch, fork_version FROM refs "
            "WHERE table_id = :t AND name = :n"
        ),
        {"t": table.table_id, "n": name},
    ).first()


def _head(conn: Connection, table: TableRecord, branch: str) -> int:
    ref = _ref(conn, table, branch)
    if ref is None or ref.kind != "branch":
        raise NotFoundError(f"Cannot find branch '{branch}' of table '{table.name}'")
    return int(ref.version)


def _branch_segments(conn: Connection, table: TableRecord, branch: str, upto: int) -> list[Segment]:
    out: list[Segment] = []
    seen = set()
    current: str | None = branch
    while current is not None:
        if current in seen:  # pragma: no cover - refs are written by us, never cyclic
            raise ValidationError(f"Cannot resolve branch '{branch}': cyclic parents")
        seen.add(current)
        ref = _ref(conn, table, current)
        if ref is None or ref.kind != "branch":
            raise NotFoundError(f"Cannot find branch '{current}' of table '{table.name}'")
        out.append((current, upto))
        current = ref.parent_branch
        upto = int(ref.fork_version) if ref.fork_version is not None else upto
    return out


def visible_clause(alias: str, segments: list[Segment], params: dict[str, Any]) -> str:
    """SQL condition selecting the rows of ``alias`` visible in ``segments`` (adds params)."""
    parts = []
    for i, (branch, upto) in enumerate(segments):
        b, u = f"seg_b{i}", f"seg_u{i}"
        params[b], params[u] = branch, upto
        parts.append(
            f"({alias}.branch = :{b} AND {alias}.added_version <= :{u} AND "
            f"({alias}.removed_version IS NULL OR {alias}.removed_version > :{u}))"
        )
    return "(" + " OR ".join(parts) + ")"


@dataclass
class Snapshot:
    """Everything a reader or writer needs to know about one version of a table."""

    table: TableRecord
    version: int
    branch: str | None
    segments: list[Segment]
    columns: list[ColumnRecord]
    batches: list[BatchRecord]
    fragments: list[FragmentRecord]
    files_by_fragment: dict[str, list[FileRecord]] = field(default_factory=dict)

    # -- schema ---------------------------------------------------------------------------

    @property
    def user_columns(self) -> list[ColumnRecord]:
        return [c for c in self.columns if c.name != ROW_ID]

    def column(self, name: str) -> ColumnRecord:
        for c in self.columns:
            if c.name == name:
                return c
        raise UnknownColumnError(
            f"Cannot find column '{name}' in table '{self.table.name}'; columns are: "
            + ", ".join(self.column_names())
        )

    def has_column(self, name: str) -> bool:
        return name == APPEND_NAME or any(c.name == name for c in self.columns)

    def column_names(self) -> list[str]:
        return [ROW_ID, APPEND_NAME] + [c.name for c in self.user_columns]

    def arrow_schema(self) -> pa.Schema:
        """Logical schema: system columns first, then user columns in position order."""
        fields = [
            pa.field(ROW_ID, pa.int64(), nullable=False),
            pa.field(APPEND_NAME, pa.string(), nullable=False),
        ]
        fields += [pa.field(c.name, c.arrow_type, nullable=c.nullable) for c in self.user_columns]
        return pa.schema(fields)

    # -- physical resolution ------------------------------------------------------------------

    def resolve(self, fragment_id: str, column_ids: list[int]) -> dict[int, FileRecord | None]:
        """For each column id, the visible file of the fragment that provides it (or None)."""
        files = self.files_by_fragment.get(fragment_id, [])
        out: dict[int, FileRecord | None] = {}
        for cid in column_ids:
            best: FileRecord | None = None
            for f in files:
                if cid in f.columns and (best is None or f.added_version > best.added_version):
                    best = f
            out[cid] = best
        return out

    def fragments_of(self, batch_names: list[str] | None) -> list[FragmentRecord]:
        if batch_names is None:
            return list(self.fragments)
        known = {b.name for b in self.batches}
        missing = [b for b in batch_names if b not in known]
        if missing:
            raise NotFoundError(
                f"Cannot find batch(es) {', '.join(repr(m) for m in missing)} in table "
                f"'{self.table.name}' at version {self.version}; see Table.batches()"
            )
        wanted = set(batch_names)
        return [f for f in self.fragments if f.batch_name in wanted]


def load_snapshot(
    conn: Connection,
    table: TableRecord,
    *,
    branch: str | None = None,
    tag: str | None = None,
    version: int | None = None,
    with_files: bool = True,
) -> Snapshot:
    """Read one snapshot of ``table`` from the catalog (inside one read transaction)."""
    segments, resolved_version, commit_branch = segments_for(
        conn, table, branch=branch, tag=tag, version=version
    )
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("c", segments, params)
    columns = [
        ColumnRecord(
            r.column_id,
            r.name,
            r.physical_name,
            r.data_type,
            bool(r.nullable),
            r.position,
            r.state,
            r.group_name,
            r.feature,
            int(r.added_version),
        )
        for r in conn.execute(
            text(
                f"SELECT * FROM columns c WHERE c.table_id = :t AND {where} "
                "AND c.state <> 'dropped' ORDER BY c.position"
            ),
            params,
        )
    ]
    params = {"t": table.table_id}
    where = visible_clause("b", segments, params)
    batches = [
        BatchRecord(r.batch_id, r.name, int(r.added_version), r.created_at)
        for r in conn.execute(
            text(
                f"SELECT * FROM batches b WHERE b.table_id = :t AND {where} "
                "ORDER BY b.added_version, b.name"
            ),
            params,
        )
    ]
    batch_names = {b.batch_id: b.name for b in batches}
    params = {"t": table.table_id}
    where = visible_clause("f", segments, params)
    fragments = [
        FragmentRecord(
            r.fragment_id,
            r.batch_id,
            batch_names[r.batch_id],
            int(r.row_count),
            r.path,
            int(r.added_version),
        )
        for r in conn.execute(
            text(
                f"SELECT * FROM fragments f WHERE f.table_id = :t AND {where} "
                "ORDER BY f.added_version, f.batch_id, f.seq"
            ),
            params,
        )
        if r.batch_id in batch_names
    ]
    snap = Snapshot(table, resolved_version, commit_branch, segments, columns, batches, fragments)
    if with_files:
        snap.files_by_fragment = _load_files(conn, table, segments)
    return snap


def _load_files(
    conn: Connection, table: TableRecord, segments: list[Segment]
) -> dict[str, list[FileRecord]]:
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("fi", segments, params)
    rows = conn.execute(
        text(
            "SELECT fi.file_id, fi.fragment_id, fi.group_name, fi.path, fi.row_count, "
            "fi.size_bytes, fi.added_version, fc.column_id, fc.null_count, fc.min_value, "
            "fc.max_value, fc.feature_version "
            "FROM files fi JOIN file_columns fc "
            "ON fc.table_id = fi.table_id AND fc.file_id = fi.file_id "
            f"WHERE fi.table_id = :t AND {where}"
        ),
        params,
    )
    by_id: dict[str, FileRecord] = {}
    by_fragment: dict[str, list[FileRecord]] = defaultdict(list)
    for r in rows:
        rec = by_id.get(r.file_id)
        if rec is None:
            rec = FileRecord(
                r.file_id,
                r.fragment_id,
                r.group_name,
                r.path,
                int(r.row_count),
                int(r.size_bytes),
                int(r.added_version),
            )
            by_id[r.file_id] = rec
            by_fragment[r.fragment_id].append(rec)
        null_count = None if r.null_count is None else int(r.null_count)
        rec.columns[int(r.column_id)] = FileColumn(
            int(r.column_id),
            ColumnStats(null_count or 0, r.min_value, r.max_value),
            r.feature_version,
        )
    return dict(by_fragment)
