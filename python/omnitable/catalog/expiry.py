"""Expiring old versions in the catalog: which rows no retained snapshot sees, and the one
``expire`` commit that deletes them (docs/governance.md, "Expiring versions").

**Retained snapshots.** Per live branch ``b`` with horizon ``h`` (its oldest readable own
version): its head and every version of its own commits at or after ``h``; every live tag's
version; every live branch's fork point (through the segments of every retained snapshot, see
docs/catalog.md "Resolving a snapshot"). A branch without a horizon retains all its versions.

**Points.** Each retained snapshot resolves to segments ``(s, u)``; the points of branch ``s``
are all such ``u``. A versioned row of branch ``s`` (added ``a``, removed ``r``) is visible in a
snapshot only through a segment ``(s, u)`` with ``a <= u < r``, so it is **purgeable** when it
was removed at or below ``s``'s horizon (``r <= h``) and no point ``u`` of ``s`` lies in
``[a, r)``. This is conservative: removals (which only hide rows) are ignored, so a row hidden
on a child branch but visible on its parent stays; rows of deleted branches (``~deleted~...``)
and rows never removed are never purged.
"""

from __future__ import annotations

import bisect
import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, text

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import utcnow
from omnitable.catalog.commit_sql import sql
from omnitable.catalog.horizon import ExpiryRecord, read_record, write_record
from omnitable.catalog.lease import check_held
from omnitable.catalog.records import TableRecord
from omnitable.catalog.refs import Ref, delete_tag, list_refs
from omnitable.catalog.snapshot import branch_segments
from omnitable.catalog.store import CatalogStore
from omnitable.exceptions import NotFoundError

# versioned tables and their row id (columns rows are keyed by (column_id, added_version))
VERSIONED = {
    "columns": "column_id",
    "batches": "batch_id",
    "fragments": "fragment_id",
    "files": "file_id",
    "deletion_vectors": "vector_id",
}
RowKey = tuple[str, int]  # (row id as text, added_version)


@dataclass(frozen=True)
class RefState:
    """The table's refs and commits as one expiry decision sees them."""

    branches: list[Ref]
    tags: list[Ref]
    commits: dict[int, tuple[str, str]]  # version -> (branch, committed_at)

    def own_versions(self, branch: str) -> list[int]:
        return sorted(v for v, (b, _) in self.commits.items() if b == branch)


def load_state(conn: Connection, table: TableRecord) -> RefState:
    rows = conn.execute(
        text("SELECT version, branch, committed_at FROM commits WHERE table_id = :t"),
        {"t": table.table_id},
    )
    commits = {int(r.version): (str(r.branch), str(r.committed_at)) for r in rows}
    return RefState(list_refs(conn, table, "branch"), list_refs(conn, table, "tag"), commits)


def expired_tags(tags: Iterable[Ref], now: str) -> list[Ref]:
    """Tags whose ``max_age_s`` has passed at ``now`` (ISO-8601 UTC)."""
    return [t for t in tags if t.expires_at is not None and t.expires_at <= now]


