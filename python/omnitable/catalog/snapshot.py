"""Resolving a snapshot: ref or version → segments → visible columns, batches, fragments, files.

Implements docs/catalog.md "Resolving a snapshot" (the JVM reader implements the same rules).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, text

from omnitable.catalog.horizon import check_not_expired
from omnitable.catalog.records import (
    BatchRecord,
    ColumnRecord,
    DeletionRecord,
    FileColumn,
    FileRecord,
    FragmentRecord,
    TableRecord,
)
from omnitable.catalog.sql import gc_paused, in_list
from omnitable.exceptions import NotFoundError, UnknownColumnError, ValidationError
from omnitable.vocabulary.names import APPEND_NAME, MAIN, ROW_ID
from omnitable.vocabulary.types import to_arrow

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
        NotFoundError: unknown ref or version, a version not in the branch's history, or an
            expired version (catalog/horizon.py).
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
        check_not_expired(conn, table, row.branch, version)
        segs = _branch_segments(conn, table, row.branch, version)
        if branch is not None:
            head_segs = _branch_segments(conn, table, branch, _head(conn, table, branch))
            if not _covers(head_segs, row.branch, version):
                raise NotFoundError(
                    f"Cannot find version {version} in the history of branch '{branch}'"
                )
        return segs, version, None
    name = branch or MAIN
    ref = _ref(conn, table, name)
    if ref is None or ref.kind != "branch":
        raise NotFoundError(f"Cannot find branch '{name}' of table '{table.name}'")
    head = int(ref.version)
    return _branch_segments(conn, table, name, head, first=ref), head, name


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


def branch_segments(conn: Connection, table: TableRecord, branch: str, upto: int) -> list[Segment]:
    """The segments of ``upto`` on ``branch``: ``[(branch, upto)]`` then its parents' forks."""
    return _branch_segments(conn, table, branch, upto)


def _branch_segments(
    conn: Connection, table: TableRecord, branch: str, upto: int, first: Any = None
) -> list[Segment]:
    """``first``: ``branch``'s ref row when the caller already read it."""
    out: list[Segment] = []
    seen = set()
    current: str | None = branch
    while current is not None:
        if current in seen:  # pragma: no cover - refs are written by us, never cyclic
            raise ValidationError(f"Cannot resolve branch '{branch}': cyclic parents")
        seen.add(current)
        ref = first if current == branch and first is not None else _ref(conn, table, current)
        if ref is None or ref.kind != "branch":
            raise NotFoundError(f"Cannot find branch '{current}' of table '{table.name}'")
        out.append((current, upto))
        current = ref.parent_branch
        upto = int(ref.fork_version) if ref.fork_version is not None else upto
    return out


def within_clause(version_col: str, segments: list[Segment], params: dict[str, Any]) -> str:
    """SQL condition: the row's ``branch`` and ``version_col`` lie inside one of ``segments``
    (a commit, a feature registration of the snapshot's history); adds params."""
    parts = []
    for i, (branch, upto) in enumerate(segments):
        params[f"in_b{i}"], params[f"in_u{i}"] = branch, upto
        parts.append(f"(branch = :in_b{i} AND {version_col} <= :in_u{i})")
    return "(" + " OR ".join(parts) + ")"


# The id of a row of each versioned table, as ``removals.row_id`` holds it ({a}: the alias).
REMOVABLE_ID = {
    "batches": "{a}.batch_id",
    "fragments": "{a}.fragment_id",
    "files": "{a}.file_id",
    "deletion_vectors": "{a}.vector_id",
    "columns": "CAST({a}.column_id AS TEXT)",
}


