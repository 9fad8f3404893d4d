"""Expiring old versions (docs/governance.md, "Expiring versions").

:class:`ExpireJob` follows the maintenance contract (governance/job.py):

- **Prepare** reads the refs and commits, deletes nothing: per branch the horizon (its oldest
  version kept: older versions are older than ``older_than`` and beyond its newest
  ``retain_last``; the head is always kept), the tags whose ``max_age_s`` passed (deleted by the
  commit), the live tags and fork points below a horizon (kept readable: reported, never
  broken), and the purgeable catalog rows (catalog/expiry.py says which, conservatively).
- **Execute** writes nothing.
- **Commit** is one ``expire`` catalog commit that re-reads the refs under the table lock and
  deletes only the planned rows that are still purgeable (a ref created or moved since Prepare
  keeps what it reaches), then records the horizons (catalog/horizon.py: time travel to an
  expired version fails naming them). Afterwards the data files no remaining ``files`` row
  references are deleted and the bytes freed reported; a crash between the two leaves orphan
  files for :class:`~omnitable.governance.orphans.OrphanJob`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from omnitable.catalog.commit import utcnow
from omnitable.catalog.expiry import (
    RowKey,
    commit_expiry,
    expired_tags,
    file_sizes,
    load_state,
    pinned_below,
    plan_horizons,
    purgeable_rows,
    retained_points,
)
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult


def _seconds(value: float | dt.timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValidationError(
            f"Cannot expire versions: older_than must be seconds >= 0 or a timedelta, got {value!r}"
        )
    return float(value)


class ExpireJob:
    """Expire versions older than ``older_than`` (seconds or a timedelta) and/or beyond the
    newest ``retain_last`` of each branch (both given: a version must be both to expire)."""

    name = "expire"

    def __init__(
        self, *, older_than: float | dt.timedelta | None = None, retain_last: int | None = None
    ) -> None:
        self.older_than_s = _seconds(older_than)
        if retain_last is not None and (
            isinstance(retain_last, bool) or not isinstance(retain_last, int) or retain_last < 1
        ):
            raise ValidationError(
                f"Cannot expire versions: retain_last must be an integer >= 1, got {retain_last!r}"
            )
        if self.older_than_s is None and retain_last is None:
            raise ValidationError("Cannot expire versions: give older_than and/or retain_last")
        self.retain_last = retain_last
        self._rows: dict[int, dict[str, set[RowKey]]] = {}  # id(plan) -> the purgeable rows

    def prepare(self, ctx: TableContext) -> MaintenancePlan:
        now = dt.datetime.now(dt.timezone.utc)
        store, table = ctx.catalog.store, ctx.record
        with store.read() as conn:
            state = load_state(conn, table)
            gone = expired_tags(state.tags, utcnow())
            live = [t for t in state.tags if t not in gone]
            state = type(state)(state.branches, live, state.commits)
            horizons = plan_horizons(state, now, self.older_than_s, self.retain_last)
            points = retained_points(conn, table, state, horizons)
            rows = purgeable_rows(conn, table, horizons, points)
            sizes = file_sizes(conn, table.table_id, rows.get("files", set()))
        head = max(b.version for b in state.branches if b.name == ctx.branch)
        kept = pinned_below(state, horizons)
        actions: list[Mapping[str, Any]] = [
            {"horizon": h, "branch": b, "expired_versions": _count_below(state.own_versions(b), h)}
            for b, h in sorted(horizons.items())
        ]
        actions += [{"delete_tag": t.name, "created_at": t.created_at} for t in gone]
        actions += [{"purge": k, "rows": len(v)} for k, v in sorted(rows.items())]
        pinned = sorted(t.name for t in live if t.version in kept)
        summary = {"horizons": horizons, "kept_versions": sorted(kept), "kept_by_tags": pinned,
                   "expired_tags": [t.name for t in gone],
                   "rows": sum(len(v) for v in rows.values()), "bytes_at_most": sum(sizes)}  # fmt: skip
        if not horizons and not gone:
            actions = []  # nothing to expire (purgeable rows need a horizon)
        plan = MaintenancePlan(self.name, ctx.name, ctx.branch, head, tuple(actions), summary)
        self._rows[id(plan)] = rows
        return plan

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed:
        return Executed()

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult:
        rows = self._rows.pop(id(plan), {})
        tags = {
            str(a["delete_tag"]): str(a["created_at"]) for a in plan.actions if "delete_tag" in a
        }
        horizons = {str(a["branch"]): int(a["horizon"]) for a in plan.actions if "horizon" in a}
        out = commit_expiry(
            ctx.catalog.store, ctx.record.table_id, branch=ctx.branch, horizons=horizons,
            tags_to_delete=tags, planned=rows,
        )  # fmt: skip
        freed = _delete_files(ctx, out.paths)
        summary = {"horizons": out.horizons, "kept_versions": out.kept,
                   "deleted_tags": out.deleted_tags, "purged_rows": out.purged,
                   "files_deleted": len(freed), "bytes_freed": sum(freed.values())}  # fmt: skip
        return MaintenanceResult(self.name, "committed", out.version, plan, summary)


def _count_below(versions: list[int], horizon: int) -> int:
    return sum(1 for v in versions if v < horizon)


def _delete_files(ctx: TableContext, paths: Mapping[str, int]) -> dict[str, int]:
    """Delete the data files the commit left unreferenced; returns those deleted (-> bytes)."""
    fs = ctx.location.fs
    freed: dict[str, int] = {}
    for rel, size in sorted(paths.items()):
        full = ctx.location.child_path(rel)
        info = fs.get_file_info(full)
        if info.type != pafs.FileType.File:
            continue
        try:
            fs.delete_file(full)
        except OSError:
            continue
        freed[rel] = int(info.size if info.size is not None else size)
    return freed
