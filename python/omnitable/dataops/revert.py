"""``Table.revert``: undo exactly one commit and keep every later one (docs/dataops.md)."""

from __future__ import annotations

import numpy as np

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, KeysNotChecked
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.dataops.keyed import key_repr, locate, require_key
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.format.keyindex import load_key_index
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.keys import table_key

_ROWS_ONLY = SnapshotScope(files=False)
_KEY_ROUNDS = 20

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
    head = ctx.head_version()
    req = CommitRequest(
        op="revert", base_version=head, summary=summary, revert=version, dependents=dependents
    )
    if table_key(ctx.record.properties) is None:
        failpoint("revert.before_commit")
        return ctx.commit(req)
    req.keys_checked_version = head
    for _ in range(_KEY_ROUNDS):  # keyed: the rows it brings back must not duplicate a key
        _check_revived_keys(ctx, version, req.keys_checked_version)
        failpoint("revert.before_commit")
        try:
            return ctx.commit(req)
        except KeysNotChecked as exc:
            req.keys_checked_version = exc.head
    raise CommitConflict(
        f"Cannot revert version {version} of table '{ctx.name}': other commits kept changing "
        "rows while the keys it brings back were checked; retry",
        [("*", "key")],
    )


def _check_revived_keys(ctx: TableContext, version: int, head: int) -> None:
    """Rows the reverted commit deleted or removed come back: their keys must be held by no
    other live row of ``head`` (an upsert may have inserted them again since)."""
    parent = next((c.parent_version for c in ctx.catalog.history(ctx.record, ctx.branch) if c.version == version), None)  # fmt: skip
    if parent is None:
        return  # the creation, or no such version: the commit says which
    before = ctx.snapshot(version=parent, scope=_ROWS_ONLY)
    after = ctx.snapshot(version=version, scope=_ROWS_ONLY)
    now = ctx.snapshot(version=head, scope=_ROWS_ONLY)
    kept = {f.fragment_id for f in after.fragments}
    h1s, h2s, rows = [], [], []
    for frag in before.live_fragments(None):
        live = _live(before, frag.fragment_id, frag.row_count)
        if frag.fragment_id in kept:
            live &= ~_live(after, frag.fragment_id, frag.row_count)
        if not live.any():
            continue
        index = load_key_index(ctx.location, frag.path, frag.row_count)
        back = live[index.offset]
        h1s.append(index.h1[back])
        h2s.append(index.h2[back])
        rows += [(frag.path, int(o)) for o in index.offset[back]]
    if not rows:
        return
    fragments, where, offsets = locate(ctx, now, np.concatenate(h1s), np.concatenate(h2s))
    taken = [
        int(i)
        for i in np.flatnonzero(where >= 0)
        if (fragments[int(where[i])].path, int(offsets[i])) != rows[i]
    ]
    if taken:
        key = require_key(ctx, "revert")
        holder = fragments[int(where[taken[0]])]
        keys_snap = ctx.snapshot(version=head, scope=SnapshotScope.of(None, key))
        sample = FragmentReader(ctx.location, keys_snap).read_rows(
            holder, key, offsets[taken[0] : taken[0] + 1]
        )
        raise CommitConflict(
            f"Cannot revert version {version} of table '{ctx.name}': it would bring back "
            f"{len(taken)} row(s) whose keys live rows hold again (e.g. key "
            f"{key_repr(sample, key, 0)}, upserted after version {version}); nothing was "
            "committed. Delete those rows first, or roll back instead",
            [("*", "key")],
        )


def _live(snap: Snapshot, fragment_id: str, rows: int) -> np.ndarray:
    dv = snap.deletion(fragment_id)
    return np.ones(rows, dtype=bool) if dv is None else ~dv.mask()