def visible_clause(
    alias: str,
    kind: str,
    segments: list[Segment],
    params: dict[str, Any],
    version_indexed: bool = True,
) -> str:
    """SQL condition selecting the rows of ``alias`` (a row of table ``kind``) visible in
    ``segments`` (adds params): added and not removed inside a segment, and, on a branch, not
    removed by the branch or an ancestor through ``removals`` (docs/catalog.md).
    ``version_indexed=False`` keeps the version condition out of index choice (``+``), for rows
    looked up by another key (SQLite would otherwise walk the version index of every row)."""
    added = f"{alias}.added_version" if version_indexed else f"+{alias}.added_version"
    parts = []
    for i, (branch, upto) in enumerate(segments):
        b, u = f"seg_b{i}", f"seg_u{i}"
        params[b], params[u] = branch, upto
        parts.append(
            f"({alias}.branch = :{b} AND {added} <= :{u} AND "
            f"({alias}.removed_version IS NULL OR {alias}.removed_version > :{u}))"
        )
    clause = "(" + " OR ".join(parts) + ")"
    if len(segments) == 1:  # main's own rows: no removal of them is ever in `removals`
        return clause
    params["rm_kind"] = kind
    within = " OR ".join(
        f"(x_rm.branch = :seg_b{i} AND x_rm.version <= :seg_u{i})" for i in range(len(segments))
    )
    return (
        f"({clause} AND NOT EXISTS (SELECT 1 FROM removals x_rm WHERE x_rm.table_id = "
        f"{alias}.table_id AND x_rm.kind = :rm_kind AND x_rm.row_id = "
        f"{REMOVABLE_ID[kind].format(a=alias)} AND x_rm.row_version = {alias}.added_version AND "
        f"({within})))"
    )


@dataclass(frozen=True)
class SnapshotScope:
    """Which part of a snapshot to load; the rest stays in the database.

    ``fragments``: load the fragments (False: columns and batches only). ``files``: load the
    files and their column statistics. ``batches``: these batches, their fragments and files only
    (None: all). ``columns``: files and statistics of these column names only (None: all; names
    that are not columns of the snapshot are ignored), and of the columns whose name occurs in
    ``mentions`` (a filter's text, see :func:`columns_mentioned`). ``stats``: load the files'
    statistics (False: asking a file for them is an error).
    """

    fragments: bool = True
    files: bool = True
    batches: frozenset[str] | None = None
    columns: frozenset[str] | None = None
    mentions: str = ""
    stats: bool = True

    @classmethod
    def of(
        cls,
        batches: list[str] | None = None,
        columns: list[str] | None = None,
        where: object | None = None,
    ) -> SnapshotScope:
        """The scope of a read of ``columns`` (None: all) of ``batches`` (None: all) filtered by
        ``where`` (its columns are found by :func:`columns_mentioned` in its text; statistics are
        loaded only with a filter, which is all they prune). A value that is not a list of names
        scopes nothing, so the reader rejects it as it would unscoped."""
        return cls(
            batches=_names(batches),
            columns=_names(columns),
            mentions="" if where is None else str(where),
            stats=where is not None,
        )

    def wants(self, name: str) -> bool:
        """Whether this scope loads the files and statistics of column ``name``."""
        return self.columns is None or name in self.columns or name in self.mentions


@lru_cache(maxsize=65536)
def _arrow_field(name: str, data_type: str, nullable: bool) -> pa.Field:
    """The logical field of a column (cached: a schema of 2,500 columns is built on every
    ``Table.schema``; fields are immutable)."""
    return pa.field(name, to_arrow(data_type), nullable=nullable)


def _names(values: object) -> frozenset[str] | None:
    if isinstance(values, (list, tuple)) and all(isinstance(v, str) for v in values):
        return frozenset(values)
    return None


def columns_mentioned(text: str, names: Iterable[str]) -> list[str]:
    """The names that occur in ``text`` (a filter's text): a superset of its columns."""
    return [n for n in names if n in text]


_FILTER_TOKEN = re.compile(r"[^\s()<>=!,&|~\"'\[\]]+")


def columns_named(text: str, names: Iterable[str]) -> list[str]:
    """The names that are whole tokens of ``text`` (a pyarrow filter's text, where a field
    reads as its bare name): the filter's columns, and at most a few more (a string literal
    equal to a column name), since column names hold none of the characters that separate
    tokens."""
    tokens = set(_FILTER_TOKEN.findall(text))
    return [n for n in names if n in tokens]


FULL_SCOPE = SnapshotScope()