def plan_horizons(
    state: RefState, now: dt.datetime, older_than_s: float | None, retain_last: int | None
) -> dict[str, int]:
    """Per branch, the oldest version to keep: its own commits before it are older than
    ``older_than_s`` (when given) and beyond its newest ``retain_last`` (when given); the head
    is always kept. Branches with nothing to expire are left out."""
    out: dict[str, int] = {}
    cutoff = None
    if older_than_s is not None:
        cutoff = (now - dt.timedelta(seconds=older_than_s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    for ref in state.branches:
        own = [v for v in state.own_versions(ref.name) if v <= ref.version]
        keep_from = len(own) - 1  # index of the first kept version: the head at least
        if retain_last is not None:
            keep_from = min(keep_from, max(0, len(own) - retain_last))
        if cutoff is not None:
            old = sum(1 for v in own if state.commits[v][1] < cutoff)
            keep_from = min(keep_from, old)
        if keep_from > 0:
            out[ref.name] = own[keep_from]
    return out


def retained_points(
    conn: Connection, table: TableRecord, state: RefState, horizons: Mapping[str, int]
) -> dict[str, list[int]]:
    """Per branch, the sorted versions ``u`` of the segments of every retained snapshot."""
    points: dict[str, set[int]] = defaultdict(set)
    tails = {b.name: branch_segments(conn, table, b.name, b.version)[1:] for b in state.branches}
    for ref in state.branches:
        h = horizons.get(ref.name)
        points[ref.name].add(ref.version)
        points[ref.name].update(v for v in state.own_versions(ref.name) if h is None or v >= h)
        for parent, fork in tails[ref.name]:
            points[parent].add(fork)
    for tag in state.tags:
        assert tag.parent is not None
        points[tag.parent].add(tag.version)
        for parent, fork in tails.get(tag.parent, []):
            points[parent].add(fork)
    return {b: sorted(vs) for b, vs in points.items()}


def pinned_below(state: RefState, horizons: Mapping[str, int]) -> frozenset[int]:
    """Versions a ref pins (a head, a tag, a fork point) that lie below their owner's horizon:
    they stay readable (and their rows stay)."""
    pins = [b.version for b in state.branches] + [t.version for t in state.tags]
    pins += [b.fork_version for b in state.branches if b.fork_version is not None]
    out = set()
    for v in pins:
        owner = state.commits.get(v, ("", ""))[0]
        if v < horizons.get(owner, -1):
            out.add(v)
    return frozenset(out)


def purgeable_rows(
    conn: Connection,
    table: TableRecord,
    horizons: Mapping[str, int],
    points: Mapping[str, list[int]],
) -> dict[str, set[RowKey]]:
    """Per versioned table, the rows no retained snapshot sees (see the module docstring)."""
    out: dict[str, set[RowKey]] = {}
    for kind, id_col in VERSIONED.items():
        rows = conn.execute(
            text(
                f"SELECT {id_col} AS rid, branch, added_version, removed_version FROM {kind} "
                "WHERE table_id = :t AND removed_version IS NOT NULL"
            ),
            {"t": table.table_id},
        )
        found: set[RowKey] = set()
        for r in rows:
            h = horizons.get(r.branch)
            a, gone = int(r.added_version), int(r.removed_version)
            if h is None or gone > h:
                continue
            pts = points.get(r.branch, [])
            i = bisect.bisect_left(pts, a)
            if i < len(pts) and pts[i] < gone:
                continue  # a retained snapshot sees it
            found.add((str(r.rid), a))
        if found:
            out[kind] = found
    return out


def file_sizes(conn: Connection, table_id: str, files: set[RowKey]) -> list[int]:
    """The stored sizes of these ``files`` rows."""
    out = []
    for fid, _ in sorted(files):
        size = conn.execute(
            text("SELECT size_bytes FROM files WHERE table_id = :t AND file_id = :f"),
            {"t": table_id, "f": fid},
        ).scalar()
        out.append(int(size or 0))
    return out


@dataclass
class ExpiryOutcome:
    """What an expire commit did. ``paths``: data files (relative path -> bytes) no remaining
    ``files`` row references, to delete after the commit."""

    version: int
    horizons: dict[str, int]
    kept: list[int]
    deleted_tags: list[str]
    purged: dict[str, int]
    paths: dict[str, int] = field(default_factory=dict)


def commit_expiry(
    store: CatalogStore,
    table_id: str,
    *,
    branch: str,
    horizons: Mapping[str, int],
    tags_to_delete: Mapping[str, str],
    planned: Mapping[str, set[RowKey]],
    run_id: str | None = None,
) -> ExpiryOutcome:
    """One ``expire`` commit on ``branch`` under the table lock: re-reads the refs (a ref
    created or moved since the plan pins what it reaches), deletes the planned tags
    (``name -> created_at``) that are still the same and expired, deletes the planned rows that
    are still purgeable, records the horizons (catalog/horizon.py).

    Raises:
        NotFoundError: the table was dropped.
    """
    with store.write(failpoints="commit") as conn:
        store.lock_table(conn, table_id)
        row = conn.execute(text("SELECT * FROM tables WHERE table_id = :t"), {"t": table_id})
        table_row = row.first()
        if table_row is None:
            raise NotFoundError(f"Cannot expire versions: the table (id {table_id}) was dropped")
        check_held(conn, table_id)
        table = TableRecord.from_row(table_row)
        now = utcnow()
        deleted = _delete_tags(conn, table, tags_to_delete, now)
        state = load_state(conn, table)
        effective = _merged_horizons(read_record(conn, table_id), horizons, state)
        points = retained_points(conn, table, state, effective)
        fresh = purgeable_rows(conn, table, effective, points)
        purge = {k: fresh[k] & planned.get(k, set()) for k in fresh}
        purge = {k: rows for k, rows in purge.items() if rows}
        paths = _purge(conn, table_id, purge)
        failpoint("expire.mid_commit")
        kept = pinned_below(state, effective)
        counts = {k: len(v) for k, v in sorted(purge.items())}
        version = _record(conn, table, branch, effective, kept, deleted, counts, run_id)
        write_record(conn, table_id, ExpiryRecord(effective, kept, version))
        failpoint("expire.before_end")
    return ExpiryOutcome(version, effective, sorted(kept), deleted, counts, paths)


def _delete_tags(
    conn: Connection, table: TableRecord, planned: Mapping[str, str], now: str
) -> list[str]:
    """Delete the planned tags still present with the same ``created_at`` and expired."""
    current = {t.name: t for t in list_refs(conn, table, "tag")}
    out = []
    for name, created in sorted(planned.items()):
        tag = current.get(name)
        if tag is not None and tag.created_at == created and expired_tags([tag], now):
            delete_tag(conn, table, name)
            out.append(name)
    return out


def _merged_horizons(
    prev: ExpiryRecord | None, planned: Mapping[str, int], state: RefState
) -> dict[str, int]:
    """The planned horizons, never below an earlier expiry's, for live branches only (a branch
    deleted since the plan drops out; one re-created under its name only has newer commits)."""
    live = {b.name for b in state.branches}
    out = dict(prev.horizons) if prev is not None else {}
    for b, h in planned.items():
        out[b] = max(h, out.get(b, h))
    return {b: h for b, h in out.items() if b in live}


def _purge(conn: Connection, t: str, purge: Mapping[str, set[RowKey]]) -> dict[str, int]:
    """Delete the rows (with their removals and lineage); returns the data files only they
    referenced (path -> bytes)."""
    files = sorted(purge.get("files", set()))
    sizes: dict[str, int] = {}
    for fid, _ in files:
        r = conn.execute(
            text("SELECT path, size_bytes FROM files WHERE table_id = :t AND file_id = :f"),
            {"t": t, "f": fid},
        ).first()
        if r is not None:
            sizes[str(r.path)] = int(r.size_bytes)
    for kind, rows in purge.items():
        id_col = VERSIONED[kind]
        params = [{"t": t, "i": _id(kind, rid), "a": a} for rid, a in sorted(rows)]
        conn.execute(
            text(
                f"DELETE FROM {kind} WHERE table_id = :t AND {id_col} = :i AND added_version = :a"
            ),
            params,
        )
        removal = [{"t": t, "k": kind, "i": rid, "a": a} for rid, a in sorted(rows)]
        conn.execute(
            text(
                "DELETE FROM removals WHERE table_id = :t AND kind = :k AND row_id = :i "
                "AND row_version = :a"
            ),
            removal,
        )
    if files:
        conn.execute(
            text("DELETE FROM lineage WHERE table_id = :t AND file_id = :f"),
            [{"t": t, "f": fid} for fid, _ in files],
        )
    still = {
        str(p)
        for p in sizes
        if conn.execute(
            text("SELECT 1 FROM files WHERE table_id = :t AND path = :p"), {"t": t, "p": p}
        ).first()
        is not None
    }
    return {p: s for p, s in sizes.items() if p not in still}


def _id(kind: str, rid: str) -> Any:
    return int(rid) if kind == "columns" else rid


def _record(
    conn: Connection,
    table: TableRecord,
    branch: str,
    horizons: Mapping[str, int],
    kept: frozenset[int],
    deleted_tags: list[str],
    purged: Mapping[str, int],
    run_id: str | None,
) -> int:
    """The ``expire`` commit row (its summary holds the horizons) and the branch moved to it."""
    t = table.table_id
    head = conn.execute(
        text("SELECT version FROM refs WHERE table_id = :t AND name = :b AND kind = 'branch'"),
        {"t": t, "b": branch},
    ).scalar()
    if head is None:
        raise NotFoundError(f"Cannot expire versions: branch '{branch}' of '{table.name}' is gone")
    version = int(conn.execute(text(sql("next_version")), {"t": t}).scalar_one())
    last = conn.execute(text(sql("last_commit_time")), {"t": t}).scalar()
    now = utcnow()
    now = now if last is None or now >= last else str(last)
    summary = {"horizons": dict(horizons), "kept": sorted(kept), "deleted_tags": deleted_tags,
               "purged_rows": dict(purged)}  # fmt: skip
    conn.execute(
        text(sql("insert_commit")),
        {"t": t, "v": version, "p": int(head), "b": branch, "op": "expire", "r": run_id,
         "s": json.dumps(summary, sort_keys=True), "now": now, "tok": None},
    )  # fmt: skip
    conn.execute(text(sql("move_ref")), {"v": version, "t": t, "b": branch})
    return version
