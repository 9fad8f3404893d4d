"""Atomic commits with optimistic concurrency at (fragment, column) grain.

A :class:`CommitRequest` lists everything one operation adds and removes. :func:`commit` applies
it in ONE database transaction after validating it against the branch head: cells written by a
concurrent commit since ``base_version``, or anything the operation relied on that no longer holds
(its read set and planned files, feature versions, the column ids its files were written for,
column-group ownership, a new group not created concurrently) → :class:`CommitConflict`, nothing applied.
See docs/catalog.md, "Commits and concurrency".
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqlalchemy import Connection, text

from omnitable._failpoints import failpoint
from omnitable.catalog.commit_sql import sql
from omnitable.catalog.features import feature_rows
from omnitable.catalog.lease import check_held
from omnitable.catalog.queue import check_item, mark_committed
from omnitable.catalog.records import TableRecord
from omnitable.catalog.removals import end_rows
from omnitable.catalog.rollback import apply_revert, apply_rollback
from omnitable.catalog.sets import ColumnSet, decode_stats, encode_stats, insert_missing_sets
from omnitable.catalog.snapshot import Segment, segments_for, visible_clause
from omnitable.catalog.sql import in_list
from omnitable.catalog.store import CatalogStore
from omnitable.exceptions import AlreadyExistsError, CommitConflict, NotFoundError, ValidationError
from omnitable.vocabulary.descriptors import FileDescriptor, FragmentDescriptor
from omnitable.vocabulary.names import MAIN, ROW_ID
from omnitable.vocabulary.stats import ColumnStats

_CHUNK = 500  # ids per IN (...) list


def utcnow() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class NewColumn:
    """A logical column a commit adds. ``data_type`` is a Spark DDL string."""

    name: str
    data_type: str
    nullable: bool = True
    group_name: str = "base"
    feature: str | None = None
    column_id: int | None = None  # keep this id (a merge adopting a branch's column); None: new
    physical_name: str | None = None  # the name inside its files (None: the column's name)


@dataclass
class LineageEntry:
    """Lineage of one derived column in one new file."""

    file_id: str
    column: str
    feature: str
    feature_version: str
    inputs: list[dict[str, Any]]
    engine: str
    error_count: int = 0
    run_id: str | None = None  # the run that computed it (default: the commit's run)


@dataclass
class FeatureRow:
    """A feature version a commit registers (or makes current again)."""

    name: str
    version: str
    kind: str
    definition: dict[str, Any]
    fingerprint: str


class RowIdClaim(Protocol):
    """The ``_ai_unique_id_`` values a commit adds (generated ranges and/or supplied ids).

    ``checked_version``: ids of commits up to this version were already checked exactly
    against the claim; the commit pre-filters the later ones with :meth:`may_overlap`.
    """

    checked_version: int

    def may_overlap(self, lo: int, hi: int) -> bool:
        """False only when no claimed id lies in ``[lo, hi]``."""
        ...


class IdsNotChecked(CommitConflict):
    """Commits after ``claim.checked_version`` (up to ``head``) added ids that may clash with
    the claim; the caller checks them exactly, moves ``checked_version`` to ``head`` and
    retries. Nothing was committed."""

    def __init__(self, message: str, head: int) -> None:
        super().__init__(message, [("*", ROW_ID)])
        self.head = head


class KeysNotChecked(CommitConflict):
    """Commits after ``req.keys_checked_version`` (up to ``head``) added or removed rows of a
    keyed table; the caller checks its new keys against the head's live rows, moves
    ``keys_checked_version`` to ``head`` and retries. Nothing was committed."""

    def __init__(self, message: str, head: int) -> None:
        super().__init__(message, [("*", "key")])
        self.head = head


@dataclass(frozen=True)
class ExpectedProvider:
    """What an operation relied on: the file providing ``column`` in ``fragment_id`` (None: no
    file) when it read its inputs (``role="input"``, the read set) or planned the file it patches
    or replaces (``role="target"``). The commit conflicts when the head says otherwise."""

    fragment_id: str
    column: str
    file_id: str | None
    role: str = "input"


@dataclass(frozen=True)
class NewDeletion:
    """A fragment's new cumulative deletion vector (docs/catalog.md, ``deletion_vectors``).

    ``replaces``: the vector id the operation saw on the fragment (None: none); the commit
    conflicts when the head holds another, so no concurrent delete is lost.
    """

    fragment_id: str
    batch_id: str
    deleted_count: int
    vector: str
    replaces: str | None = None


@dataclass(frozen=True)
class ColumnChange:
    """A new name and/or state of an existing column (rename, retire, restore), and for a
    regroup its new declared column group (``group``; None keeps the group).

    ``read_version``: the ``added_version`` of the column's row the operation read; the commit
    conflicts when the head holds another row (the column changed concurrently), and a new
    ``group`` conflicts when a column added since ``base_version`` holds that group.
    """

    column_id: int
    read_version: int
    name: str
    state: str
    group: str | None = None


@dataclass
class CommitRequest:
    """Everything one operation changes. Files reference columns by name."""

    op: str
    base_version: int
    branch: str = MAIN
    run_id: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    new_columns: list[NewColumn] = field(default_factory=list)
    removed_columns: list[str] = field(default_factory=list)  # names
    features: list[FeatureRow] = field(default_factory=list)
    new_batches: list[tuple[str, str]] = field(default_factory=list)  # (batch_id, name)
    # batch_id -> read position of a new batch that keeps a copied batch's place (a merge, a
    # compaction); a new batch not listed takes the commit's version (it goes last)
    batch_positions: dict[str, int] = field(default_factory=dict)
    removed_batches: list[str] = field(default_factory=list)
    new_fragments: list[FragmentDescriptor] = field(default_factory=list)
    removed_fragments: list[str] = field(default_factory=list)
    new_files: list[FileDescriptor] = field(default_factory=list)  # for existing fragments
    removed_files: list[str] = field(default_factory=list)
    row_ids: RowIdClaim | None = None
    next_row_id_at_least: int | None = None
    lineage: list[LineageEntry] = field(default_factory=list)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # finds the commit afterwards
    expected_providers: list[ExpectedProvider] = field(default_factory=list)
    # feature name -> the version the operation computed; it must still be the current one
    feature_versions: dict[str, str] = field(default_factory=dict)
    deletions: list[NewDeletion] = field(default_factory=list)
    column_changes: list[ColumnChange] = field(default_factory=list)
    rollback_to: int | None = None  # make this version's state the head (catalog/rollback.py)
    revert: int | None = None  # undo exactly this commit, keeping later ones (same module)
    dependents: str = "fail"  # a revert whose writes later backfills read: fail | stale
    # keyed tables: the version up to which the keys this commit adds were checked against the
    # table's live rows; a later change of rows (fragments or deletes) raises KeysNotChecked
    keys_checked_version: int | None = None
    # a merge: the commit needs the branch head to be exactly base_version, and the source
    # branch's head to be still this (branch, version); see dataops/merge.py
    exact_base: bool = False
    source_head: tuple[str, int] | None = None
    removed_deletions: list[str] = field(default_factory=list)  # vector ids ended, none added
    # a rewrite of existing fragments (governance compaction and folding): the fragments it
    # removes must be unchanged since base_version (no file or deletion vector of theirs added
    # or ended), and its files may carry retired columns (their data survive for a restore)
    rewrite: bool = False

    def all_new_files(self) -> list[FileDescriptor]:
        return [f for frag in self.new_fragments for f in frag.files] + list(self.new_files)


def commit(store: CatalogStore, table_id: str, req: CommitRequest) -> int:
    """Apply ``req`` atomically; returns the new version.

    Raises:
        CommitConflict: a commit after ``req.base_version`` touched the same cells.
        NotFoundError: the table or branch no longer exists.
        AlreadyExistsError / ValidationError: the request is inconsistent with the head state.
    """
    _check_fragments_have_new_batches(req)
    with store.write(failpoints="commit") as conn:
        store.lock_table(conn, table_id)
        table_row = conn.execute(
            text("SELECT * FROM tables WHERE table_id = :t"), {"t": table_id}
        ).first()
        if table_row is None:
            raise NotFoundError(
                f"Cannot commit {req.op}: the table (id {table_id}) was dropped by another "
                "process; nothing was committed (a table re-created under its name is another "
                "table: open it again)"
            )
        check_held(conn, table_id)  # a governance job whose lease was taken commits nothing
        item = check_item(conn, table_id)  # a queue item another worker took commits nothing
        table = TableRecord.from_row(table_row)
        segments, head, _ = segments_for(conn, table, branch=req.branch)
        _check_read_this_branch(conn, table, req, segments)
        if req.base_version > head:
            raise ValidationError(
                f"Cannot commit on branch '{req.branch}': base version {req.base_version} is "
                f"newer than its head {head}"
            )
        _check_merge_heads(conn, table, req, head)
        column_ids = _validate(conn, table, req, segments, head)
        if req.rollback_to is not None:
            _check_rollback(conn, table, req, head)
        if req.revert is not None:
            _check_revert(conn, table, req)
        version = int(conn.execute(text(sql("next_version")), {"t": table_id}).scalar_one())
        failpoint("commit.before_insert")
        now = _commit_time(conn, table_id)
        removed_column_ids = [column_ids[name] for name in req.removed_columns]
        next_column_id = _insert_columns(conn, table, req, version, column_ids)
        end_rows(conn, table_id, "columns", "column_id", removed_column_ids, req.branch, version,
                 segments)  # fmt: skip
        _upsert_features(conn, table_id, req, version, now)
        _insert_data(conn, table_id, req, version, column_ids, now)
        failpoint("commit.mid_insert")
        _apply_removals(conn, table_id, req, version, segments)
        _apply_deletions(conn, table_id, req, version, segments)
        _apply_column_changes(conn, table_id, req, version, segments)
        summary = {**req.summary, **_apply_undo(conn, table, req, version)}
        _record(conn, table, req, version, head, summary, now, next_column_id)
        mark_committed(conn, item, version)
        failpoint("commit.before_end")
    return version


def _check_merge_heads(conn: Connection, table: TableRecord, req: CommitRequest, head: int) -> None:
    """A merge was planned on exactly its base and the source's head: either moved, it conflicts
    (the merge plans again)."""
    if req.exact_base and head != req.base_version:
        raise CommitConflict(
            f"Cannot commit {req.op}: branch '{req.branch}' moved from version "
            f"{req.base_version} to {head} while the merge was planned; nothing was committed"
        )
    if req.source_head is not None:
        source, planned = req.source_head
        now = segments_for(conn, table, branch=source)[1]
        if now != planned:
            raise CommitConflict(
                f"Cannot commit {req.op}: branch '{source}' moved from version {planned} to "
                f"{now} while the merge was planned; nothing was committed"
            )


def _apply_undo(
    conn: Connection, table: TableRecord, req: CommitRequest, version: int
) -> dict[str, Any]:
    """A rollback's or a revert's changes (catalog/rollback.py); what they did, for the
    summary."""
    if req.rollback_to is not None:
        return apply_rollback(conn, table, req.branch, req.rollback_to, version)
    if req.revert is not None:
        return apply_revert(conn, table, req.branch, req.revert, version, req.dependents)
    return {}


def _record(
    conn: Connection,
    table: TableRecord,
    req: CommitRequest,
    version: int,
    head: int,
    summary: dict[str, Any],
    now: str,
    next_column_id: int,
) -> None:
    """The commit row, the branch ref moved to it, the table's id counters."""
    t = table.table_id
    conn.execute(
        text(sql("insert_commit")),
        {"t": t, "v": version, "p": head, "b": req.branch, "op": req.op, "r": req.run_id,
         "s": json.dumps(summary, sort_keys=True), "now": now, "tok": req.token},
    )  # fmt: skip
    conn.execute(text(sql("move_ref")), {"v": version, "t": t, "b": req.branch})
    next_row = table.next_row_id
    if req.next_row_id_at_least is not None:
        next_row = max(next_row, req.next_row_id_at_least)
    conn.execute(
        text("UPDATE tables SET next_column_id = :c, next_row_id = :r WHERE table_id = :t"),
        {"c": next_column_id, "r": next_row, "t": t},
    )


