"""``Table.delete``: mark rows deleted with per-fragment deletion vectors (merge-on-read).

A delete reads only its predicate's columns of the fragments its statistics cannot rule out,
and commits one cumulative vector per touched fragment. No data file is written or removed, so
time travel to an earlier version sees the rows again. A concurrent delete of the same fragment
makes the commit conflict; the delete then re-reads the new head and retries, which is what it
would have done had it started later (a predicate is evaluated on the state it commits on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, ExpectedProvider, NewDeletion
from omnitable.catalog.records import FragmentRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import CommitConflict, NotFoundError, ValidationError
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.deletions import encode_vector
from omnitable.vocabulary.names import ROW_ID

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
"""Commits a delete tries before giving up on concurrent deletes of the same fragments."""


@dataclass(frozen=True)
class DeleteResult:
    """What a delete did. ``version`` is None when no row matched (nothing was committed)."""

    version: int | None
    rows: int
    fragments: int


def delete_rows(
    ctx: TableContext,
    where: pc.Expression | None,
    ids: Iterable[int] | None,
    *,
    why: str | None = None,
    attempts: int = MAX_ATTEMPTS,
) -> DeleteResult:
    """Delete the live rows where ``where`` is true (NULL is not true), or the rows of ``ids``.

    Raises:
        ValidationError: neither or both of ``where`` and ``ids``, or a malformed one.
        UnknownColumnError: ``where`` names a column the table does not have.
        NotFoundError: some ``ids`` are not live rows of the table (nothing is deleted).
        CommitConflict: concurrent deletes of the same fragments won every attempt (``attempts``
            commits; 1: fail on the first conflict, as a Spark SQL DELETE does).
    """
    condition, wanted = _condition(ctx.name, where, ids)
    for attempt in range(1, attempts + 1):
        snap = ctx.snapshot(scope=SnapshotScope.of(None, [], condition))
        deletions, rows = _deletions(ctx, snap, condition, wanted)
        if not deletions:
            return DeleteResult(None, 0, 0)
        summary: dict[str, object] = {"rows": rows, "fragments": len(deletions)}
        if wanted is None:
            summary["where"] = str(condition)
        else:
            summary["ids"] = len(wanted)
        if why is not None:
            summary["why"] = why
        req = CommitRequest(
            op="delete",
            base_version=snap.version,
            summary=summary,
            deletions=deletions,
            expected_providers=_read_set(snap, condition),
        )
        failpoint("delete.before_commit")
        try:
            return DeleteResult(ctx.commit(req), rows, len(deletions))
        except CommitConflict as exc:
            if attempt == attempts:
                raise
            log.info("delete from %s: %s; re-reading (attempt %d)", ctx.name, exc, attempt + 1)
    raise AssertionError("unreachable")  # pragma: no cover


def _condition(
    table: str, where: pc.Expression | None, ids: Iterable[int] | None
) -> tuple[pc.Expression, np.ndarray | None]:
    """The predicate to evaluate and, for a delete by ids, the distinct ids (sorted)."""
    if (where is None) == (ids is None):
        raise ValidationError(
            f"Cannot delete from table '{table}': give where (a pyarrow expression such as "
            "pc.field('label') == 'spam') or ids (a list of _ai_unique_id_ values), not "
            + ("both" if where is not None else "neither")
        )
    if where is not None:
        if not isinstance(where, pc.Expression):
            raise ValidationError(
                f"Cannot delete from table '{table}': where must be a pyarrow.compute.Expression "
                f"such as pc.field('label') == 'spam', got {type(where).__name__}"
            )
        return where, None
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise ValidationError(
            f"Cannot delete from table '{table}': ids must be a list of integers, got {ids!r}"
        )
    values = list(ids)
    if not values or any(
        isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in values
    ):
        raise ValidationError(
            f"Cannot delete from table '{table}': ids must be a non-empty list of integers "
            f"({ROW_ID} values)"
        )
    wanted = np.unique(np.asarray(values, dtype=np.int64))
    return pc.field(ROW_ID).isin(pa.array(wanted)), wanted


def _deletions(
    ctx: TableContext, snap: Snapshot, where: pc.Expression, wanted: np.ndarray | None
) -> tuple[list[NewDeletion], int]:
    """The new cumulative vector of every fragment with rows to delete, and the rows deleted."""
    reader = FragmentReader(ctx.location, snap)
    plan = reader.plan([], where)
    where_cols = plan.where_columns

    def one(frag: FragmentRecord) -> tuple[FragmentRecord, np.ndarray, np.ndarray]:
        offsets, rows = reader.matching_rows(frag, where, where_cols)
        found = rows.column(ROW_ID).to_numpy() if wanted is not None else np.empty(0, np.int64)
        return frag, offsets, found

    workers = min(len(plan.fragments), max(2, (os.cpu_count() or 2) * 2))
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            hits = list(pool.map(one, plan.fragments))
    else:
        hits = [one(f) for f in plan.fragments]
    if wanted is not None:
        _check_all_found(ctx.name, wanted, [found for _, _, found in hits])
    out: list[NewDeletion] = []
    total = 0
    for frag, offsets, _ in hits:
        if len(offsets) == 0:
            continue
        old = snap.deletion(frag.fragment_id)
        mask = np.zeros(frag.row_count, dtype=bool) if old is None else old.mask().copy()
        mask[offsets] = True
        total += len(offsets)
        replaces = None if old is None else old.vector_id
        count = int(mask.sum())
        out.append(
            NewDeletion(frag.fragment_id, frag.batch_id, count, encode_vector(mask), replaces)
        )
    return out, total


def _read_set(snap: Snapshot, where: pc.Expression) -> list[ExpectedProvider]:
    """The file that provided each filter column in every live fragment when the filter was
    evaluated (pruned fragments too: their statistics said no row matches). A concurrent change
    of one of them makes the commit conflict, and the delete evaluates its filter again."""
    names = [c.name for c in snap.columns if c.name != ROW_ID and c.name in str(where)]
    ids = [snap.column(n).column_id for n in names]
    out = []
    for frag in snap.live_fragments(None):
        providers = snap.resolve(frag.fragment_id, ids)
        out += [
            ExpectedProvider(frag.fragment_id, n, p.file_id if p is not None else None)
            for n, p in zip(names, providers.values(), strict=True)
        ]
    return out


def _check_all_found(table: str, wanted: np.ndarray, found: list[np.ndarray]) -> None:
    hit = np.concatenate(found) if found else np.empty(0, np.int64)
    missing = np.setdiff1d(wanted, hit)
    if len(missing):
        sample = ", ".join(str(int(x)) for x in missing[:10])
        raise NotFoundError(
            f"Cannot delete from table '{table}': {len(missing)} of the {len(wanted)} ids are not "
            f"live rows (never written, or already deleted), e.g. {sample}; nothing was deleted"
        )