@dataclass
class Snapshot:
    """Everything a reader or writer needs to know about one version of a table.

    ``scope`` says what was loaded: asking a scoped snapshot for fragments of other batches or
    for other columns' files raises ValidationError instead of answering wrongly.
    """

    table: TableRecord
    version: int
    branch: str | None
    segments: list[Segment]
    columns: list[ColumnRecord]
    batches: list[BatchRecord]
    fragments: list[FragmentRecord]
    files_by_fragment: dict[str, list[FileRecord]] = field(default_factory=dict)
    scope: SnapshotScope = FULL_SCOPE
    deletions: dict[str, DeletionRecord] = field(default_factory=dict)  # by fragment id
    _scoped_ids: frozenset[int] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.scope.columns is not None:
            wants = self.scope.wants
            self._scoped_ids = frozenset(c.column_id for c in self.columns if wants(c.name))

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
        fields += [_arrow_field(c.name, c.data_type, c.nullable) for c in self.user_columns]
        return pa.schema(fields)

    # -- physical resolution ------------------------------------------------------------------

    def resolve(self, fragment_id: str, column_ids: list[int]) -> dict[int, FileRecord | None]:
        """For each column id, the visible file of the fragment that provides it (or None).

        Raises:
            ValidationError: a column outside the snapshot's loaded scope.
        """
        self._check_column_scope(column_ids)
        out: dict[int, FileRecord | None] = dict.fromkeys(column_ids)
        wanted = out.keys()
        for f in self.files_by_fragment.get(fragment_id, ()):
            for cid in wanted & f.columns.keys():  # newest file wins; the first among equals
                best = out[cid]
                if best is None or f.added_version > best.added_version:
                    out[cid] = f
        return out

    def count_providers(self, fragment_ids: Iterable[str], column_ids: list[int]) -> int:
        """How many files provide at least one of ``column_ids`` in these fragments: the
        distinct files :meth:`resolve` returns, summed over the fragments (a file belongs to one
        fragment). A fragment whose files carry disjoint parts of ``column_ids`` (the usual
        case) is counted from its files' column sets alone; only one where two files carry the
        same column is resolved (newest wins).

        Raises:
            ValidationError: a column outside the snapshot's loaded scope.
        """
        self._check_column_scope(column_ids)
        wanted = frozenset(column_ids)
        carried: dict[int, frozenset[int]] = {}  # id(a shared column map) -> wanted it carries
        count = 0
        for fid in fragment_ids:
            files = self.files_by_fragment.get(fid)
            if not files:
                continue
            seen: set[int] = set()
            providing = 0
            for f in files:
                hit = carried.get(id(f.columns))
                if hit is None:
                    hit = carried[id(f.columns)] = wanted & f.columns.keys()
                if hit:
                    if not seen.isdisjoint(hit):
                        break  # two files carry one column: resolve decides
                    seen |= hit
                    providing += 1
            else:
                count += providing
                continue
            chosen = self.resolve(fid, column_ids).values()
            count += len({f.file_id for f in chosen if f is not None})
        return count

    def deletion(self, fragment_id: str) -> DeletionRecord | None:
        """The fragment's visible deletion vector (None: no row of it is deleted)."""
        return self.deletions.get(fragment_id)

    def live_rows(self, fragment: FragmentRecord) -> int:
        """The fragment's rows that are not deleted."""
        dv = self.deletions.get(fragment.fragment_id)
        return fragment.row_count - (dv.deleted_count if dv is not None else 0)

    def live_fragments(self, batch_names: list[str] | None) -> list[FragmentRecord]:
        """:meth:`fragments_of` without the fragments whose every row is deleted (they drop
        out of reads and backfill planning)."""
        out = self.fragments_of(batch_names)
        if not self.deletions:
            return out
        return [f for f in out if self.live_rows(f) > 0 or f.row_count == 0]

    def fragments_of(self, batch_names: list[str] | None) -> list[FragmentRecord]:
        """The fragments of these batches (None: all), in the table's row order.

        Raises:
            NotFoundError: an unknown batch name.
            ValidationError: a batch outside the snapshot's loaded scope.
        """
        scoped = self.scope.batches
        if scoped is not None and (batch_names is None or not scoped.issuperset(batch_names)):
            raise ValidationError(
                f"Cannot list fragments of batches {batch_names}: the snapshot of table "
                f"'{self.table.name}' was loaded for batches {sorted(scoped)} only; load it "
                "with a scope that includes them"
            )
        if batch_names is None:
            return list(self.fragments)
        self.check_batches(batch_names)
        wanted = set(batch_names)
        return [f for f in self.fragments if f.batch_name in wanted]

    def check_batches(self, batch_names: Iterable[str]) -> None:
        """Raises NotFoundError naming the batches this snapshot does not have."""
        known = {b.name for b in self.batches}
        missing = [b for b in batch_names if b not in known]
        if missing:
            raise NotFoundError(
                f"Cannot find batch(es) {', '.join(repr(m) for m in missing)} in table "
                f"'{self.table.name}' at version {self.version}; see Table.batches()"
            )

    def _check_column_scope(self, column_ids: list[int]) -> None:
        loaded = self._scoped_ids
        if loaded is None or loaded.issuperset(column_ids):
            return
        outside = [cid for cid in column_ids if cid not in loaded]
        if outside:
            raise ValidationError(
                f"Cannot resolve column id(s) {outside} of table '{self.table.name}': the "
                f"snapshot was loaded for columns {sorted(self.scope.columns or ())} only; load it "
                "with a scope that includes them"
            )


