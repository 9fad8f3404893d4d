"""``Table.revert``: undo exactly one commit and keep every later one (docs/dataops.md)."""

from __future__ import annotations

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError

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
    failpoint("revert.before_commit")
    return ctx.commit(req)