def _commit_time(conn: Connection, t: str) -> str:
    """Now, but never earlier than the table's latest commit (clocks of writers may differ), so
    ``committed_at`` never decreases with the version."""
    last = conn.execute(text(sql("last_commit_time")), {"t": t}).scalar()
    now = utcnow()
    return now if last is None or now >= last else str(last)


def find_commit(conn: Connection, table_id: str, token: str) -> int | None:
    """The version of the commit made with ``token``, or None when it did not land."""
    found = conn.execute(text(sql("find_commit")), {"t": table_id, "k": token}).scalar()
    return None if found is None else int(found)


# -- validation ---------------------------------------------------------------------------------


def _check_read_this_branch(
    conn: Connection, table: TableRecord, req: CommitRequest, segments: list[Segment]
) -> None:
    """A request on a branch read it at ``base_version``: a version of the branch's history at
    or after its fork (a branch's head never lies before its fork). Anything else was read on a
    branch of the same name that has been deleted (and created again) since: refused, so a job
    still writing to a deleted branch never lands on its successor (docs/branches.md)."""
    if len(segments) == 1:  # main: never deleted
        return
    owner = conn.execute(
        text("SELECT branch FROM commits WHERE table_id = :t AND version = :v"),
        {"t": table.table_id, "v": req.base_version},
    ).scalar()
    fork = segments[1][1]
    if req.base_version < fork or not any(
        b == owner and req.base_version <= upto for b, upto in segments
    ):
        raise NotFoundError(
            f"Cannot commit {req.op} on branch '{req.branch}' of table '{table.name}': the "
            f"branch this operation read at version {req.base_version} was deleted (a branch "
            "of that name was created again since); nothing was committed"
        )