def load_snapshot(
    conn: Connection,
    table: TableRecord,
    *,
    branch: str | None = None,
    tag: str | None = None,
    version: int | None = None,
    with_files: bool = True,
    scope: SnapshotScope = FULL_SCOPE,
) -> Snapshot:
    """Read one snapshot of ``table`` from the catalog (inside one read transaction).

    Only ``scope`` is loaded (``with_files=False`` drops the files from it): the batch and
    column filters run in SQL, so a one-batch read of a few columns touches that batch's
    fragments and only those columns' sets and files, whatever the table's size.

    Raises:
        NotFoundError: unknown ref, version or batch of the scope.
    """
    if not with_files:
        scope = replace(scope, files=False)
    segments, resolved_version, commit_branch = segments_for(
        conn, table, branch=branch, tag=tag, version=version
    )
    return load_segments(conn, table, segments, resolved_version, commit_branch, scope)


def load_segments(
    conn: Connection,
    table: TableRecord,
    segments: list[Segment],
    resolved_version: int,
    commit_branch: str | None,
    scope: SnapshotScope,
) -> Snapshot:
    """The snapshot of resolved ``segments`` (:func:`segments_for`), only ``scope`` loaded."""
    columns = _load_columns(conn, table, segments)
    batches = _load_batches(conn, table, segments, scope.batches)
    snap = Snapshot(
        table, resolved_version, commit_branch, segments, columns, batches, [], scope=scope
    )
    if scope.batches is not None:
        snap.check_batches(sorted(scope.batches))
    if not scope.fragments:
        return snap
    batch_ids = _scope_batch_ids(batches, scope)
    snap.fragments = _load_fragments(conn, table, segments, batches, batch_ids)
    snap.deletions = _load_deletions(conn, table, segments, batch_ids, snap.fragments)
    if scope.files:
        column_ids = None if scope.columns is None else sorted(snap._scoped_ids or ())
        fragment_ids = None if batch_ids is None else [f.fragment_id for f in snap.fragments]
        snap.files_by_fragment = load_files(
            conn, table, segments, batch_ids, fragment_ids, column_ids, scope.stats
        )
    return snap


def _scope_batch_ids(batches: list[BatchRecord], scope: SnapshotScope) -> list[str] | None:
    if scope.batches is None:
        return None
    return [b.batch_id for b in batches if b.name in scope.batches]


def _load_columns(
    conn: Connection, table: TableRecord, segments: list[Segment], active_only: bool = True
) -> list[ColumnRecord]:
    """The visible columns in position order: the active ones (what reads see), or all (with
    retired ones, for renames, retires and restores)."""
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("c", "columns", segments, params)
    if active_only:
        where += " AND c.state = 'active'"
    rows = conn.execute(
        text(
            "SELECT c.column_id, c.name, c.physical_name, c.data_type, c.nullable, c.position, "
            "c.state, c.group_name, c.feature, c.added_version "
            f"FROM columns c WHERE c.table_id = :t AND {where} ORDER BY c.position"
        ),
        params,
    )
    with gc_paused():  # one fetch: a wide table has thousands of columns
        return [
            ColumnRecord(int(cid), name, phys, dtype, bool(nl), int(pos), st, grp, feat, int(v))
            for cid, name, phys, dtype, nl, pos, st, grp, feat, v in rows.all()
        ]


def _load_batches(
    conn: Connection, table: TableRecord, segments: list[Segment], names: frozenset[str] | None
) -> list[BatchRecord]:
    """The visible batches (of these names; None: all)."""
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("b", "batches", segments, params)
    if names is not None:
        where += " AND " + in_list("b.name", "bn", sorted(names), params)
    rows = conn.execute(
        text(
            "SELECT b.batch_id, b.name, b.added_version, b.created_at, b.position FROM batches b "
            f"WHERE b.table_id = :t AND {where} ORDER BY b.position, b.name"
        ),
        params,
    )
    with gc_paused():  # one fetch: a table has thousands of batches
        return [
            BatchRecord(bid, name, int(v), at, int(pos)) for bid, name, v, at, pos in rows.all()
        ]


