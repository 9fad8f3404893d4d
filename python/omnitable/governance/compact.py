"""Compaction and folding: the two jobs that rewrite batches (docs/governance.md).

- ``compact`` rewrites batches of at least ``min_fragments`` fragments whose live rows would fit
  in fewer fragments of ``target_fragment_rows`` (default: the table's ``write`` setting).
- ``fold`` rewrites batches whose deleted rows reach ``min_deleted_fraction`` of their rows, or
  whose update overlay files (files beyond one per fragment and column group) reach
  ``min_overlay_files``.

Both rewrite a batch as :mod:`omnitable.governance.rewrite` does and commit it as a replace of
the batch (new batch id, same name) that conflicts when anything touched its fragments since the
plan's version (``CommitRequest.rewrite``, docs/catalog.md "Commits and concurrency").
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from omnitable._failpoints import failpoint
from omnitable.catalog.snapshot import SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult
from omnitable.governance.rewrite import BatchStats, Rewritten, batch_stats, rewrite_batches


@dataclass
class _RewriteJob(ABC):
    """Prepare (choose batches), Execute (rewrite them), Commit (one replace of them all)."""

    name = "rewrite"
    target_fragment_rows: int | None = None
    batches: tuple[str, ...] | None = None  # only these batch names (None: all)

    @abstractmethod
    def _chosen(self, st: BatchStats, target: int) -> bool:
        """Whether this job rewrites a batch with these statistics."""

    def _target(self, ctx: TableContext) -> int:
        return ctx.options(target_fragment_rows=self.target_fragment_rows).target_fragment_rows

    def prepare(self, ctx: TableContext) -> MaintenancePlan:
        base = ctx.head_version()
        snap = ctx.snapshot(version=base, scope=SnapshotScope(stats=False))
        target = self._target(ctx)
        wanted = None if self.batches is None else set(self.batches)
        actions = tuple(
            st.to_action(target)
            for st in batch_stats(snap)
            if (wanted is None or st.batch.name in wanted) and self._chosen(st, target)
        )
        summary: dict[str, Any] = {
            "batches": len(actions),
            "fragments": sum(a["fragments"] for a in actions),
            "files": sum(a["files"] for a in actions),
            "rows": sum(a["rows"] for a in actions),
            "deleted_rows": sum(a["deleted_rows"] for a in actions),
            "target_fragments": sum(a["target_fragments"] for a in actions),
            "target_fragment_rows": target,
        }
        return MaintenancePlan(self.name, ctx.name, ctx.branch, base, actions, summary)

    def execute(self, ctx: TableContext, plan: MaintenancePlan) -> Executed:
        target = int(plan.summary["target_fragment_rows"])
        ids = [str(a["batch_id"]) for a in plan.actions]
        out = rewrite_batches(ctx, plan.base_version, ids, target)
        return Executed(paths=tuple(out.paths), payload=out)

    def commit(
        self, ctx: TableContext, plan: MaintenancePlan, executed: Executed
    ) -> MaintenanceResult:
        out: Rewritten = executed.payload
        req = out.request(self.name, plan.base_version)
        failpoint("governance.before_commit")
        version = ctx.commit(req)
        return MaintenanceResult(self.name, "committed", version, plan, dict(req.summary))


@dataclass
class CompactJob(_RewriteJob):
    """Merge small fragments of a batch into target-sized ones."""

    name = "compact"
    min_fragments: int = 2

    def __post_init__(self) -> None:
        if self.min_fragments < 2:
            raise ValidationError(f"min_fragments must be at least 2, got {self.min_fragments}")
        if self.target_fragment_rows is not None and self.target_fragment_rows < 1:
            raise ValidationError(
                f"target_fragment_rows must be positive, got {self.target_fragment_rows}"
            )

    def _chosen(self, st: BatchStats, target: int) -> bool:
        return st.fragments >= self.min_fragments and math.ceil(st.live / target) < st.fragments


@dataclass
class FoldJob(_RewriteJob):
    """Fold deletion vectors and update overlays into rewritten files."""

    name = "fold"
    min_deleted_fraction: float = 0.1
    min_overlay_files: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.min_deleted_fraction <= 1:
            raise ValidationError(
                f"min_deleted_fraction must be in (0, 1], got {self.min_deleted_fraction}"
            )
        if self.min_overlay_files < 1:
            raise ValidationError(
                f"min_overlay_files must be at least 1, got {self.min_overlay_files}"
            )

    def _chosen(self, st: BatchStats, target: int) -> bool:
        deleted = st.rows > 0 and st.deleted / st.rows >= self.min_deleted_fraction
        return deleted or st.overlays >= self.min_overlay_files