def _check_fragments_have_new_batches(req: CommitRequest) -> None:
    """New fragments belong to batches this commit creates (a batch's fragments are added and
    removed with it, which is what keeps its stored row and fragment counts true)."""
    new_ids = {bid for bid, _ in req.new_batches}
    stray = sorted({f.batch_id for f in req.new_fragments} - new_ids)
    if stray:
        raise ValidationError(
            f"Cannot commit {req.op}: fragments of batch id(s) {', '.join(stray)} that this "
            "commit does not create; add fragments only with a new batch (replace the batch "
            "to change its fragments)"
        )


def _validate(
    conn: Connection, table: TableRecord, req: CommitRequest, segments: list[Segment], head: int
) -> dict[str, int]:
    """Check ``req`` against the head; returns name → column id for every referenced column."""
    t = table.table_id
    concurrent = head != req.base_version
    params: dict[str, Any] = {"t": t}
    vis = visible_clause("c", "columns", segments, params)
    visible_cols: dict[str, tuple[int, int]] = {}
    retired: set[str] = set()
    retired_ids: dict[str, int] = {}
    for r in conn.execute(
        text(
            f"SELECT name, column_id, added_version, state FROM columns c "
            f"WHERE c.table_id = :t AND {vis}"
        ),
        params,
    ):
        if r.state == "active":
            visible_cols[r.name] = (int(r.column_id), int(r.added_version))
        else:
            retired.add(r.name)
            retired_ids[r.name] = int(r.column_id)
    column_ids = {name: cid for name, (cid, _) in visible_cols.items()}
    if req.rewrite:  # a rewrite carries the data of retired columns over
        column_ids.update(retired_ids)
    removed_cols = set(req.removed_columns)
    for name in removed_cols:
        if name not in visible_cols:
            raise CommitConflict(
                f"Cannot commit {req.op}: column '{name}' was removed by a concurrent commit",
                [("*", name)],
            )
    for col in req.new_columns:
        if col.name in visible_cols and col.name not in removed_cols:
            if visible_cols[col.name][1] > req.base_version:
                raise CommitConflict(
                    f"Cannot commit {req.op}: column '{col.name}' was added by a concurrent "
                    "commit; retry the operation",
                    [("*", col.name)],
                )
            raise AlreadyExistsError(f"Cannot add column '{col.name}': it already exists")
        if col.name in retired:
            raise AlreadyExistsError(
                f"Cannot add column '{col.name}': a retired column has that name; restore it "
                "(Table.restore) or choose another name"
            )
    new_names = {c.name for c in req.new_columns}
    for f in req.all_new_files():
        for name in f.columns:
            if name not in column_ids and name not in new_names:
                raise CommitConflict(
                    f"Cannot commit {req.op}: column '{name}' no longer exists (retired, renamed "
                    "or replaced concurrently?)",
                    [(f.fragment_id, name)],
                )

    _check_batches(conn, t, req, segments)
    _check_still_visible(conn, t, req, segments)
    if req.rewrite and concurrent:
        _check_rewritten_unchanged(conn, t, req)

    if concurrent:
        _check_cell_conflicts(conn, t, req, head)
        _check_feature_conflicts(conn, t, req)
    _check_id_overlaps(conn, t, req, head)
    _check_keys(conn, t, req, head)
    _check_column_binding(req, column_ids)
    _check_group_ownership(conn, t, req, segments)
    _check_feature_versions(conn, t, req, segments)
    if concurrent:  # nothing the operation read can have changed otherwise
        _check_expected_providers(conn, t, req, segments, column_ids)
    _check_deletions(conn, t, req, segments)
    _check_column_changes(conn, t, req, segments)
    return column_ids


