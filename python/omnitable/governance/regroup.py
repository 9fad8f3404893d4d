"""Regrouping: which raw columns share files, chosen from the access log (docs/governance.md,
"Regrouping").

- **Prepare** reads the access log (format/access.py) of the job's branch since ``since_s``
  seconds ago and the head's layout, and decides a target group for raw columns:

  1. ``groups`` given (a declared grouping, group name -> column names): exactly those;
  2. otherwise every co-read column set of at least ``min_scans`` scans, most scanned first,
     becomes one group (at most ``max_group_columns`` columns; a column joins the first set
     that claims it); a set that already is one group (or what earlier sets left of it) stays;
  3. the rest of an over-wide group (more than ``max_group_columns`` columns) is split into
     chunks, and groups of fewer than ``min_group_columns`` columns nobody co-reads are merged
     together ("cold" groups), both in column order.

  A batch whose files hold a raw column outside its target group is rewritten. Columns with a
  lineage or feature version (feature outputs) and ``_ai_unique_id_`` keep their files' groups.
- **Execute** rewrites the chosen batches as compaction does (governance/rewrite.py: values,
  ``_ai_unique_id_``, row order, deletion vectors folded, feature versions and lineage kept),
  writing each raw column to its target group.
- **Commit** replaces the batches with the rewrite rule (``CommitRequest.rewrite``: any change
  to their fragments since the plan conflicts), then compacts the access log: one file of
  distinct column sets with counts, entries older than ``log_retention_s`` dropped (under the
  catalog lease ``access_log``: a concurrent compaction skips instead of counting twice). The
  same commit makes the target groups the catalog's declared groups (``columns.group_name``,
  through ``ColumnChange.group``: a new row per changed column, validated against the row
  Prepare read), so later appends, upserts and backfills write the new layout.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import ColumnChange
from omnitable.catalog.lease import Holder, acquire, release
from omnitable.catalog.records import ColumnRecord
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.format.access import (
    co_read_sets,
    compact_access_log,
    count_access_files,
    read_access,
)
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult
from omnitable.governance.rewrite import Rewritten, rewrite_batches
from omnitable.vocabulary.names import ROW_ID, check_group_name

DAY_S = 86_400.0
LOG_LEASE = "access_log"  # the lease one compaction of a table's access log holds
LOG_LEASE_TTL_S = 600.0  # far above a compaction's time (one listing, small JSON files)


@dataclass
class RegroupJob:
    """Regroup raw columns so co-read columns share files (module docstring)."""

    name = "regroup"
    min_group_columns: int = 8
    max_group_columns: int = 512
    since_s: float | None = 30 * DAY_S
    min_scans: int = 1
    groups: Mapping[str, Sequence[str]] | None = None
    batches: tuple[str, ...] | None = None
    log_retention_s: float = 30 * DAY_S
    max_log_files: int = 1000

    def __post_init__(self) -> None:
        for label in ("min_group_columns", "max_group_columns", "min_scans", "max_log_files"):
            value = getattr(self, label)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValidationError(f"{label} must be a positive integer, got {value!r}")
        if self.min_group_columns > self.max_group_columns:
            raise ValidationError(
                f"min_group_columns ({self.min_group_columns}) must not exceed "
                f"max_group_columns ({self.max_group_columns})"
            )
        for label in ("since_s", "log_retention_s"):
            value = getattr(self, label)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise ValidationError(
                    f"{label} must be a positive number of seconds, got {value!r}"
                )
        if self.groups is not None:
            if not isinstance(self.groups, Mapping) or not self.groups:
                raise ValidationError(
                    "groups must be a non-empty mapping of group name -> column names, "
                    f"got {self.groups!r}"
                )
            for g, cols in self.groups.items():
                check_group_name(g)
                if isinstance(cols, str) or not all(isinstance(c, str) for c in cols) or not cols:
                    raise ValidationError(f"groups[{g!r}] must be a non-empty list of column names")
        if self.batches is not None:
            self.batches = tuple(self.batches)

    # -- Prepare --------------------------------------------------------------------------

    def prepare(self, ctx: TableContext) -> MaintenancePlan:
        base = ctx.head_version()
        snap = ctx.snapshot(version=base, scope=SnapshotScope(stats=False))
        raw = {c.column_id: c for c in snap.columns if c.feature is None and c.name != ROW_ID}
        if self.groups is not None:
            target, reasons = self._declared(raw), {g: "declared" for g in self.groups}
            scans = 0
        else:
            since = None if self.since_s is None else _ago(self.since_s)
            entries = read_access(ctx.location, since=since, branch=ctx.branch)
            scans = sum(e.count for e in entries)
            target, reasons = self._from_log(raw, co_read_sets(entries))
        actions: list[dict[str, Any]] = []
        members: dict[str, list[int]] = defaultdict(list)
        for cid in sorted(target):
            members[target[cid]].append(cid)
        moved = _moved(snap, target)
        wanted = [b for b in snap.batches if self.batches is None or b.name in self.batches]
        chosen = [b for b in wanted if moved.get(b.batch_id)]
        moving = {c for b in chosen for c in moved[b.batch_id]}
        declare = {cid for cid, g in target.items() if raw[cid].group_name != g}
        for g in sorted(members):
            if any(target[cid] == g for cid in moving | declare):
                redeclared = [c for c in members[g] if c in declare]
                actions.append({"kind": "group", "group": g, "reason": reasons.get(g, ""),
                                "columns": [raw[c].name for c in members[g]],
                                "column_ids": members[g],
                                # the declared group changes: column id -> its row read
                                "declare": {str(c): [raw[c].added_version, raw[c].state]
                                            for c in redeclared}})  # fmt: skip
        for b in chosen:
            frags = [f for f in snap.fragments if f.batch_id == b.batch_id]
            files = sum(len(snap.files_by_fragment.get(f.fragment_id, [])) for f in frags)
            actions.append({"kind": "batch", "batch": b.name, "batch_id": b.batch_id,
                            "fragments": len(frags), "files": files,
                            "rows": sum(f.row_count for f in frags)})  # fmt: skip
        if not chosen and not declare:
            actions = []
        log_files = count_access_files(ctx.location)
        if log_files > self.max_log_files:
            actions.append({"kind": "access_log", "files": log_files})
        summary = {
            "batches": len(chosen), "groups": sum(a["kind"] == "group" for a in actions),
            "columns_moved": len(moving), "columns_declared": len(declare) if actions else 0,
            "scans": scans, "access_log_files": log_files,
            "target_fragment_rows": ctx.options().target_fragment_rows,
        }  # fmt: skip
        return MaintenancePlan(self.name, ctx.name, ctx.branch, base, tuple(actions), summary)

    def _declared(self, raw: Mapping[int, ColumnRecord]) -> dict[int, str]:
        by_name = {c.name: cid for cid, c in raw.items()}
        target: dict[int, str] = {}
        assert self.groups is not None
        for g, cols in self.groups.items():
            for name in cols:
                cid = by_name.get(name)
                if cid is None:
                    raise ValidationError(
                        f"Cannot regroup: {name!r} is not a raw column of the table (feature "
                        f"outputs and {ROW_ID} keep their groups); raw columns: "
                        f"{', '.join(sorted(by_name)[:20])}"
                    )
                if cid in target:
                    raise ValidationError(f"Cannot regroup: column {name!r} is in two groups")
                target[cid] = g
        return target

    def _from_log(
        self, raw: Mapping[int, ColumnRecord], sets: Mapping[tuple[int, ...], int]
    ) -> tuple[dict[int, str], dict[str, str]]:
        """Target groups: co-read sets first, then over-wide groups split, cold ones merged."""
        current: dict[str, list[int]] = defaultdict(list)
        for cid in sorted(raw):
            current[raw[cid].group_name].append(cid)
        target: dict[int, str] = {}
        reasons: dict[str, str] = {}
        ranked = sorted(sets.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))
        for ids, count in ranked:
            if count < self.min_scans:
                continue
            cols = sorted(i for i in ids if i in raw and i not in target)
            if not cols:
                continue
            rest = [c for c in current[raw[cols[0]].group_name] if c not in target]
            if (
                cols == rest and len(cols) <= self.max_group_columns
            ):  # already (what is left of) a group
                group = raw[cols[0]].group_name
                target.update(dict.fromkeys(cols, group))
                continue
            for chunk in _chunks(cols, self.max_group_columns):
                group = _name("rg", chunk)
                target.update(dict.fromkeys(chunk, group))
                reasons[group] = f"co-read ({count} scans)"
        cold: list[int] = []
        for g, cids in sorted(current.items()):
            rest = [c for c in cids if c not in target]
            if len(cids) > self.max_group_columns:
                for chunk in _chunks(rest, self.max_group_columns):
                    part = _name(g[:40], chunk)
                    target.update(dict.fromkeys(chunk, part))
                    reasons[part] = f"split of {g}"
            elif rest and len(cids) < self.min_group_columns:
                cold += rest
        if len(cold) > 1:
            for chunk in _chunks(sorted(cold), self.max_group_columns):
                group = _name("cold", chunk)
                target.update(dict.fromkeys(chunk, group))
                reasons[group] = "cold (small, not co-read)"
        return target, reasons

    # -- Execute, Commit ------------------------------------------------------------------

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed:
        ids = [str(a["batch_id"]) for a in plan.actions if a["kind"] == "batch"]
        if not ids:
            return Executed(payload=Rewritten())
        target = {int(cid): str(a["group"]) for a in plan.actions if a["kind"] == "group"
                  for cid in a["column_ids"]}  # fmt: skip
        rows = int(plan.summary["target_fragment_rows"])
        out = rewrite_batches(ctx, plan.base_version, ids, rows, regroup=target)
        return Executed(paths=tuple(out.paths), payload=out)

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult:
        out: Rewritten = executed.payload
        version = None
        summary: dict[str, Any] = {}
        changes = _declare_changes(plan)
        if out.new_batches or changes:
            req = out.request(self.name, plan.base_version)
            req.column_changes = changes
            req.summary["columns_moved"] = int(plan.summary["columns_moved"])
            req.summary["columns_declared"] = len(changes)
            failpoint("governance.before_commit")
            version = ctx.commit(req)
            summary.update(req.summary)
        summary["access_log"] = compact_log_once(ctx, keep_since=_ago(self.log_retention_s))
        return MaintenanceResult(self.name, "committed", version, plan, summary)


def _declare_changes(plan: MaintenancePlan) -> list[ColumnChange]:
    """The catalog changes that make the plan's target groups the declared ones (the columns'
    rows as Prepare read them: a concurrent rename, retire or restore conflicts)."""
    changes = []
    for a in plan.actions:
        if a["kind"] != "group":
            continue
        names = dict(zip(a["column_ids"], a["columns"], strict=True))
        for cid, (read, state) in sorted(a.get("declare", {}).items(), key=lambda kv: int(kv[0])):
            changes.append(ColumnChange(int(cid), int(read), names[int(cid)], state, a["group"]))
    return changes


def compact_log_once(ctx: TableContext, *, keep_since: dt.datetime) -> dict[str, Any]:
    """Compact the table's access log under the catalog lease ``access_log``, so two
    compactions never read the same files (each would rewrite their counts: doubled). When
    another process holds the lease the log is left alone: ``{"skipped": <its owner>}``."""
    store, table_id = ctx.catalog.store, ctx.record.table_id
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    got = acquire(store, table_id, LOG_LEASE, owner, LOG_LEASE_TTL_S)
    if isinstance(got, Holder):
        return {"skipped": got.owner}
    try:
        return dict(compact_access_log(ctx.location, keep_since=keep_since))
    finally:
        release(store, got)


def _ago(seconds: float) -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)


def _chunks(ids: list[int], size: int) -> list[list[int]]:
    return [ids[i : i + size] for i in range(0, len(ids), size)]


def _name(prefix: str, ids: list[int]) -> str:
    """A group name that is a function of its columns (a second run plans the same names)."""
    digest = hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:12]
    return check_group_name(f"{prefix}_{digest}")


def _moved(snap: Snapshot, target: Mapping[int, str]) -> dict[str, set[int]]:
    """Per batch, the raw columns one of its files holds outside their target group."""
    out: dict[str, set[int]] = defaultdict(set)
    for frag in snap.fragments:
        for f in snap.files_by_fragment.get(frag.fragment_id, []):
            for cid, fc in f.columns.items():
                want = target.get(cid)
                if want is not None and want != f.group_name and not fc.feature_version:
                    out[frag.batch_id].add(cid)
    return out