def _load_fragments(
    conn: Connection,
    table: TableRecord,
    segments: list[Segment],
    batches: list[BatchRecord],
    batch_ids: list[str] | None,
) -> list[FragmentRecord]:
    batch_names = {b.batch_id: b.name for b in batches}
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("f", "fragments", segments, params)
    if batch_ids is not None:
        where += " AND " + in_list("f.batch_id", "bid", batch_ids, params)
    rows = conn.execute(
        text(
            "SELECT f.fragment_id, f.batch_id, f.row_count, f.path, f.added_version "
            f"FROM fragments f WHERE f.table_id = :t AND {where} "
            "ORDER BY f.position, f.batch_id, f.seq"
        ),
        params,
    )
    with gc_paused():  # one fetch: a full scan lists every fragment
        return [
            FragmentRecord(fid, bid, batch_names[bid], int(n), path, int(v))
            for fid, bid, n, path, v in rows.all()
            if bid in batch_names
        ]


def _load_deletions(
    conn: Connection,
    table: TableRecord,
    segments: list[Segment],
    batch_ids: list[str] | None,
    fragments: list[FragmentRecord],
) -> dict[str, DeletionRecord]:
    """The visible deletion vectors of ``fragments`` (those of ``batch_ids``; None: all), by
    fragment id; one statement (no row at all for a table that never deleted)."""
    if not fragments:
        return {}
    params: dict[str, Any] = {"t": table.table_id}
    where = visible_clause("d", "deletion_vectors", segments, params)
    if len(fragments) <= MAX_LISTED_FRAGMENTS and batch_ids is not None:
        where += " AND " + in_list(
            "d.fragment_id", "dfid", [f.fragment_id for f in fragments], params
        )
    elif batch_ids is not None:
        where += " AND " + in_list("d.batch_id", "dbid", batch_ids, params)
    rows = conn.execute(
        text(
            "SELECT d.vector_id, d.fragment_id, d.deleted_count, d.vector, d.added_version "
            f"FROM deletion_vectors d WHERE d.table_id = :t AND {where}"
        ),
        params,
    ).all()
    if not rows:
        return {}
    counts = {f.fragment_id: f.row_count for f in fragments}
    return {
        fid: DeletionRecord(vid, fid, counts[fid], int(n), vec, int(v))
        for vid, fid, n, vec, v in rows
        if fid in counts
    }


def all_columns(
    conn: Connection, table: TableRecord, segments: list[Segment]
) -> list[ColumnRecord]:
    """Every visible column of the snapshot, retired ones included (``state`` says which)."""
    return _load_columns(conn, table, segments, active_only=False)


def batch_counts(
    conn: Connection, table: TableRecord, segments: list[Segment]
) -> list[tuple[str, int, int, str]]:
    """Per visible batch, oldest first: (name, live rows, fragments, created_at): the counts
    stored on the batch row less the rows its visible deletion vectors delete (one row per
    batch and one per deleted-from batch; no fragment is read; the counts are BIGINT, so ints).
    """
    params: dict[str, Any] = {"t": table.table_id}
    visible = visible_clause("b", "batches", segments, params)
    rows = conn.execute(
        text(
            "SELECT b.batch_id, b.name, b.row_count, b.fragment_count, b.created_at FROM batches b "
            f"WHERE b.table_id = :t AND {visible} ORDER BY b.position, b.name"
        ),
        params,
    )
    deleted = deleted_per_batch(conn, table, segments)
    with gc_paused():
        return [(name, n - deleted.get(bid, 0), k, at) for bid, name, n, k, at in rows.all()]


def deleted_per_batch(
    conn: Connection, table: TableRecord, segments: list[Segment]
) -> dict[str, int]:
    """Rows deleted by the visible deletion vectors, per batch id (batches without: absent)."""
    params: dict[str, Any] = {"t": table.table_id}
    visible = visible_clause("d", "deletion_vectors", segments, params)
    rows = conn.execute(
        text(
            "SELECT d.batch_id, SUM(d.deleted_count) FROM deletion_vectors d "
            f"WHERE d.table_id = :t AND {visible} GROUP BY d.batch_id"
        ),
        params,
    ).all()
    return {bid: int(n) for bid, n in rows}