def _check_batches(conn: Connection, t: str, req: CommitRequest, segments: list[Segment]) -> None:
    """The batches an append replaces are still live, and the batch names it creates are free."""
    removed_batches = set(req.removed_batches)
    if req.new_batches or removed_batches:
        params: dict[str, Any] = {"t": t}
        vis = visible_clause("b", "batches", segments, params)
        names = in_list("b.name", "bn", sorted({n for _, n in req.new_batches}), params)
        ids = in_list("b.batch_id", "bi", sorted(removed_batches), params)
        live = {  # only the batches named: the batches_by_name index and the key serve it
            r.batch_id: (r.name, int(r.added_version))
            for r in conn.execute(
                text(
                    f"SELECT batch_id, name, added_version FROM batches b WHERE b.table_id = :t "
                    f"AND {vis} AND ({names} OR {ids})"
                ),
                params,
            )
        }
        for bid in removed_batches:
            if bid not in live:
                raise CommitConflict(
                    f"Cannot commit {req.op}: the batch it replaces was changed by a concurrent "
                    "commit; retry the operation"
                )
        live_names = {
            name: added for bid, (name, added) in live.items() if bid not in removed_batches
        }
        for _, name in req.new_batches:
            if name in live_names:
                if live_names[name] > req.base_version:
                    raise CommitConflict(
                        f"Cannot append batch '{name}': a concurrent commit created it first",
                        [("*", "_ai_append_name_")],
                    )
                raise AlreadyExistsError(
                    f"Cannot append batch '{name}': it already exists; use mode='replace' to "
                    "replace it atomically"
                )


def _check_still_visible(
    conn: Connection, t: str, req: CommitRequest, segments: list[Segment]
) -> None:
    """The fragments an operation adds files to or removes, and the files it replaces, are still
    visible at the head."""
    existing_frags = {f.fragment_id for f in req.new_files} | set(req.removed_fragments)
    created = {f.fragment_id for f in req.new_fragments}  # a merge's copies may carry vectors
    existing_frags |= {d.fragment_id for d in req.deletions if d.fragment_id not in created}
    if existing_frags:
        live_frags = _visible_ids(
            conn, "fragments", "fragment_id", t, segments, sorted(existing_frags)
        )
        gone = sorted(existing_frags - live_frags)
        if gone:
            raise CommitConflict(
                f"Cannot commit {req.op}: {len(gone)} fragment(s) were removed by a concurrent "
                f"commit (batch replaced or compacted), e.g. {gone[0]}; retry the operation",
                [(g, "*") for g in gone],
            )
    if req.removed_files:
        live_files = _visible_ids(
            conn, "files", "file_id", t, segments, sorted(set(req.removed_files))
        )
        gone = sorted(set(req.removed_files) - live_files)
        if gone:
            raise CommitConflict(
                f"Cannot commit {req.op}: {len(gone)} file(s) it replaces were removed by a "
                "concurrent commit; retry the operation"
            )


def _check_rewritten_unchanged(conn: Connection, t: str, req: CommitRequest) -> None:
    """A rewrite read its fragments at ``base_version``: a file or deletion vector of theirs
    added or ended on the branch since (an update, backfill, retry, delete or upsert) would be
    lost or resurrect deleted rows, so it conflicts (the job prepares again). Commits after the
    base version on this branch can only have changed rows of this branch, or inherited rows
    through ``removals``."""
    frags = sorted(set(req.removed_fragments))
    for i in range(0, len(frags), _CHUNK):
        params: dict[str, Any] = {"t": t, "b": req.branch, "base": req.base_version}
        marks = _bind_ids(params, frags[i : i + _CHUNK])
        changed = [
            conn.execute(
                text(
                    f"SELECT x.fragment_id FROM {kind} x WHERE x.table_id = :t AND x.branch = :b "
                    f"AND x.fragment_id IN ({marks}) AND (x.added_version > :base "
                    "OR x.removed_version > :base)"
                ),
                params,
            ).first()
            for kind in ("files", "deletion_vectors")
        ]
        changed += [
            conn.execute(
                text(
                    f"SELECT x.fragment_id FROM {kind} x JOIN removals r ON r.table_id = "
                    f"x.table_id AND r.kind = '{kind}' AND r.row_id = x.{id_col} AND "
                    "r.row_version = x.added_version WHERE x.table_id = :t AND r.branch = :b "
                    f"AND r.version > :base AND x.fragment_id IN ({marks})"
                ),
                params,
            ).first()
            for kind, id_col in (("files", "file_id"), ("deletion_vectors", "vector_id"))
        ]
        hit = next((r for r in changed if r is not None), None)
        if hit is not None:
            raise CommitConflict(
                f"Cannot commit {req.op}: a concurrent commit (after version "
                f"{req.base_version}) changed fragment {hit.fragment_id} that it rewrote (new "
                "or changed files or deletion vector); nothing was committed. Prepare again on "
                "the new version.",
                [(hit.fragment_id, "*")],
            )


def _visible_ids(
    conn: Connection, table: str, id_col: str, t: str, segments: list[Segment], ids: list[str]
) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        params: dict[str, Any] = {"t": t}
        vis = visible_clause("x", table, segments, params)
        marks = _bind_ids(params, chunk)
        rows = conn.execute(
            text(
                f"SELECT x.{id_col} FROM {table} x WHERE x.table_id = :t AND {vis} "
                f"AND x.{id_col} IN ({marks})"
            ),
            params,
        )
        found.update(r[0] for r in rows)
    return found


def _bind_ids(params: dict[str, Any], ids: list[str]) -> str:
    """Bind ``ids`` (at most ``_CHUNK``) as ``:id0, :id1, …`` in ``params``; returns that list
    for an ``IN (...)`` clause."""
    for j, v in enumerate(ids):
        params[f"id{j}"] = v
    return ", ".join(f":id{j}" for j in range(len(ids)))


def _check_rollback(conn: Connection, table: TableRecord, req: CommitRequest, head: int) -> None:
    """A rollback discards exactly the commits its caller saw: any commit since conflicts."""
    target = req.rollback_to
    assert target is not None
    if req.base_version != head:
        raise CommitConflict(
            f"Cannot roll back table '{table.name}' to version {target}: version {head} was "
            f"committed after version {req.base_version}, which the rollback was asked on; "
            "nothing was committed. Look at Table.history() and run the rollback again."
        )
    if target >= head:
        raise ValidationError(
            f"Cannot roll back table '{table.name}' to version {target}: the head of branch "
            f"'{req.branch}' is version {head}; give an earlier version"
        )
    segments_for(conn, table, branch=req.branch, version=target)  # NotFoundError if not ours


