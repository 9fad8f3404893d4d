"""``Table.rollback``: make an older version's state the head, as one new commit (the history
in between is kept and still readable by time travel; docs/dataops.md)."""

from __future__ import annotations

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError


def rollback(ctx: TableContext, version: int, *, why: str | None = None) -> int:
    """Commit the state of ``version`` of ``main`` as its new head; returns the new version.

    Raises:
        ValidationError: not an integer, or not older than the head.
        NotFoundError: no such version in the history of ``main``.
        CommitConflict: a commit landed after the head this call read (nothing is discarded
            unseen: look at the history and run it again).
    """
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValidationError(
            f"Cannot roll back table '{ctx.name}': version must be an integer >= 0, got {version!r}"
        )
    head = ctx.head_version()
    summary: dict[str, object] = {"to_version": version, "discarded": head - version}
    if why is not None:
        summary["why"] = why
    req = CommitRequest(op="rollback", base_version=head, summary=summary, rollback_to=version)
    failpoint("rollback.before_commit")
    return ctx.commit(req)
