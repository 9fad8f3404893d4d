"""``Table.upsert``: insert new keys as a new batch, merge existing keys in place (docs/dataops.md).

One commit per upsert:

- rows whose key no live row holds are **inserted** as one new batch (fragments with generated
  ``_ai_unique_id_`` and one key index file each, omnitable.format.keyindex);
- rows whose key a live row holds are **merged** by the policy (omnitable.dataops.policies)
  and written like ``Table.update``: one rewritten file of the merged columns per touched
  fragment and column group (never another column, never the key);
- **rejected** rows (a NULL key, a key given twice, a row the custom policy fails on) go to the
  table's error table and are returned in :attr:`UpsertResult.rejected`; they never reach the data.

Concurrency: the commit re-checks its keys against every row change committed since it read
the index (:class:`~omnitable.catalog.commit.KeysNotChecked`); a concurrent upsert that inserted
one it inserts, a delete of a row it found, or a write of a cell it merges makes it conflict,
and it re-plans on the new head (up to :data:`MAX_ATTEMPTS`): concurrent upserts of one key
apply one after the other, each under its policy, in commit order, and an upsert committed after
a delete of its key inserts the key again.
"""

from __future__ import annotations

import datetime as dt
import getpass
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, KeysNotChecked, LineageEntry
from omnitable.catalog.records import ColumnRecord, FragmentRecord
from omnitable.catalog.runs import RunScope
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.dataops.keyed import (
    Screened,
    collision_message,
    key_repr,
    locate,
    read_found,
    require_key,
    same_keys,
    screen,
)
from omnitable.dataops.policies import MergePolicy, merge, resolve_policy
from omnitable.dataops.update import patched, rewrite_file, rewrite_lineage
from omnitable.exceptions import CommitConflict, CommitOutcomeUnknown, ValidationError
from omnitable.format.fs import delete_quietly
from omnitable.format.keyindex import write_key_index
from omnitable.format.reader import FragmentReader
from omnitable.format.writer import new_id
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import commit_append
from omnitable.ingest.local import BatchTarget, LocalWriter, append_request
from omnitable.ingest.sources import is_pandas_dataframe, is_spark_dataframe, record_batches
from omnitable.isolation.policy import IsolationPolicy
from omnitable.vocabulary.descriptors import FileDescriptor
from omnitable.vocabulary.keys import weak_key_hash
from omnitable.vocabulary.names import ROW_ID, check_append_name

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
"""Plans an upsert tries before giving up on concurrent writers of the same keys or cells."""
_KEY_ROUNDS = 20
ERROR_COLUMN = "_ai_error_"


@dataclass(frozen=True)
class UpsertResult:
    """What an upsert did. ``version`` is None when nothing changed (nothing committed).

    ``merged``: existing keys whose columns were written; ``unchanged``: existing keys the
    policy kept as stored (``first_write_wins``); ``rejected``: the rejected input rows, with
    the reason in column ``_ai_error_``.
    """

    version: int | None
    inserted: int
    merged: int
    unchanged: int
    rejected: pa.Table = field(repr=False)
    files: int = 0
    bytes_written: int = 0
    error_rows: list[dict[str, Any]] = field(default_factory=list, repr=False)
    """The error-table rows of ``rejected`` (the facade appends them to the error table)."""
    errors_recorded: bool = True
    """False when ``rejected`` rows could not be appended to the error table (the upsert had
    committed; a warning says why): they are only in ``rejected``."""


@dataclass
class _Plan:
    snap: Snapshot
    new_rows: pa.Table
    new_h1: np.ndarray
    new_h2: np.ndarray
    # keys found: their hashes, and the fragment id and offset of the row holding each
    found: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    files: list[FileDescriptor] = field(default_factory=list)
    lineage: list[LineageEntry] = field(default_factory=list)
    merged: int = 0
    unchanged: int = 0
    failures: list[tuple[int, str, str]] = field(default_factory=list)  # input position