def _check_revert(conn: Connection, table: TableRecord, req: CommitRequest) -> None:
    """The reverted commit exists on this branch's history, changed data, and was not reverted
    already."""
    k = req.revert
    row = conn.execute(
        text("SELECT op FROM commits WHERE table_id = :t AND version = :v"),
        {"t": table.table_id, "v": k},
    ).first()
    if row is None:
        raise NotFoundError(
            f"Cannot revert version {k} of table '{table.name}': no such version; see "
            "Table.history()"
        )
    segments_for(conn, table, branch=req.branch, version=k)  # NotFoundError if not ours
    if row.op == "create":
        raise ValidationError(
            f"Cannot revert version {k} of table '{table.name}': it created the table; drop the "
            "table instead"
        )
    for (summary,) in conn.execute(
        text("SELECT summary FROM commits WHERE table_id = :t AND op = 'revert' AND version > :v"),
        {"t": table.table_id, "v": k},
    ):
        if json.loads(summary).get("reverted") == k:
            raise ValidationError(
                f"Cannot revert version {k} of table '{table.name}': it was reverted already"
            )


def _check_deletions(conn: Connection, t: str, req: CommitRequest, segments: list[Segment]) -> None:
    """Every new deletion vector replaces exactly the vector its fragment has at the head (a
    concurrent delete of the same fragment conflicts; the operation re-reads and retries)."""
    if not req.deletions:
        return
    ids = sorted({d.fragment_id for d in req.deletions})
    if len(ids) != len(req.deletions):
        raise ValidationError(f"Cannot commit {req.op}: two deletion vectors for one fragment")
    head: dict[str, str] = {}
    for i in range(0, len(ids), _CHUNK):
        params: dict[str, Any] = {"t": t}
        vis = visible_clause("d", "deletion_vectors", segments, params)
        marks = _bind_ids(params, ids[i : i + _CHUNK])
        for fid, vid in conn.execute(
            text(sql("head_deletion_vectors", vis=vis, **{"in": f"d.fragment_id IN ({marks})"})),
            params,
        ):
            head[fid] = vid
    changed = sorted(d.fragment_id for d in req.deletions if head.get(d.fragment_id) != d.replaces)
    if changed:
        raise CommitConflict(
            f"Cannot commit {req.op}: a concurrent commit (after version {req.base_version}) "
            f"deleted rows of {len(changed)} of the same fragment(s), e.g. {changed[0]}; nothing "
            "was committed. Re-run the operation on the new version.",
            [(f, "*") for f in changed],
        )


def _check_column_changes(
    conn: Connection, t: str, req: CommitRequest, segments: list[Segment]
) -> None:
    """Each changed column still has the row the operation read, and no other column holds
    (or held, retired) the new name."""
    if not req.column_changes:
        return
    params: dict[str, Any] = {"t": t}
    vis = visible_clause("c", "columns", segments, params)
    rows = conn.execute(
        text(
            "SELECT column_id, name, added_version, group_name FROM columns c "
            f"WHERE c.table_id = :t AND {vis}"
        ),
        params,
    ).all()
    head = {int(r.column_id): (r.name, int(r.added_version)) for r in rows}
    changed = {c.column_id for c in req.column_changes}
    _check_new_groups(req, rows, changed)
    for change in req.column_changes:
        name, added = head.get(change.column_id, ("", -1))
        if added != change.read_version:
            raise CommitConflict(
                f"Cannot commit {req.op}: column '{change.name}' was renamed, retired or restored "
                f"by a concurrent commit (or regrouped; after version {req.base_version}); "
                "nothing was committed. Re-run the operation on the new version.",
                [("*", name or change.name)],
            )
        taken = [n for cid, (n, _) in head.items() if n == change.name and cid not in changed]
        if taken:
            raise AlreadyExistsError(
                f"Cannot commit {req.op}: a column named '{change.name}' already exists (active "
                "or retired); choose another name"
            )


def _check_new_groups(req: CommitRequest, rows: Sequence[Any], changed: set[int]) -> None:
    """A regroup's new declared groups: no column added since its base version (a concurrent
    ``add_columns``) may hold one of them."""
    groups = {c.group for c in req.column_changes if c.group is not None}
    if not groups:
        return
    clash = sorted(r.name for r in rows if r.group_name in groups
                   and int(r.column_id) not in changed
                   and int(r.added_version) > req.base_version)  # fmt: skip
    if clash:
        raise CommitConflict(
            f"Cannot commit {req.op}: column(s) {clash[:5]} were added by a concurrent commit "
            f"(after version {req.base_version}) to a column group this commit declares; nothing "
            "was committed. Re-run the operation on the new version.",
            [("*", n) for n in clash],
        )


def _apply_column_changes(
    conn: Connection, t: str, req: CommitRequest, version: int, segments: list[Segment]
) -> None:
    """Each change ends the column's current row and adds its next one (versioned rows)."""
    ended = [c.column_id for c in req.column_changes]  # their read rows (_check_column_changes)
    end_rows(conn, t, "columns", "column_id", ended, req.branch, version, segments)
    for c in req.column_changes:
        params = {"t": t, "c": c.column_id, "rv": c.read_version, "v": version, "b": req.branch,
                  "n": c.name, "s": c.state, "g": c.group}  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, "
                "nullable, position, state, group_name, feature, branch, added_version, "
                "removed_version) SELECT table_id, column_id, :n, physical_name, data_type, "
                "nullable, position, :s, COALESCE(:g, group_name), feature, :b, :v, NULL "
                "FROM columns "
                "WHERE table_id = :t AND column_id = :c AND added_version = :rv"
            ),
            params,
        )


