"""The catalog facade: tables, snapshots, commits, row-id reservations, runs and history.

All catalog writes of OmniTable go through this class (Python owns the catalog; the JVM reads
it and writes only namespace rows, with the same statements: docs/catalog.md, "Namespaces").
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import uuid
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from sqlalchemy import Boolean, text
from sqlalchemy.exc import IntegrityError

from omnitable._failpoints import failpoint
from omnitable.catalog import branch_merge, lineage, namespaces, refs
from omnitable.catalog.address import CatalogAddress
from omnitable.catalog.commit import (
    CommitRequest,
    NewColumn,
    commit,
    find_commit,
    utcnow,
)
from omnitable.catalog.commit_sql import sql
from omnitable.catalog.features import feature_rows
from omnitable.catalog.horizon import read_record
from omnitable.catalog.provider_count import count_providers_in_catalog
from omnitable.catalog.records import ColumnRecord, CommitRecord, TableRecord
from omnitable.catalog.snapshot import (
    FULL_SCOPE,
    Snapshot,
    SnapshotScope,
    all_columns,
    batch_counts,
    load_segments,
    load_snapshot,
    segments_for,
    within_clause,
)
from omnitable.catalog.snapshot_cache import SnapshotCache
from omnitable.catalog.snapshot_cache import key as cache_key
from omnitable.catalog.sql import gc_paused
from omnitable.catalog.store import CatalogStore
from omnitable.exceptions import (
    AlreadyExistsError,
    CatalogError,
    CommitOutcomeUnknown,
    NotFoundError,
    ValidationError,
)
from omnitable.vocabulary.names import (
    BASE_GROUP,
    MAIN,
    MAX_ROW_ID,
    ROW_ID,
    split_table_address,
    table_address,
)

HEARTBEAT_S = 30.0  # a running run refreshes heartbeat_at this often
ABANDONED_AFTER_S = 300.0  # a running run without a heartbeat for this long is abandoned
# How long a commit lookup waits for the table lock a lost transaction may still hold (PostgreSQL
# keeps it until the server notices the dead connection, which can take hours).
LOOKUP_LOCK_TIMEOUT_S = 60.0


class Catalog:
    """One warehouse's catalog.

    Args:
        address: the catalog database.
        root: data root URI/path to record when the catalog is new; checked against the stored
            one otherwise. For SQLite it defaults to the catalog's directory (stored as ``.``).
    """

    def __init__(self, address: CatalogAddress, root: str | None = None) -> None:
        self.address = address
        self.store = CatalogStore(address)
        self._heartbeats: dict[str, _Heartbeat] = {}
        self.snapshots = SnapshotCache()  # reads' snapshots by resolved segments
        try:
            self.store.ensure_schema()
            self.root = self._resolve_root(root)
        except BaseException:
            self.store.close()
            raise

    def _resolve_root(self, root: str | None) -> str:
        stored = self.store.get_meta("root")
        if stored is None:
            if root is None:
                if self.address.sqlite_dir is None:
                    raise ValidationError(
                        f"Cannot create warehouse {self.address.redacted()}: a PostgreSQL catalog "
                        "needs a data root the first time, e.g. connect(uri, root='s3://bucket/wh')"
                    )
                value = "."
            else:
                value = _normalize_root(root, self.address)
            stored = self.store.set_meta_if_absent("root", value)
        elif root is not None and _normalize_root(root, self.address) != stored:
            raise ValidationError(
                f"Cannot open warehouse {self.address.redacted()} with root '{root}': its data "
                f"root is '{self._absolute(stored)}'; omit root or pass that one"
            )
        return self._absolute(stored)

    def _absolute(self, stored: str) -> str:
        if stored == ".":
            assert self.address.sqlite_dir is not None
            return str(self.address.sqlite_dir)
        return stored

    def close(self) -> None:
        for beat in self._heartbeats.values():
            beat.stop()
        self._heartbeats.clear()
        self.store.close()

    # -- tables ---------------------------------------------------------------------------

    def create_table(
        self, name: str, columns: list[NewColumn], properties: dict[str, Any] | None = None
    ) -> TableRecord:
        """Create table ``name`` (``web`` or ``namespace.web``) in an existing namespace."""
        namespace, short = split_table_address(name)
        address = table_address(namespace, short)
        table_id = uuid.uuid4().hex
        try:
            self._insert_table(namespace, short, table_id, columns, properties)
        except IntegrityError as exc:  # a concurrent create_table of the same name won
            raise AlreadyExistsError(
                f"Cannot create table '{address}': it was created concurrently by another process"
            ) from exc
        return self.get_table(address)

    def _insert_table(
        self,
        namespace: str,
        name: str,
        table_id: str,
        columns: list[NewColumn],
        properties: dict[str, Any] | None,
    ) -> None:
        now = utcnow()
        address = table_address(namespace, name)
        with self.store.write() as conn:
            namespaces.lock_for_create(conn, namespace, self.store.is_sqlite, address)
            found = conn.execute(
                text("SELECT 1 FROM tables WHERE namespace = :ns AND name = :n"),
                {"ns": namespace, "n": name},
            )
            if found.first():
                raise AlreadyExistsError(f"Cannot create table '{address}': it already exists")
            failpoint("catalog.create_table")
            conn.execute(
                text(
                    "INSERT INTO tables (table_id, namespace, name, location, next_row_id, "
                    "next_column_id, properties, created_at) "
                    "VALUES (:id, :ns, :n, :loc, 0, 1, :p, :now)"
                ),
                {
                    "id": table_id,
                    "ns": namespace,
                    "n": name,
                    "loc": f"{address}-{table_id}",  # unique per table id (see drop_table)
                    "p": json.dumps(properties or {}, sort_keys=True),
                    "now": now,
                },
            )
            rows = [
                {
                    "t": table_id,
                    "cid": 0,
                    "name": ROW_ID,
                    "dt": "bigint",
                    "nl": 0,
                    "pos": 0,
                    "grp": BASE_GROUP,
                }
            ]
            for i, col in enumerate(columns, start=1):
                rows.append(
                    {
                        "t": table_id,
                        "cid": i,
                        "name": col.name,
                        "dt": col.data_type,
                        "nl": int(col.nullable),
                        "pos": i,
                        "grp": col.group_name,
                    }
                )
            conn.execute(
                text(
                    "INSERT INTO columns (table_id, column_id, name, physical_name, data_type, "
                    "nullable, position, state, group_name, feature, branch, added_version, "
                    "removed_version) VALUES (:t, :cid, :name, :name, :dt, :nl, :pos, 'active', "
                    ":grp, NULL, 'main', 0, NULL)"
                ),
                rows,
            )
            conn.execute(
                text("UPDATE tables SET next_column_id = :c WHERE table_id = :t"),
                {"c": len(columns) + 1, "t": table_id},
            )
            conn.execute(
                text(
                    "INSERT INTO commits (table_id, version, parent_version, branch, op, run_id, "
                    "summary, committed_at) VALUES (:t, 0, NULL, 'main', 'create', NULL, :s, :now)"
                ),
                {"t": table_id, "s": json.dumps({"columns": len(columns)}), "now": now},
            )
            conn.execute(
                text(
                    "INSERT INTO refs (table_id, name, kind, version, parent_branch, fork_version, "
                    "created_at) VALUES (:t, 'main', 'branch', 0, NULL, NULL, :now)"
                ),
                {"t": table_id, "now": now},
            )

    def get_table(self, name: str) -> TableRecord:
        """Table ``name`` (``web``: in ``default``; ``ns.web``: in ``ns``). Raises NotFoundError."""
        namespace, short = split_table_address(name)
        with self.store.read() as conn:
            row = conn.execute(
                text("SELECT * FROM tables WHERE namespace = :ns AND name = :n"),
                {"ns": namespace, "n": short},
            ).first()
            known = row is not None or namespaces.exists(conn, namespace)  # only for the error
        if row is None:
            where = "" if known else f" (namespace '{namespace}' does not exist)"
            listed = ", ".join(self.list_tables(namespace if known else None)) or "none"
            raise NotFoundError(f"Cannot find table '{name}'{where}; existing tables: {listed}")
        return TableRecord.from_row(row)

    def list_tables(self, namespace: str | None = None) -> list[str]:
        """Addresses of the tables of ``namespace`` (all namespaces when None), sorted: a
        table of ``default`` by its name, any other as ``namespace.name``."""
        query = "SELECT namespace, name FROM tables"
        if namespace is not None:
            query += " WHERE namespace = :ns"
        with self.store.read() as conn:
            if namespace is not None and not namespaces.exists(conn, namespace):
                raise namespaces.missing(conn, namespace, "list the tables of")
            rows = conn.execute(text(query), {"ns": namespace}).all()
        return sorted(table_address(r.namespace, r.name) for r in rows)

    # -- namespaces -----------------------------------------------------------------------

    def create_namespace(self, name: str, properties: dict[str, Any] | None = None) -> None:
        """Raises AlreadyExistsError, ValidationError."""
        try:
            with self.store.write() as conn:
                namespaces.create(conn, name, dict(properties or {}), utcnow())
        except IntegrityError as exc:  # a concurrent create of the same name won
            raise AlreadyExistsError(
                f"Cannot create namespace '{name}': it was created concurrently by another process"
            ) from exc

    def list_namespaces(self) -> list[str]:
        with self.store.read() as conn:
            return namespaces.names(conn)

    def namespace_properties(self, name: str) -> dict[str, Any]:
        """Raises NotFoundError."""
        with self.store.read() as conn:
            return namespaces.properties(conn, name)

    def drop_namespace(self, name: str, cascade: bool = False) -> list[TableRecord]:
        """Delete namespace ``name`` and, with ``cascade``, every catalog row of its tables (one
        transaction); returns the dropped tables' records (their files are the caller's).

        Raises:
            NotFoundError; ValidationError: ``default``, or tables left and no ``cascade``.
        """
        with self.store.write() as conn:
            held = namespaces.delete(conn, name)
            if held and not cascade:
                listed = ", ".join(table_address(name, n) for _, n in held)
                raise ValidationError(
                    f"Cannot drop namespace '{name}': it holds tables ({listed}); drop them "
                    "first, or drop the namespace with cascade (DROP NAMESPACE ... CASCADE, "
                    "`omnitable namespace drop --cascade`)"
                )
            records = []
            for table_id, _ in held:
                row = conn.execute(
                    text("SELECT * FROM tables WHERE table_id = :t"), {"t": table_id}
                ).first()
                records.append(TableRecord.from_row(row))
                self._delete_table_rows(conn, table_id)
        return records

    def drop_table(self, name: str) -> TableRecord:
        """Delete every catalog row of the table in one transaction; returns its record."""
        table = self.get_table(name)
        with self.store.write() as conn:
            self._delete_table_rows(conn, table.table_id)
        return table

    def _delete_table_rows(self, conn: Any, table_id: str) -> None:
        self.store.lock_table(conn, table_id)
        for t in (
            "lineage",
            "column_sets",
            "deletion_vectors",
            "removals",
            "files",
            "fragments",
            "batches",
            "columns",
            "refs",
            "commits",
            "features",
            "runs",
            "error_tables",
            "tables",
        ):
            conn.execute(text(sql("delete_table_rows", kind=t)), {"t": table_id})

    # -- snapshots and commits ----------------------------------------------------------------

    def snapshot(
        self,
        table: TableRecord,
        *,
        branch: str | None = None,
        tag: str | None = None,
        version: int | None = None,
        with_files: bool = True,
        scope: SnapshotScope = FULL_SCOPE,
        reuse: bool = False,
    ) -> Snapshot:
        """One snapshot, only its ``scope`` loaded (see :func:`load_snapshot`). ``reuse``: a
        read's snapshot, served from the snapshots this connection loaded for the same resolved
        segments when there is one (:mod:`omnitable.catalog.snapshot_cache`; writers load
        their own)."""
        with self.store.read() as conn:
            if not reuse:
                return load_snapshot(conn, table, branch=branch, tag=tag, version=version,
                                     with_files=with_files, scope=scope)  # fmt: skip
            if not with_files:
                scope = replace(scope, files=False)
            segments, resolved, commit_branch = segments_for(
                conn, table, branch=branch, tag=tag, version=version
            )
            k = cache_key(table.table_id, segments, resolved, commit_branch, scope)
            found = self.snapshots.get(k, table)
            if found is not None:
                return found
            snap = load_segments(conn, table, segments, resolved, commit_branch, scope)
            self.snapshots.put(k, snap)
            return snap

    def count_providers(
        self, snap: Snapshot, fragment_ids: Collection[str], column_ids: list[int]
    ) -> int:
        """``snap.count_providers(fragment_ids, column_ids)`` for a snapshot of every batch
        loaded without its files: counted by the catalog
        (:func:`omnitable.catalog.provider_count.count_providers_in_catalog`)."""
        with self.store.read() as conn:
            return count_providers_in_catalog(conn, snap, fragment_ids, column_ids)

    def batch_counts(
        self, table: TableRecord, version: int | None = None, branch: str | None = None
    ) -> list[tuple[str, int, int, str]]:
        """The visible batches at ``version`` (None: the head of ``branch``, default main) of
        ``branch``'s history (None: any version), oldest first: (name, rows, fragments,
        created_at), as stored; no column, fragment or file is loaded.

        Raises:
            NotFoundError: unknown version, or one outside ``branch``'s history.
        """
        with self.store.read() as conn:
            segments, _, _ = segments_for(conn, table, branch=branch, version=version)
            return batch_counts(conn, table, segments)

    def all_columns(self, table: TableRecord, branch: str = MAIN) -> tuple[int, list[ColumnRecord]]:
        """The head of ``branch`` and its visible columns, retired ones included."""
        with self.store.read() as conn:
            segments, version, _ = segments_for(conn, table, branch=branch)
            return version, all_columns(conn, table, segments)

    def head_version(self, table: TableRecord, branch: str = MAIN) -> int:
        with self.store.read() as conn:
            return segments_for(conn, table, branch=branch)[1]

    def commit(self, table: TableRecord, request: CommitRequest) -> int:
        """Apply ``request`` (see :func:`omnitable.catalog.commit.commit`).

        When the connection is lost during the transaction (the outcome of COMMIT is unknown),
        the catalog is asked whether the commit landed (by its token) before any error is
        raised: it returns the version when it did.

        Raises:
            CommitOutcomeUnknown: the connection was lost and the catalog cannot be asked; the
                caller must keep the files it wrote (the commit may reference them).
        """
        try:
            return commit(self.store, table.table_id, request)
        except CatalogError as exc:
            version = self._lookup_commit(table, request, exc)
            if version is None:
                raise
            return version

    def _lookup_commit(
        self, table: TableRecord, request: CommitRequest, cause: CatalogError
    ) -> int | None:
        try:
            with self.store.write() as conn:  # waits for the lost transaction's row lock
                if not self.store.is_sqlite:  # (SQLite's wait is bounded by its busy timeout)
                    ms = max(1, int(LOOKUP_LOCK_TIMEOUT_S * 1000))
                    conn.execute(text(f"SET LOCAL lock_timeout = {ms}"))
                self.store.lock_table(conn, table.table_id)
                failpoint("commit.lookup")
                return find_commit(conn, table.table_id, request.token)
        except CatalogError as exc:
            raise CommitOutcomeUnknown(
                f"Cannot confirm the {request.op} commit on table '{table.name}': the catalog "
                f"connection was lost during the commit ({cause}) and the catalog could not be "
                f"asked whether it landed ({exc}); its files were kept. Check Table.history() "
                f"for commit token {request.token} once the catalog is back.",
                request.token,
            ) from cause

    def reserve_row_ids(self, table: TableRecord, count: int) -> int:
        """Reserve ``count`` fresh ``_ai_unique_id_`` values; returns the first one."""
        if count < 0:
            raise ValidationError(f"Cannot reserve {count} row ids")
        with self.store.write() as conn:
            self.store.lock_table(conn, table.table_id)
            start = conn.execute(text(sql("next_row_id")), {"t": table.table_id}).scalar()
            if start is None:
                raise NotFoundError(f"Cannot reserve row ids: table '{table.name}' was dropped")
            if int(start) + count > MAX_ROW_ID:
                raise ValidationError(
                    f"Cannot reserve {count} row ids on table '{table.name}': the {ROW_ID} space "
                    f"is exhausted (next free id {start}, largest {MAX_ROW_ID}; supplied ids "
                    "moved it there); supply the ids of new rows instead"
                )
            conn.execute(
                text(sql("set_next_row_id")), {"n": int(start) + count, "t": table.table_id}
            )
        return int(start)

    def history(
        self, table: TableRecord, branch: str = MAIN, limit: int | None = None
    ) -> list[CommitRecord]:
        """Commits in the ancestry of ``branch``'s head, newest first (the ``limit`` newest)."""
        with self.store.read() as conn:
            segments, _, _ = segments_for(conn, table, branch=branch)
            params: dict[str, Any] = {"t": table.table_id}
            within = within_clause("version", segments, params)
            rows = conn.execute(
                text(
                    "SELECT version, parent_version, branch, op, run_id, summary, committed_at, "
                    f"1 = 0 AS expired FROM commits WHERE table_id = :t AND {within} "
                    "ORDER BY version DESC" + ("" if limit is None else f" LIMIT {int(limit)}")
                ).columns(expired=Boolean),
                params,
            )
            with gc_paused():
                out = list(map(CommitRecord._make, rows.all()))
            record = read_record(conn, table.table_id)  # marks the versions an expiry gave up
            if record is not None:
                out = [c._replace(expired=True) if record.expired(c.branch, c.version) else c
                       for c in out]  # fmt: skip
            return out

    # -- branches and tags ------------------------------------------------------------------

    def create_ref(
        self,
        table: TableRecord,
        name: str,
        kind: str,
        *,
        source: str = MAIN,
        version: int | None = None,
        max_age_s: int | None = None,
    ) -> refs.Ref:
        """Add branch or tag ``name`` at ``version`` of branch ``source``'s history (None: its
        head); only a ``refs`` row is written (see :mod:`omnitable.catalog.refs`).

        Raises:
            NotFoundError: unknown source branch or version. AlreadyExistsError: name taken.
        """
        with self.store.write() as conn:
            self.store.lock_table(conn, table.table_id)
            owner, at = refs.source_version(conn, table, source, version)
            ref = refs.Ref(name, kind, at, owner, at if kind == "branch" else None, utcnow(),
                           max_age_s)  # fmt: skip
            refs.insert_ref(conn, table, ref)
        return ref

    def delete_ref(self, table: TableRecord, name: str, kind: str) -> refs.Ref:
        """Delete branch or tag ``name`` (see :func:`omnitable.catalog.refs.delete_branch`)."""
        with self.store.write() as conn:
            self.store.lock_table(conn, table.table_id)
            if kind == "branch":
                return refs.delete_branch(conn, table, name)
            return refs.delete_tag(conn, table, name)

    def merge_base(self, table: TableRecord, source: str, target: str) -> tuple[str, int]:
        """See :func:`omnitable.catalog.branch_merge.merge_base`."""
        with self.store.read() as conn:
            return branch_merge.merge_base(conn, table, source, target)

    def fast_forward(self, table: TableRecord, source: str, target: str, source_head: int) -> int:
        """See :func:`omnitable.catalog.branch_merge.fast_forward` (under the table lock)."""
        with self.store.write(failpoints="commit") as conn:
            self.store.lock_table(conn, table.table_id)
            return branch_merge.fast_forward(conn, table, source, target, source_head)

    def can_fast_forward(self, table: TableRecord, source: str, target: str) -> bool:
        with self.store.read() as conn:
            return branch_merge.can_fast_forward(conn, table, source, target)

    def columns_at(self, table: TableRecord, branch: str, version: int) -> list[ColumnRecord]:
        """The columns visible at ``version`` of ``branch``'s history, retired ones included."""
        with self.store.read() as conn:
            segments, _, _ = segments_for(conn, table, branch=branch, version=version)
            return all_columns(conn, table, segments)

    def lineage_of(self, table: TableRecord, file_ids: list[str]) -> list[dict[str, Any]]:
        """The lineage rows of these files (see :func:`omnitable.catalog.lineage.rows_of`)."""
        return lineage.rows_of(self.store, table.table_id, file_ids)

    def list_refs(self, table: TableRecord, kind: str) -> list[refs.Ref]:
        """The table's branches or tags, by name."""
        with self.store.read() as conn:
            return refs.list_refs(conn, table, kind)

    def get_ref(self, table: TableRecord, name: str, kind: str) -> refs.Ref:
        with self.store.read() as conn:
            return refs.get_ref(conn, table, name, kind)

    # -- features -------------------------------------------------------------------------

    def feature_rows(
        self,
        table: TableRecord,
        name: str | None = None,
        branch: str = MAIN,
        version: int | None = None,
    ) -> list[dict[str, Any]]:
        """Feature registrations visible at ``version`` (default: the head) of ``branch``,
        oldest first in catalog (commit) order, optionally of one name (the current version of
        a feature is its last)."""
        with self.store.read() as conn:
            segments, _, _ = segments_for(conn, table, branch=branch, version=version)
            rows = feature_rows(conn, table.table_id, segments, name)
        return [{**r, "definition": json.loads(r["definition"])} for r in rows]

    # -- lineage ----------------------------------------------------------------------------

    def read_sets(self, table: TableRecord, snap: Snapshot) -> dict[str, dict[str, str | None]]:
        """Read set of every derived file visible in ``snap``: file id -> input column -> file."""
        return lineage.read_sets(self.store, table.table_id, snap)

    def column_lineage(
        self, table: TableRecord, snap: Snapshot, column_id: int
    ) -> list[dict[str, Any]]:
        """Lineage of one column's files visible in ``snap`` (see catalog.lineage)."""
        return lineage.column_lineage(self.store, table.table_id, snap, column_id)

    # -- record-level errors ----------------------------------------------------------------

    def error_counts(self, table: TableRecord) -> dict[tuple[str, int], int]:
        """(file_id, column_id) -> failed records, for derived files that have any."""
        with self.store.read() as conn:
            rows = conn.execute(
                text(
                    "SELECT file_id, column_id, error_count FROM lineage "
                    "WHERE table_id = :t AND error_count > 0"
                ),
                {"t": table.table_id},
            )
            return {(r.file_id, int(r.column_id)): int(r.error_count) for r in rows}

    def register_error_table(self, table: TableRecord, location: str) -> None:
        """Record where the table's error table lives (idempotent)."""
        with self.store.write() as conn:
            found = conn.execute(
                text("SELECT location FROM error_tables WHERE table_id = :t"), {"t": table.table_id}
            ).first()
            if found is None:
                conn.execute(
                    text(
                        "INSERT INTO error_tables (table_id, location, created_at) "
                        "VALUES (:t, :l, :now)"
                    ),
                    {"t": table.table_id, "l": location, "now": utcnow()},
                )

    # -- runs -----------------------------------------------------------------------------

    def start_run(self, table: TableRecord, kind: str, plan: dict[str, Any] | None = None) -> str:
        """Record a running run of this process (host, pid) and keep its heartbeat fresh until
        :meth:`finish_run`."""
        run_id = f"{kind}-{uuid.uuid4().hex[:16]}"
        now = utcnow()
        with self.store.write() as conn:
            conn.execute(
                text(sql("start_run")),  # the statement JVM appends run too (commit.sql)
                {
                    "r": run_id,
                    "t": table.table_id,
                    "k": kind,
                    "p": json.dumps(plan or {}, sort_keys=True, default=str),
                    "now": now,
                    "host": socket.gethostname(),
                    "pid": os.getpid(),
                    "now2": now,
                },
            )
        beat = _Heartbeat(self.store, run_id)
        self._heartbeats[run_id] = beat
        beat.start()
        return run_id

    def finish_run(
        self,
        run_id: str,
        status: str,
        metrics: dict[str, Any] | None = None,
        message: str | None = None,
    ) -> None:
        beat = self._heartbeats.pop(run_id, None)
        if beat is not None:
            beat.stop()
        with self.store.write() as conn:
            failpoint("run.finish")
            conn.execute(
                text(sql("finish_run")),
                {
                    "s": status,
                    "m": json.dumps(metrics or {}, sort_keys=True, default=str),
                    "msg": message,
                    "now": utcnow(),
                    "r": run_id,
                },
            )

    def fail_run(
        self,
        run_id: str,
        exc: BaseException,
        metrics: dict[str, Any] | None = None,
        status: str = "failed",
    ) -> None:
        """Record ``run_id`` as ended by ``exc`` (``failed`` or ``aborted``), which the caller is
        raising. A catalog that cannot be reached is ignored here so that it never masks ``exc``
        (e.g. a :class:`CommitOutcomeUnknown` and its token); the run is then reported
        ``abandoned`` once its heartbeat is overdue."""
        with contextlib.suppress(CatalogError):
            self.finish_run(run_id, status, metrics, message=str(exc)[:2000])

    def get_run(self, run_id: str) -> dict[str, Any]:
        """One run (with its ``table`` address); ``status`` is ``abandoned`` for a ``running``
        run whose driver is gone."""
        with self.store.read() as conn:
            row = conn.execute(text(f"{_RUNS} WHERE r.run_id = :r"), {"r": run_id}).first()
        if row is None:
            raise NotFoundError(f"Cannot find run '{run_id}'")
        return _run_dict(row)

    def list_runs(
        self, table: TableRecord | None, limit: int | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """The runs of ``table`` (of every table when None), newest first, with their ``table``
        address and ``abandoned`` status as in :meth:`get_run`; only those of ``status`` and
        the ``limit`` newest when given.

        Raises:
            ValidationError: ``limit`` is not a positive int or ``status`` not a run status.
        """
        check_run_filters(limit, status)
        where, args = [], {}
        if table is not None:
            where.append("r.table_id = :t")
            args["t"] = table.table_id
        if status is not None:  # abandoned runs are stored as running
            where.append("r.status = :s")
            args["s"] = "running" if status == "abandoned" else status
        query = _RUNS + (" WHERE " + " AND ".join(where) if where else "")
        query += " ORDER BY r.started_at DESC, r.run_id"
        exact = status not in ("running", "abandoned")  # else filtered after the liveness check
        if limit is not None and exact:
            query += f" LIMIT {int(limit)}"
        with self.store.read() as conn:
            rows = conn.execute(text(query), args).all()
        runs = [_run_dict(r) for r in rows]
        if not exact:
            runs = [r for r in runs if r["status"] == status]
        return runs if limit is None else runs[:limit]


RUN_STATUSES = ("running", "succeeded", "failed", "aborted", "abandoned")
_RUNS = (
    "SELECT r.*, t.namespace AS table_namespace, t.name AS table_short_name FROM runs r "
    "LEFT JOIN tables t ON t.table_id = r.table_id"
)


def check_run_filters(limit: int | None, status: str | None) -> None:
    """Raises ValidationError for a ``limit`` that is not a positive int or an unknown
    ``status``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValidationError(
            f"Cannot list runs: limit must be a positive integer or None, got {limit!r}"
        )
    if status is not None and status not in RUN_STATUSES:
        raise ValidationError(
            f"Cannot list runs: status must be one of {', '.join(RUN_STATUSES)}, got {status!r}"
        )


class _Heartbeat:
    """Refreshes a running run's ``heartbeat_at`` every HEARTBEAT_S from a daemon thread."""

    def __init__(self, store: CatalogStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _loop(self) -> None:
        while not self._stopped.wait(HEARTBEAT_S):
            try:
                with self.store.write() as conn:
                    conn.execute(text(sql("heartbeat_run")), {"now": utcnow(), "r": self.run_id})
            except CatalogError:  # the catalog is away for a while; the next beat retries
                continue


def _run_dict(row: Any) -> dict[str, Any]:
    d = dict(row._mapping)
    namespace, short = d.pop("table_namespace", None), d.pop("table_short_name", None)
    d["table"] = table_address(namespace, short) if namespace and short else None
    for k in ("plan", "metrics"):
        d[k] = json.loads(d[k]) if d[k] else {}
    if d["status"] == "running" and _driver_gone(d["host"], d["pid"], d["heartbeat_at"]):
        d["status"] = "abandoned"
    return d


def _driver_gone(host: str | None, pid: int | None, heartbeat_at: str | None) -> bool:
    """True when the run's driver process is dead on this host, or silent for too long."""
    if host == socket.gethostname() and pid is not None:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, owned by another user
            pass
    if heartbeat_at is None:
        return False
    beat = dt.datetime.strptime(heartbeat_at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=dt.timezone.utc
    )
    age = (dt.datetime.now(dt.timezone.utc) - beat).total_seconds()
    return age > ABANDONED_AFTER_S


def _normalize_root(root: str, address: CatalogAddress) -> str:
    if not isinstance(root, str) or not root.strip():
        raise ValidationError(f"Cannot use data root {root!r}: give a local path or a URI")
    if "://" in root:
        return root.rstrip("/")
    from pathlib import Path

    path = Path(root).expanduser().resolve()
    if address.sqlite_dir is not None and path == address.sqlite_dir:
        return "."
    return str(path)