def upsert_rows(
    ctx: TableContext,
    data: Any,
    policy: object,
    *,
    append_name: str | None = None,
    why: str | None = None,
    isolation: IsolationPolicy | None = None,
    attempts: int = MAX_ATTEMPTS,
) -> UpsertResult:
    """Insert or merge the rows of ``data`` by the table's key (see module doc); ``attempts``:
    plans tried before a conflict is raised (1: the first conflict is raised, as a Spark MERGE
    cannot re-plan; the conformance runner's reference for it).

    Raises:
        ValidationError: not a keyed table, an unknown policy, no key column in ``data``,
            ``_ai_unique_id_`` in ``data``; SchemaMismatchError / UnknownColumnError: bad
            columns. Nothing is committed.
        CommitConflict: concurrent writers of the same keys or cells won every attempt.
    """
    key = require_key(ctx, "upsert into")
    merge_policy = resolve_policy(policy, isolation)
    name = check_append_name(append_name) if append_name is not None else _batch_name()
    incoming = _incoming(ctx, data, key)
    screened = screen(incoming, key)
    with RunScope(ctx.catalog, ctx.record, "upsert", {"batch": name, "rows": incoming.num_rows}) as run:  # fmt: skip
        for attempt in range(1, attempts + 1):
            written: list[str] = []
            try:
                plan = _plan(ctx, incoming, screened, key, merge_policy, written)
                version = _commit(ctx, plan, name, run.run_id, why, written)
                break
            except CommitConflict as exc:
                delete_quietly(ctx.location.fs, written)
                if attempt == attempts:
                    raise
                log.info("upsert into %s: %s; re-planning (attempt %d)", ctx.name, exc, attempt + 1)
            except BaseException as exc:
                if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
                    delete_quietly(ctx.location.fs, written)
                raise
        rejected = sorted(screened.rejected + plan.failures)
        result = UpsertResult(
            version, plan.new_rows.num_rows, plan.merged, plan.unchanged,
            _rejected_table(incoming, rejected), len(plan.files),
            sum(f.size_bytes for f in plan.files),
            _error_rows(incoming, key, rejected, name, run.run_id),
        )  # fmt: skip
        run.metrics = lambda: {"version": version, "inserted": result.inserted,
                               "merged": result.merged, "rejected": len(rejected)}  # fmt: skip
    return result


def _batch_name() -> str:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"upsert/{stamp}-{new_id()[:8]}"


def _incoming(ctx: TableContext, data: Any, key: list[str]) -> pa.Table:
    """``data`` conformed to the table's types (its columns only)."""
    if is_spark_dataframe(data):
        data = data.toArrow()
    snap = ctx.snapshot(scope=SnapshotScope(fragments=False, files=False))
    conformer = Conformer(ctx.name, snap.user_columns)
    parts = [conformer.conform(b) for b in record_batches(data, conformer.target_schema())]
    if not parts and (isinstance(data, pa.Table) or is_pandas_dataframe(data)):
        # no rows give no batches; the columns still say what the data holds
        empty = (
            data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        )
        parts = [conformer.conform(empty)]
    table = pa.concat_tables(parts) if parts else pa.table({})
    if ROW_ID in table.column_names:
        raise ValidationError(
            f"Cannot upsert into table '{ctx.name}': drop {ROW_ID} from the data; an upsert "
            "finds rows by the key and generates ids for new rows"
        )
    missing = [k for k in key if k not in table.column_names]
    if missing:
        raise ValidationError(
            f"Cannot upsert into table '{ctx.name}': the data has no key column(s) {missing}"
        )
    return table