def _check_cell_conflicts(conn: Connection, t: str, req: CommitRequest, head: int) -> None:
    ours: dict[str, set[str]] = defaultdict(set)
    for f in req.new_files:
        ours[f.fragment_id].update(f.columns)
    removed = set(req.removed_files)
    if removed:
        for fid in sorted(removed):
            for r in conn.execute(
                text(
                    "SELECT fi.fragment_id, c.name FROM files fi JOIN column_sets cs ON "
                    "cs.table_id = fi.table_id AND cs.set_id = fi.set_id JOIN columns c ON "
                    "c.table_id = cs.table_id AND c.column_id = cs.column_id "
                    "WHERE fi.table_id = :t AND fi.file_id = :f"
                ),
                {"t": t, "f": fid},
            ):
                ours[r.fragment_id].add(r.name)
    if not ours:
        return
    frag_ids = sorted(ours)
    conflicts: list[tuple[str, str]] = []
    for i in range(0, len(frag_ids), _CHUNK):
        chunk = frag_ids[i : i + _CHUNK]
        params: dict[str, Any] = {"t": t, "b": req.branch, "base": req.base_version}
        marks = _bind_ids(params, chunk)
        rows = conn.execute(
            text(sql("cell_writes_since", **{"in": f"fi.fragment_id IN ({marks})"})), params
        )
        for r in rows:
            if r.name in ours[r.fragment_id]:
                conflicts.append((r.fragment_id, r.name))
    if conflicts:
        conflicts = sorted(set(conflicts))
        cols = sorted({c for _, c in conflicts})
        raise CommitConflict(
            f"Cannot commit {req.op}: a concurrent commit (after version {req.base_version}) "
            f"wrote column(s) {', '.join(cols)} in {len({f for f, _ in conflicts})} of the same "
            "fragment(s); nothing was committed. Re-run the operation on the new version.",
            conflicts,
        )


def _check_id_overlaps(conn: Connection, t: str, req: CommitRequest, head: int) -> None:
    """Pre-filter the row ids of commits after ``req.row_ids.checked_version`` by their file
    statistics; any possible overlap raises :class:`IdsNotChecked` (the exact check reads ids,
    which the caller does outside the transaction)."""
    claim = req.row_ids
    if claim is None or claim.checked_version >= head:
        return
    rows = conn.execute(
        text(sql("row_id_stats_since")),
        {"t": t, "b": req.branch, "since": claim.checked_version},
    )
    for r in rows:
        bounds = decode_stats(r.stats, int(r.position)).int_bounds()
        overlap = bounds is None or claim.may_overlap(*bounds)
        if overlap:
            raise IdsNotChecked(
                f"Cannot commit {req.op}: commits after version {claim.checked_version} added "
                f"{ROW_ID} values that may overlap this commit's; check them and retry",
                head,
            )


def _check_keys(conn: Connection, t: str, req: CommitRequest, head: int) -> None:
    """Raise :class:`KeysNotChecked` when rows of the branch changed after the version an
    upsert checked its new keys against (the exact check reads index files, which the caller
    does outside the transaction)."""
    since = req.keys_checked_version
    if since is None or since >= head:
        return
    params = {"t": t, "b": req.branch, "since": since}
    for table in ("fragments", "deletion_vectors"):
        changed = conn.execute(text(sql("key_rows_changed_since", kind=table)), params).first()
        if changed is None:  # rows it inherits, removed on the branch
            changed = conn.execute(
                text(sql("key_rows_removed_since")), {**params, "k": table}
            ).first()
        if changed is not None:
            raise KeysNotChecked(
                f"Cannot commit {req.op}: commits after version {since} changed the table's "
                "rows; check the new keys against them and retry",
                head,
            )


def _check_feature_conflicts(conn: Connection, t: str, req: CommitRequest) -> None:
    """A registration validated its feature graph on ``base_version``: any feature registered
    since then may make that graph invalid (e.g. a cycle), so it conflicts."""
    if not req.features:
        return
    rows = conn.execute(  # after the base, the branch's history is the branch's own commits
        text(
            "SELECT name, version FROM features WHERE table_id = :t AND registered_version > :v "
            "AND branch = :b ORDER BY registered_version"
        ),
        {"t": t, "v": req.base_version, "b": req.branch},
    ).all()
    if rows:
        names = ", ".join(f"{r.name}@{r.version}" for r in rows)
        raise CommitConflict(
            f"Cannot commit {req.op}: feature(s) {names} were registered by a concurrent commit "
            f"after version {req.base_version}; nothing was committed. Re-run the registration "
            "on the new version.",
            [("*", r.name) for r in rows],
        )


def _check_column_binding(req: CommitRequest, column_ids: dict[str, int]) -> None:
    """A file written for given column ids (``FileDescriptor.column_ids``) attaches only to those
    ids: a column replaced since (a feature re-registered with a new output type) conflicts."""
    for f in req.all_new_files():
        for name, bound in f.column_ids.items():
            head = column_ids.get(name)
            if head is not None and head != bound:
                raise CommitConflict(
                    f"Cannot commit {req.op}: column '{name}' was replaced by a concurrent commit "
                    f"(its type changed: column id {bound} is now {head}) after file {f.path} "
                    "was written for it; nothing was committed. Re-plan and run again.",
                    [(f.fragment_id, name)],
                )


