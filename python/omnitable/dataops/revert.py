"""``Table.revert``: undo exactly one commit and keep every later one (docs/dataops.md)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.context import TableContext
from omnitable.dataops.keyed import key_repr, locate
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.keys import key_hashes, table_key

DEPENDENTS = ("fail", "stale")


def revert(
    ctx: TableContext, version: int, *, dependents: str = "fail", why: str | None = None
) -> int:
    """Commit the inverse of commit ``version``; returns the new version.

    ``dependents``: what to do when later backfills read what the commit wrote: ``fail``
    (a CommitConflict naming those features) or ``stale`` (revert anyway; they become stale and
    the next backfill of them recomputes).

    Raises:
        ValidationError: a bad argument, the table's creation, or a commit reverted already.
        NotFoundError: no such version on ``main``.
        CommitConflict: a later commit changed what it changed, or read it (``fail``).
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValidationError(
            f"Cannot revert a version of table '{ctx.name}': give an integer >= 0, got {version!r}"
        )
    if dependents not in DEPENDENTS:
        raise ValidationError(
            f"Cannot revert version {version} of table '{ctx.name}': dependents must be one of "
            f"{', '.join(DEPENDENTS)}, got {dependents!r}"
        )
    summary: dict[str, object] = {"reverted": version}
    if why is not None:
        summary["why"] = why
    req = CommitRequest(
        op="revert",
        base_version=ctx.catalog.head_version(ctx.record),
        summary=summary,
        revert=version,
        dependents=dependents,
    )
    if _check_restored_keys(ctx, version, req.base_version):
        req.keys_checked_version = req.base_version  # rows committed since conflict
    failpoint("revert.before_commit")
    return ctx.commit(req)


def _check_restored_keys(ctx: TableContext, version: int, head: int) -> bool:
    """On a keyed table, the rows reverting ``version`` brings back (rows it deleted or
    removed) must hold keys no live row of ``head`` holds. Returns whether it brings back rows.

    Raises:
        CommitConflict: some do (a later upsert inserted their keys again).
    """
    key = table_key(ctx.record.properties)
    if key is None or version == 0:
        return False
    before = ctx.snapshot(version=version - 1)
    after = ctx.snapshot(version=version, scope=SnapshotScope(files=False))
    kept = {f.fragment_id for f in after.fragments}
    reader = FragmentReader(ctx.location, before)
    restored: list[tuple[str, np.ndarray, pa.Table]] = []
    for frag in before.live_fragments(None):
        was = before.deletion(frag.fragment_id)
        gone = np.ones(frag.row_count, dtype=bool) if was is None else ~was.mask()
        if frag.fragment_id in kept:
            now = after.deletion(frag.fragment_id)
            gone &= now.mask() if now is not None else False
        if gone.any():
            offsets = np.flatnonzero(gone)
            restored.append((frag.fragment_id, offsets, reader.read_rows(frag, key, offsets)))
    if restored:
        _refuse_taken_keys(ctx, version, head, key, restored)
    return bool(restored)


def _refuse_taken_keys(
    ctx: TableContext,
    version: int,
    head: int,
    key: list[str],
    restored: list[tuple[str, np.ndarray, pa.Table]],
) -> None:
    """Raise CommitConflict when a live row of ``head`` other than a restored row holds the key
    of a restored row (fragment id, offsets, key values)."""
    keys = pa.concat_tables([rows for _, _, rows in restored])
    where_from = [(fid, int(o)) for fid, offsets, _ in restored for o in offsets]
    snap = ctx.snapshot(version=head, scope=SnapshotScope(files=False))
    fragments, where, offsets = locate(ctx, snap, *key_hashes([keys.column(k) for k in key]))
    taken = [
        int(i)
        for i in np.flatnonzero(where >= 0)
        if (fragments[int(where[i])].fragment_id, int(offsets[i])) != where_from[i]
    ]
    if taken:
        raise CommitConflict(
            f"Cannot revert version {version} of table '{ctx.name}': it would bring back "
            f"{len(taken)} row(s) whose keys live rows hold now (key "
            f"{key_repr(keys, key, taken[0])}, inserted again by a later upsert); nothing was "
            "committed. Delete those rows first, or roll back.",
            [("*", "key")],
        )
