"""The plan ``Table.backfill`` returns: a :class:`~omnitable.features.planner.Plan` (data) that
knows its table and how to run itself on Spark (:func:`omnitable.exec.runner.run_plan`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.exec.runner import (
    Progress,
    RunOptions,
    RunResult,
    SessionSource,
    route_and_tune,
    run_plan,
)
from omnitable.exec.tuning import Cluster, explain_lines
from omnitable.features.planner import Plan

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class BackfillPlan(Plan):
    """A backfill plan bound to its table. Nothing runs until :meth:`run`."""

    ctx: TableContext = field(kw_only=True, repr=False)
    # plans the same backfill again from the table's current version (set by Table.backfill):
    # a plan executes its decisions once, a later run() re-plans first
    replan: Callable[[], Plan] | None = field(default=None, kw_only=True, repr=False)
    executed: bool = field(default=False, kw_only=True)
    # the same backfill planned on another branch (set by Table.backfill), for run(branch=...)
    on_branch: Callable[[str], BackfillPlan] | None = field(default=None, kw_only=True, repr=False)
    # the same backfill planned at an older version (set by Table.backfill): a queue worker
    # joins a queue another worker created before some of its items were committed
    plan_at: Callable[[int], Plan] | None = field(default=None, kw_only=True, repr=False)
    # run as a worker of the plan's durable work queue by default (Table.backfill(queue=True))
    queue: bool = field(default=False, kw_only=True)

    @classmethod
    def bind(
        cls, plan: Plan, ctx: TableContext, replan: Callable[[], Plan] | None = None
    ) -> BackfillPlan:
        values = {f.name: getattr(plan, f.name) for f in dataclasses.fields(Plan)}
        return cls(**values, ctx=ctx, replan=replan)

    def explain(self, spark: SparkSession | None = None, *, engine: str | None = None) -> str:
        """The plan (:meth:`Plan.explain`) and each step's routes and settings with why
        (:mod:`omnitable.exec.tuning`): on ``spark``'s cluster (default: the active session;
        none: GPU routing is decided at run), from the table's settings and run history, on
        ``engine`` (default: the setting ``backfill.engine``)."""
        text = super().explain()
        if self.is_empty:
            return text
        options = RunOptions.resolve(self.ctx.settings, engine=engine)
        session = spark or _active_session()
        cluster, tunings = route_and_tune(
            self.ctx,
            self,
            options,
            lambda: Cluster.of_session(session) if session is not None else None,
        )
        return "\n".join([text, *explain_lines(tunings, cluster)])

    def run(
        self,
        spark: SessionSource = None,
        *,
        checkpoint_fragments: int | None = None,
        isolation: str = "auto",
        max_error_ratio: float | None = None,
        on_corrupt: str | None = None,
        max_skip_ratio: float | None = None,
        progress: Progress | None = None,
        branch: str | None = None,
        allow_version_drift: bool = False,
        tuning: str | None = None,
        batch_rows: int | None = None,
        fragments_per_task: int | None = None,
        memory_mb: int | None = None,
        queue: bool | None = None,
        lease_s: float | None = None,
        engine: str | None = None,
    ) -> RunResult:
        """Execute the plan on Spark (see :mod:`omnitable.exec.runner` and docs/errors.md).

        Args:
            spark: session to use (default: the active one, or a new local one), or a function
                making one, called only when a step or the error log needs Spark.
            branch: run on this branch instead (the backfill is planned again on its head and
                commits there: write-audit-publish, docs/branches.md).
            checkpoint_fragments: commit every this many fragments per step, so a restarted
                run skips committed work (default: one commit per step).
            isolation: record-level isolation of pandas features: ``auto``, ``inprocess``,
                ``subprocess`` or ``off`` (a failing record then fails the job).
            max_error_ratio: abort (committing nothing for that chunk) when more than this
                fraction of a feature's records fail.
            on_corrupt: ``skip`` leaves corrupt input fragments missing and reports them in
                the result (``RunResult.skipped``); ``fail`` fails the job. Read errors that are
                not corruption (schema drift, missing file, permissions) always fail the job.
            max_skip_ratio: abort when more than this fraction of a chunk's fragments is skipped.
            allow_version_drift: run features defined in notebooks and scripts (stored pickled)
                although a library's ``major.minor`` version differs from the one recorded at
                registration (a Python minor version or a missing library still fails;
                docs/features.md, "Features defined in notebooks and scripts").

            ``None`` (max_error_ratio, on_corrupt, max_skip_ratio): the setting
            ``backfill.<name>`` of the warehouse, else of the table, else its default
            (docs/settings.md).
            progress: ``True`` prints a one-line progress (step, fragments, rows, ETA) to
                stderr; a callable taking one argument gets a
                :class:`~omnitable.observability.ProgressEvent` when each step starts and after
                each committed chunk; one taking four is called as ``progress(step, steps,
                fragments_done, fragments_total)`` (docs/observability.md).
            tuning: ``on`` (default; setting ``backfill.tuning``): the settings below that are
                not given come from the run history of the same features (same versions, same
                cluster size); ``off``: defaults. docs/features.md, "Routing and tuning".
            batch_rows, fragments_per_task, memory_mb: records per call of a pandas feature,
                whole fragments per Spark task, per-call memory budget (MiB); given, they win
                over the features' own options and the history.
                A queue worker reports after each work item it finishes, counting every
                worker's done items: events carry their fragments and rows; a four-argument
                callable is called as ``progress(step, steps, items_done, items_total)``.
            queue: run as one worker of the plan's durable work queue (default: the plan's
                ``queue``, set by ``Table.backfill(queue=True)``): join or create the queue in
                the catalog and work its items until none are left, sharing them with every
                other worker of the same backfill (docs/features.md, "Work queue").
            lease_s: a queue item's lease in seconds (default 60): a dead worker's item is
                leased again after it.
            engine: ``spark`` (default; setting ``backfill.engine``): every step is a Spark
                job; ``python``: steps of pandas features on CPU run without Spark, in one
                local Python worker process; the others on Spark, with the reason in
                ``explain()`` (docs/features.md, "Engines").

        Raises:
            ErrorRatioExceeded, CommitConflict (a concurrent commit changed what the plan
            decided on or what a chunk read; committed chunks stay), ValidationError.

        A plan executes its decisions once: calling ``run()`` again (after a conflict, a failure
        or a success) first re-plans from the table's current version, so committed work is
        skipped and decisions that no longer hold are never executed.
        """
        queue = self.queue if queue is None else queue
        if not isinstance(queue, bool):
            raise ValidationError(
                f"Cannot run backfill: queue must be True or False, got {queue!r}"
            )
        if lease_s is not None and not queue:
            raise ValidationError("Cannot run backfill: lease_s applies only with queue=True")
        if branch is not None and branch != self.ctx.branch:
            if self.on_branch is None:
                raise ValidationError(
                    "Cannot run this plan on another branch: plan it with Table.backfill"
                )
            return self.on_branch(branch).run(
                spark, checkpoint_fragments=checkpoint_fragments, isolation=isolation,
                max_error_ratio=max_error_ratio, on_corrupt=on_corrupt,
                max_skip_ratio=max_skip_ratio, progress=progress,
                allow_version_drift=allow_version_drift, tuning=tuning, batch_rows=batch_rows,
                fragments_per_task=fragments_per_task, memory_mb=memory_mb,
                queue=queue, lease_s=lease_s, engine=engine,
            )  # fmt: skip
        options = RunOptions.resolve(
            self.ctx.settings,
            checkpoint_fragments=checkpoint_fragments,
            isolation=isolation,
            max_error_ratio=max_error_ratio,
            on_corrupt=on_corrupt,
            max_skip_ratio=max_skip_ratio,
            allow_version_drift=allow_version_drift,
            tuning=tuning,
            batch_rows=batch_rows,
            fragments_per_task=fragments_per_task,
            memory_mb=memory_mb,
            engine=engine,
        )
        if self.executed and self.replan is not None:
            fresh = self.replan()
            for name in ("base_version", "batches", "steps", "reused", "states"):
                setattr(self, name, getattr(fresh, name))
            self.recompute_reasons = fresh.recompute_reasons
        self.executed = True
        if queue:
            from omnitable.exec.queue import QueueOptions, run_queue

            qopts = QueueOptions() if lease_s is None else QueueOptions(lease_s=lease_s)
            return run_queue(self.ctx, self, spark, options, progress, qopts, self.plan_at)
        return run_plan(self.ctx, self, spark, options, progress)


def _active_session() -> SparkSession | None:
    try:
        from pyspark.sql import SparkSession
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return None
    return SparkSession.getActiveSession()