def _check_group_ownership(
    conn: Connection, t: str, req: CommitRequest, segments: list[Segment]
) -> None:
    """A column group holds the outputs of one feature or raw columns, never both (a backfill
    replaces its feature's group files); checked at the head so racing commits cannot mix them."""
    if not req.new_columns:
        return
    removed = set(req.removed_columns)
    params: dict[str, Any] = {"t": t}
    vis = visible_clause("c", "columns", segments, params)
    held: dict[str, list[tuple[str, str | None, int]]] = defaultdict(list)
    for r in conn.execute(
        text(
            "SELECT name, group_name, feature, added_version FROM columns c "
            f"WHERE c.table_id = :t AND {vis} AND c.state <> 'dropped'"
        ),
        params,
    ):
        if r.name not in removed:
            held[r.group_name].append((r.name, r.feature, int(r.added_version)))
    for col in req.new_columns:
        clash = [x for x in held[col.group_name] if x[1] != col.feature]
        if not clash:
            _check_group_is_not_new(req, col, held[col.group_name])
            continue
        owner = f"outputs of feature '{clash[0][1]}'" if clash[0][1] else "raw column(s)"
        mine = f"output of feature '{col.feature}'" if col.feature else "a raw column"
        racing = any(added > req.base_version for _, _, added in clash)
        detail = (
            f"Cannot commit {req.op}: column group '{col.group_name}' holds {owner} "
            f"({', '.join(x[0] for x in clash[:5])})"
            + (", added by a concurrent commit" if racing else "")
            + f", so column '{col.name}' ({mine}) cannot be stored in it (a backfill replaces the "
            "files of its feature's group); choose another group name or rename the feature"
        )
        if racing:
            raise CommitConflict(detail, [("*", col.name)])
        raise ValidationError(detail)


def _check_group_is_not_new(
    req: CommitRequest, col: NewColumn, held: list[tuple[str, str | None, int]]
) -> None:
    """A group that did not exist at the base version but was created by a concurrent commit
    (two add_columns choosing one new group name) conflicts: the writer validated the name as
    new, and adding to an existing group would mean rewriting its files."""
    if held and all(added > req.base_version for _, _, added in held):
        raise CommitConflict(
            f"Cannot commit {req.op}: column group '{col.group_name}' was created by a "
            f"concurrent commit (column(s) {', '.join(x[0] for x in held[:5])}), so column "
            f"'{col.name}' cannot be added to it; nothing was committed. Choose another group "
            "name and retry.",
            [("*", col.name)],
        )


def current_feature_versions(conn: Connection, t: str, segments: list[Segment]) -> dict[str, str]:
    """Feature name -> its current version in ``segments`` (the order of
    :func:`feature_rows`: last wins)."""
    return {r["name"]: r["version"] for r in feature_rows(conn, t, segments)}


def _check_feature_versions(
    conn: Connection, t: str, req: CommitRequest, segments: list[Segment]
) -> None:
    """The feature versions an operation computed must still be current at the head."""
    if not req.feature_versions:
        return
    current = current_feature_versions(conn, t, segments)
    for name, version in sorted(req.feature_versions.items()):
        now = current.get(name)
        if now != version:
            raise CommitConflict(
                f"Cannot commit {req.op} of {name}@{version}: the current version of feature "
                f"'{name}' is now {now or '(none)'} (registered by a concurrent commit after the "
                "plan); nothing of this chunk was committed. Re-plan and run again.",
                [("*", name)],
            )


def _check_expected_providers(
    conn: Connection,
    t: str,
    req: CommitRequest,
    segments: list[Segment],
    column_ids: dict[str, int],
) -> None:
    """Every file the operation read (its read set) or planned to patch or replace must still
    provide its column in its fragment at the head."""
    if not req.expected_providers:
        return
    head = _head_providers(
        conn, t, segments, sorted({e.fragment_id for e in req.expected_providers})
    )
    stale = [
        e
        for e in req.expected_providers
        if head.get((e.fragment_id, column_ids.get(e.column, -1))) != e.file_id
    ]
    if not stale:
        return
    parts = []
    for role, what in (
        ("target", "the file(s) it patches or replaces for column(s) {} were replaced"),
        ("input", "its input column(s) {} were recomputed"),
    ):
        mine = [e for e in stale if e.role == role]
        if mine:
            cols = ", ".join(sorted({e.column for e in mine}))
            frags = len({e.fragment_id for e in mine})
            parts.append(
                what.format(cols) + f" in {frags} fragment(s) (e.g. {mine[0].fragment_id})"
            )
    raise CommitConflict(
        f"Cannot commit {req.op}: {' and '.join(parts)} by a concurrent commit after it planned "
        "or read them; nothing of this chunk was committed. Re-plan and run again.",
        sorted({(e.fragment_id, e.column) for e in stale}),
    )


def _head_providers(
    conn: Connection, t: str, segments: list[Segment], fragment_ids: list[str]
) -> dict[tuple[str, int], str]:
    """(fragment id, column id) -> the visible file providing it (the newest, as in
    ``Snapshot.resolve``)."""
    best: dict[tuple[str, int], tuple[int, str]] = {}
    for i in range(0, len(fragment_ids), _CHUNK):
        params: dict[str, Any] = {"t": t}
        vis = visible_clause("fi", "files", segments, params)
        marks = _bind_ids(params, fragment_ids[i : i + _CHUNK])
        rows = conn.execute(
            text(sql("column_providers", vis=vis, **{"in": f"fi.fragment_id IN ({marks})"})),
            params,
        )
        for r in rows:
            key = (r.fragment_id, int(r.column_id))
            if key not in best or int(r.added_version) > best[key][0]:
                best[key] = (int(r.added_version), r.file_id)
    return {k: v[1] for k, v in best.items()}


# -- inserts ------------------------------------------------------------------------------------


def _insert_columns(
    conn: Connection, table: Any, req: CommitRequest, version: int, column_ids: dict[str, int]
) -> int:
    next_id = table.next_column_id
    if not req.new_columns:
        return int(next_id)
    max_pos = conn.execute(
        text("SELECT COALESCE(MAX(position), -1) FROM columns WHERE table_id = :t"),
        {"t": table.table_id},
    ).scalar_one()
    rows = []
    fresh = 0
    for i, col in enumerate(req.new_columns):
        if col.column_id is None:
            cid, fresh = next_id + fresh, fresh + 1
        else:
            cid = col.column_id
        column_ids[col.name] = cid
        rows.append(
            {
                "t": table.table_id,
                "cid": cid,
                "name": col.name,
                "pn": col.physical_name or col.name,
                "dt": col.data_type,
                "nl": int(col.nullable),
                "pos": int(max_pos) + 1 + i,
                "grp": col.group_name,
                "feat": col.feature,
                "b": req.branch,
                "v": version,
            }
        )
    conn.execute(
        text(
            "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, nullable, "
            "position, state, group_name, feature, branch, added_version, removed_version) "
            "VALUES (:t, :cid, :name, :pn, :dt, :nl, :pos, 'active', :grp, :feat, :b, :v, NULL)"
        ),
        rows,
    )
    return int(next_id) + fresh