def _plan(
    ctx: TableContext,
    incoming: pa.Table,
    screened: Screened,
    key: list[str],
    policy: MergePolicy,
    written: list[str],
) -> _Plan:
    """Probe the index of the head, write the merged files; the new rows are left to commit."""
    snap = ctx.snapshot()
    fragments, where, offsets = locate(ctx, snap, screened.h1, screened.h2)
    new = where < 0
    new_rows = incoming.take(pa.array(screened.positions[new]))
    existing = np.flatnonzero(~new)
    reader = FragmentReader(ctx.location, snap)
    existing, collided = _collisions(reader, fragments, where, offsets, existing, incoming,
                                     screened, key)  # fmt: skip
    found = (screened.h1[existing], screened.h2[existing],
             _fragment_ids(fragments)[where[existing]], offsets[existing])  # fmt: skip
    plan = _Plan(snap, new_rows, screened.h1[new], screened.h2[new], found, failures=collided)
    columns = [snap.column(n) for n in incoming.column_names if n not in key]
    if not len(existing):
        return plan
    if policy.keeps_stored or not columns:
        plan.unchanged = len(existing)
        return plan
    for pos in np.unique(where[existing]):
        rows = existing[where[existing] == pos]
        order = np.argsort(offsets[rows])
        rows = rows[order]
        _merge_fragment(
            ctx, snap, reader, fragments[int(pos)], columns, policy,
            incoming.take(pa.array(screened.positions[rows])), offsets[rows],
            screened.positions[rows], plan, written,
        )  # fmt: skip
    return plan


def _collisions(
    reader: FragmentReader,
    fragments: list[FragmentRecord],
    where: np.ndarray,
    offsets: np.ndarray,
    existing: np.ndarray,
    incoming: pa.Table,
    screened: Screened,
    key: list[str],
) -> tuple[np.ndarray, list[tuple[int, str, str]]]:
    """``existing`` (the screened rows whose key hash a live row holds) without those whose
    stored key differs, and those as rejected rows. Only a key whose hash is 64 bits
    (:func:`~omnitable.vocabulary.keys.weak_key_hash`) is read back and compared: two distinct
    such keys can share a hash, and merging one into the other's row would lose it."""
    types = [reader.snapshot.column(k).arrow_type for k in key]
    if not len(existing) or not weak_key_hash(types):
        return existing, []
    stored = read_found(reader, fragments, where[existing], offsets[existing], key)
    asked = incoming.select(key).take(pa.array(screened.positions[existing]))
    same = np.asarray(same_keys(stored, asked, key).to_numpy(zero_copy_only=False), dtype=bool)
    rejected = []
    for i in np.flatnonzero(~same):
        pos = int(screened.positions[existing[i]])
        held = key_repr(stored, key, int(i))
        rejected.append((pos, "key_collision", collision_message(incoming, key, pos, held)))
    return existing[same], rejected


def _merge_fragment(
    ctx: TableContext,
    snap: Snapshot,
    reader: FragmentReader,
    frag: FragmentRecord,
    columns: list[ColumnRecord],
    policy: MergePolicy,
    incoming: pa.Table,
    offsets: np.ndarray,
    positions: np.ndarray,
    plan: _Plan,
    written: list[str],
) -> None:
    """Merge ``incoming`` into the rows at ``offsets`` of ``frag``: one rewritten file per group."""
    names = [c.name for c in columns]
    current = reader.read_all_rows(frag, names)
    stored = current.take(pa.array(offsets)) if policy.reads_stored else current.slice(0, 0)
    merged = merge(policy, stored, incoming.select(names))
    plan.failures += [(int(positions[i]), "policy", msg) for i, msg in merged.failures]
    plan.merged += len(offsets) - len(merged.failures)
    if len(merged.failures) == len(offsets):
        return  # every row keeps its stored values: nothing to write
    index = np.full(frag.row_count, -1, dtype=np.int64)
    index[offsets] = np.arange(len(offsets))
    for group in dict.fromkeys(c.group_name for c in columns):
        cols = [c for c in columns if c.group_name == group]
        table = patched(current.select([c.name for c in cols]), merged.values, index)
        desc = rewrite_file(ctx, snap, frag, cols, table)
        written.append(ctx.location.child_path(desc.path))
        plan.files.append(desc)
        plan.lineage += rewrite_lineage(desc, cols, "upsert")