MAX_LISTED_FRAGMENTS = 1000
"""Up to this many fragments, a scoped snapshot names its fragments in the files statement."""


def load_files(
    conn: Connection,
    table: TableRecord,
    segments: list[Segment],
    batch_ids: list[str] | None,
    fragment_ids: list[str] | None,
    column_ids: list[int] | None,
    with_stats: bool,
) -> dict[str, list[FileRecord]]:
    """Visible files (of the fragments of ``batch_ids``, which are ``fragment_ids``; of
    ``fragment_ids`` alone when ``batch_ids`` is None; of every fragment when both are None)
    whose column set holds one of ``column_ids`` (None: no filter), each with those columns of
    its set (and its statistics when ``with_stats``); one row per file.

    A few fragments are named in the statement: given a sub-select instead, PostgreSQL can
    misjudge how many files a fragment has and scan all fragments (20 → 0.1 ms vs 36 ms at
    300 K fragments). Fragments named without their batches go by statements of at most
    ``MAX_LISTED_FRAGMENTS``."""
    if column_ids == [] or batch_ids == [] or fragment_ids == []:
        return {}
    step = max(1, MAX_LISTED_FRAGMENTS)  # fragments named per statement without their batches
    if batch_ids is None and fragment_ids is not None and len(fragment_ids) > step:
        out: dict[str, list[FileRecord]] = {}
        for i in range(0, len(fragment_ids), step):
            chunk = fragment_ids[i : i + step]
            out.update(load_files(conn, table, segments, None, chunk, column_ids, with_stats))
        return out
    params: dict[str, Any] = {"t": table.table_id}
    of_columns = ""
    if column_ids is not None:
        of_columns = " AND " + in_list("cs.column_id", "cid", column_ids, params)
    sets: dict[str, dict[int, FileColumn]] = defaultdict(dict)
    for r in conn.execute(
        text(
            "SELECT cs.set_id, cs.column_id, cs.position, cs.feature_version FROM column_sets cs "
            f"WHERE cs.table_id = :t{of_columns}"
        ),
        params,
    ).all():  # one fetch, as every statement of a snapshot
        sets[r.set_id][int(r.column_id)] = FileColumn(
            int(r.column_id), int(r.position), r.feature_version
        )
    by_fragment = batch_ids is not None or fragment_ids is not None
    where = visible_clause("fi", "files", segments, params, version_indexed=not by_fragment)
    if fragment_ids is not None and (
        batch_ids is None or len(fragment_ids) <= MAX_LISTED_FRAGMENTS
    ):
        where += " AND " + in_list("fi.fragment_id", "fid", fragment_ids, params)
    elif batch_ids is not None:
        where += (
            " AND fi.fragment_id IN (SELECT f.fragment_id FROM fragments f "
            "WHERE f.table_id = :t AND " + in_list("f.batch_id", "bid", batch_ids, params) + ")"
        )
    if column_ids is not None:  # by fragment when named: `|| ''` keeps files_by_set out
        set_id = "(fi.set_id || '')" if by_fragment else "fi.set_id"
        where += f" AND {set_id} IN (SELECT cs.set_id FROM column_sets cs WHERE cs.table_id = :t{of_columns})"
    rows = conn.execute(
        text(
            "SELECT fi.file_id, fi.fragment_id, fi.group_name, fi.path, fi.row_count, "
            "fi.size_bytes, fi.added_version, fi.set_id, "
            + ("fi.stats " if with_stats else "NULL ")
            + f"FROM files fi WHERE fi.table_id = :t AND {where}"
        ),
        params,
    )
    with gc_paused():  # one fetch: a full scan lists every file read
        return _file_records(rows.all(), sets, with_stats)


def _file_records(
    rows: Iterable[Any], sets: dict[str, dict[int, FileColumn]], with_stats: bool
) -> dict[str, list[FileRecord]]:
    """The counts and versions are BIGINT columns, which both drivers return as ints."""
    by_fragment: dict[str, list[FileRecord]] = defaultdict(list)
    for file_id, frag_id, group, path, n, size, v, set_id, stats in rows:
        by_fragment[frag_id].append(
            FileRecord(file_id, frag_id, group, path, n, size, v, sets[set_id], stats, with_stats)
        )
    return dict(by_fragment)