def _insert_data(
    conn: Connection, t: str, req: CommitRequest, version: int, column_ids: dict[str, int], now: str
) -> None:
    """Insert the request's new batches, fragments, files (with their columns) and lineage."""
    b = req.branch
    position = {bid: req.batch_positions.get(bid, version) for bid, _ in req.new_batches}
    if req.new_batches:
        counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for f in req.new_fragments:
            counts[f.batch_id][0] += f.row_count
            counts[f.batch_id][1] += 1
        conn.execute(
            text(sql("insert_batch")),
            [
                {"t": t, "id": bid, "name": name, "b": b, "v": version, "now": now,
                 "rows": counts[bid][0], "frags": counts[bid][1], "pos": position[bid]}
                for bid, name in req.new_batches
            ],
        )  # fmt: skip
    if req.new_fragments:
        conn.execute(
            text(sql("insert_fragment")),
            [
                {"t": t, "id": f.fragment_id, "bid": f.batch_id, "seq": f.seq,
                 "n": f.row_count, "p": f.path, "b": b, "v": version,
                 "pos": position[f.batch_id]}
                for f in req.new_fragments
            ],
        )  # fmt: skip
    files = req.all_new_files()
    if files:
        _insert_files(conn, t, req, version, files, column_ids)
    if req.lineage:
        _insert_lineage(conn, t, req, column_ids)


def _insert_files(
    conn: Connection,
    t: str,
    req: CommitRequest,
    version: int,
    files: list[FileDescriptor],
    column_ids: dict[str, int],
) -> None:
    """One ``files`` row per file (its column set and statistics), and the sets not stored yet."""
    rows, sets = [], []
    for f in files:
        column_set, stats = _file_set(f, column_ids)
        sets.append(column_set)
        rows.append(
            {"t": t, "id": f.file_id, "frag": f.fragment_id, "g": f.group_name, "p": f.path,
             "n": f.row_count, "s": f.size_bytes, "b": req.branch, "v": version,
             "r": req.run_id, "set": column_set.set_id, "st": encode_stats(column_set, stats)}
        )  # fmt: skip
    insert_missing_sets(conn, t, sets)
    conn.execute(text(sql("insert_file")), rows)


def _file_set(
    f: FileDescriptor, column_ids: dict[str, int]
) -> tuple[ColumnSet, dict[int, ColumnStats]]:
    """The column set a file carries and its statistics by column id."""
    versions: dict[int, str | None] = {}
    stats: dict[int, ColumnStats] = {}
    for name, st in f.columns.items():
        cid = column_ids[name]
        if cid in versions:
            raise ValidationError(f"Cannot commit: file {f.path} lists column '{name}' twice")
        versions[cid] = f.feature_versions.get(name)
        stats[cid] = st
    return ColumnSet.of(versions), stats


def _insert_lineage(
    conn: Connection, t: str, req: CommitRequest, column_ids: dict[str, int]
) -> None:
    conn.execute(
        text(sql("insert_lineage")),
        [
            {"t": t, "f": e.file_id, "c": column_ids[e.column], "feat": e.feature,
             "fv": e.feature_version, "inp": json.dumps(e.inputs, sort_keys=True),
             "r": e.run_id or req.run_id or "", "e": e.engine, "n": e.error_count}
            for e in req.lineage
        ],
    )  # fmt: skip


def _upsert_features(conn: Connection, t: str, req: CommitRequest, version: int, now: str) -> None:
    """One row per feature version registered (or made current again) by this commit."""
    if req.features:
        conn.execute(
            text(
                "INSERT INTO features (table_id, name, version, kind, definition, fingerprint, "
                "registered_at, registered_version, branch) VALUES (:t, :n, :v, :k, :d, :fp, "
                ":now, :rv, :b)"
            ),
            [
                {"t": t, "n": f.name, "v": f.version, "now": now, "rv": version, "k": f.kind,
                 "d": json.dumps(f.definition, sort_keys=True), "fp": f.fingerprint,
                 "b": req.branch}
                for f in req.features
            ],
        )  # fmt: skip


def _apply_removals(
    conn: Connection, t: str, req: CommitRequest, version: int, segments: list[Segment]
) -> None:
    for table, id_col, ids in (
        ("batches", "batch_id", req.removed_batches),
        ("fragments", "fragment_id", req.removed_fragments),
        ("files", "file_id", req.removed_files),
        # a removed fragment's files and vector go with it
        ("files", "fragment_id", req.removed_fragments),
        ("deletion_vectors", "fragment_id", req.removed_fragments),
    ):
        end_rows(conn, t, table, id_col, ids, req.branch, version, segments)


def _apply_deletions(
    conn: Connection, t: str, req: CommitRequest, version: int, segments: list[Segment]
) -> None:
    """Each new vector replaces its fragment's previous one (checked by :func:`_check_deletions`)."""
    replaced = [d.replaces for d in req.deletions if d.replaces is not None]
    replaced += req.removed_deletions
    end_rows(conn, t, "deletion_vectors", "vector_id", replaced, req.branch, version, segments)
    if req.deletions:
        conn.execute(
            text(sql("insert_deletion_vector")),
            [_deletion_row(t, d, req.branch, version) for d in req.deletions],
        )


def _deletion_row(t: str, d: NewDeletion, branch: str, version: int) -> dict[str, Any]:
    return {
        "t": t,
        "id": uuid.uuid4().hex,
        "f": d.fragment_id,
        "b": d.batch_id,
        "n": d.deleted_count,
        "vec": d.vector,
        "br": branch,
        "v": version,
    }
