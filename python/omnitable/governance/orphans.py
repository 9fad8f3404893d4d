"""Removing orphan files (docs/governance.md, "Removing orphan files").

:class:`OrphanJob` follows the maintenance contract (governance/job.py):

- **Prepare** lists every file under the table location (recursively, through the table's
  filesystem) and keeps as candidates those that no catalog row can reference
  (catalog/references.py), that are older than the safety window (``min_age_s``, setting
  ``governance.orphan_min_age_s``, default 3 days) and that were written before the start of the
  table's oldest running run (less :data:`CLOCK_SKEW_S`): a write still in flight records a run
  before it writes its files. A file whose age is unknown is never a candidate.
- **Execute** writes nothing.
- **Commit** takes the table lock, re-checks that each candidate is still unreferenced and that
  no run older than it has started since, deletes the candidates and reports how many and the
  bytes freed. It makes no catalog commit (``version`` is None).

The access log (``_access/``, format/access.py) is never a candidate: the regroup job trims it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pyarrow.fs as pafs

from omnitable.catalog.lease import check_held
from omnitable.catalog.references import references, still_referenced
from omnitable.context import TableContext
from omnitable.format.access import ACCESS_DIR
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult
from omnitable.settings import GOVERNANCE_ORPHAN_MIN_AGE_S

CLOCK_SKEW_S = 300.0
"""Files written up to this long before the oldest running run's start are kept too (the run's
clock and the storage's may differ)."""


def _utc(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


class OrphanJob:
    """Delete the files under the table location no catalog row references, older than
    ``min_age_s`` seconds (None: the ``governance.orphan_min_age_s`` setting) and than the
    oldest running run."""

    name = "orphans"

    def __init__(self, *, min_age_s: float | None = None) -> None:
        if min_age_s is not None:
            GOVERNANCE_ORPHAN_MIN_AGE_S.check(min_age_s, "remove orphan files", "min_age_s")
        self.min_age_s = min_age_s

    def prepare(self, ctx: TableContext) -> MaintenancePlan:
        window = float(ctx.settings.resolve(GOVERNANCE_ORPHAN_MIN_AGE_S, self.min_age_s))
        now = dt.datetime.now(dt.timezone.utc)
        before = now - dt.timedelta(seconds=window)
        oldest = _oldest_running(ctx)
        if oldest is not None:
            before = min(before, oldest - dt.timedelta(seconds=CLOCK_SKEW_S))
        with ctx.catalog.store.read() as conn:
            refs = references(conn, ctx.record.table_id, ctx.location.uri)
        actions: list[Mapping[str, Any]] = []
        young = 0
        for rel, info in sorted(_listing(ctx).items()):
            if refs.covers(rel) or rel.startswith(f"{ACCESS_DIR}/"):  # the access log is kept
                continue
            if info.mtime is None or info.mtime.astimezone(dt.timezone.utc) >= before:
                young += 1
                continue
            actions.append({"path": rel, "bytes": int(info.size or 0)})
        summary = {"files": len(actions), "bytes": sum(int(a["bytes"]) for a in actions),
                   "kept_young": young, "min_age_s": window,
                   "oldest_running_run": None if oldest is None else oldest.isoformat()}  # fmt: skip
        head = ctx.head_version()
        return MaintenancePlan(self.name, ctx.name, ctx.branch, head, tuple(actions), summary)

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed:
        return Executed()

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult:
        store, table_id = ctx.catalog.store, ctx.record.table_id
        sizes = {str(a["path"]): int(a["bytes"]) for a in plan.actions}
        freed: dict[str, int] = {}
        with store.write() as conn:
            store.lock_table(conn, table_id)  # no commit can reference a candidate meanwhile
            check_held(conn, table_id)
            gone = still_referenced(conn, table_id, sizes)
            oldest = _oldest_running(ctx)
            for rel, size in sorted(sizes.items()):
                if rel in gone or not _still_old(ctx, rel, oldest):
                    continue
                try:
                    ctx.location.fs.delete_file(ctx.location.child_path(rel))
                except (FileNotFoundError, OSError):
                    continue
                freed[rel] = size
        summary = {"files_deleted": len(freed), "bytes_freed": sum(freed.values()),
                   "kept": len(sizes) - len(freed)}  # fmt: skip
        return MaintenanceResult(self.name, "committed", None, plan, summary)


def _listing(ctx: TableContext) -> dict[str, pafs.FileInfo]:
    """Every file under the table location, by path relative to it."""
    fs, base = ctx.location.fs, ctx.location.path.rstrip("/")
    selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    return {
        info.path[len(base) + 1 :]: info
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
    }


def _oldest_running(ctx: TableContext) -> dt.datetime | None:
    """The start of the table's oldest run still running (abandoned runs, whose driver is gone,
    do not count)."""
    starts = [_utc(r["started_at"]) for r in ctx.catalog.list_runs(ctx.record)
              if r["status"] == "running"]  # fmt: skip
    return min(starts) if starts else None


def _still_old(ctx: TableContext, rel: str, oldest: dt.datetime | None) -> bool:
    """The file was written before the oldest running run (checked again at commit)."""
    info = ctx.location.fs.get_file_info(ctx.location.child_path(rel))
    if info.type != pafs.FileType.File or info.mtime is None:
        return False
    if oldest is None:
        return True
    return info.mtime.astimezone(dt.timezone.utc) < oldest - dt.timedelta(seconds=CLOCK_SKEW_S)