def _commit(
    ctx: TableContext, plan: _Plan, name: str, run_id: str, why: str | None, written: list[str]
) -> int | None:
    """Write the new batch (fragments and their index files) and commit everything once."""
    summary: dict[str, Any] = {
        "batch": name, "inserted": plan.new_rows.num_rows, "merged": plan.merged,
        "user": getpass.getuser(), **({"why": why} if why is not None else {}),
    }  # fmt: skip
    if plan.new_rows.num_rows == 0:
        if not plan.files:
            return None
        req = CommitRequest(op="upsert", base_version=plan.snap.version, run_id=run_id,
                            summary=summary, new_files=plan.files, lineage=plan.lineage,
                            keys_checked_version=plan.snap.version)  # fmt: skip
        failpoint("upsert.before_commit")
        return _commit_checking_keys(ctx, req, plan, lambda: ctx.commit(req))
    target = BatchTarget(ctx, plan.snap, name, new_id(), ctx.options())
    out = LocalWriter(plan.new_rows).write(target, written)
    start = 0
    for frag in sorted(out.fragments, key=lambda f: f.seq):
        stop = start + frag.row_count
        written.append(write_key_index(ctx.location, frag.path, plan.new_h1[start:stop],
                                       plan.new_h2[start:stop]))  # fmt: skip
        start = stop
    req = append_request(plan.snap, target.batch_id, name, set(), out.fragments, None, run_id,
                         "local")  # fmt: skip
    req.op, req.summary = "upsert", {**req.summary, **summary}
    req.new_files, req.lineage = plan.files, plan.lineage
    req.keys_checked_version = plan.snap.version
    failpoint("upsert.before_commit")
    return _commit_checking_keys(ctx, req, plan, lambda: commit_append(ctx, req, out.claim))


def _commit_checking_keys(
    ctx: TableContext, req: CommitRequest, plan: _Plan, commit: Callable[[], int]
) -> int:
    """Commit, re-checking the keys against rows committed since they were probed: the keys
    it inserts must still be new, the keys it found must still be at the rows it found."""
    for _ in range(_KEY_ROUNDS):
        try:
            return commit()
        except KeysNotChecked as exc:
            head = ctx.snapshot(version=exc.head, branch=req.branch,
                                scope=SnapshotScope(files=False))  # fmt: skip
            _, where, _ = locate(ctx, head, plan.new_h1, plan.new_h2)
            taken = int((where >= 0).sum())
            h1, h2, fragment_ids, found_at = plan.found
            fragments, where, offsets = locate(ctx, head, h1, h2)
            now_ids = _fragment_ids(fragments)[where]  # where -1: the trailing None
            moved = int(((where < 0) | (now_ids != fragment_ids) | (offsets != found_at)).sum())
            if taken or moved:
                raise CommitConflict(
                    f"Cannot commit upsert into table '{ctx.name}': a concurrent commit (after "
                    f"version {req.keys_checked_version}) inserted {taken} of the keys it "
                    f"inserts and deleted or moved the rows of {moved} of the keys it found; "
                    "nothing was committed",
                    [("*", "key")],
                ) from None
            req.keys_checked_version = exc.head
    raise CommitConflict(
        f"Cannot commit upsert into table '{ctx.name}': other commits kept changing rows while "
        "its keys were checked; retry the upsert",
        [("*", "key")],
    )


def _fragment_ids(fragments: list[FragmentRecord]) -> np.ndarray:
    """The fragments' ids, then None (what position -1 picks)."""
    return np.array([f.fragment_id for f in fragments] + [None], dtype=object)


def _rejected_table(incoming: pa.Table, rejected: list[tuple[int, str, str]]) -> pa.Table:
    rows = incoming.take(pa.array([p for p, _, _ in rejected], pa.int64()))
    reasons = pa.array([f"{kind}: {msg}" for _, kind, msg in rejected], pa.string())
    return rows.append_column(ERROR_COLUMN, reasons)


def _error_rows(
    incoming: pa.Table, key: list[str], rejected: list[tuple[int, str, str]], batch: str,
    run_id: str,
) -> list[dict[str, Any]]:  # fmt: skip
    """The error-table rows of the rejected input rows (``row_offset``: position in the input;
    no file: they are not in the table; visible from the moment they are recorded)."""
    return [
        {ROW_ID: None, "batch": batch, "fragment_id": None, "row_offset": pos, "file_id": None,
         "feature": None, "feature_version": None, "kind": "upsert", "exception_type": kind,
         "message": msg, "traceback": None, "input_digest": key_repr(incoming, key, pos),
         "run_id": run_id}
        for pos, kind, msg in rejected
    ]  # fmt: skip
