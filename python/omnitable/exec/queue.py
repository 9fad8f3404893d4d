"""Running a backfill plan as one worker of its durable work queue (docs/features.md, "Work
queue"; the records: :mod:`omnitable.catalog.queue`).

Every worker plans the same backfill, finds (or creates, idempotently) the plan's queue in the
catalog and leases one work item (one checkpoint chunk of one step) at a time: it computes the
chunk as a plain run does (:func:`omnitable.exec.runner.run_chunk`) while a heartbeat thread
extends its lease, and commits the chunk and the item's ``done`` mark in one transaction that
first checks the lease is still ours. A worker that dies stops heartbeating; its item is leased
again once the lease expires. A worker whose lease expired while it was committing (a stalled
process) commits nothing: the item is reported in ``RunResult.warnings`` and the worker goes on.
An item whose chunk conflicts with a concurrent writer (``CommitConflict``: an update of its
inputs, a compaction of its fragments) is given back and leased again, computed from the new
head; after :data:`CONFLICT_ATTEMPTS` leases it fails (the plan no longer holds: re-plan).
Steps are ordered: the items of a step are leased once the previous steps are done (a worker
waits, polling with backoff). The worker returns when every item is done (the queue is then
marked finished), or raises when an item failed (for every worker of the plan).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from omnitable.catalog import queue as q
from omnitable.exceptions import (
    CatalogError,
    CommitConflict,
    CommitOutcomeUnknown,
    OmniTableError,
    ValidationError,
)
from omnitable.exec.runner import (
    ChunkRun,
    Progress,
    RunOptions,
    RunResult,
    SessionSource,
    gpu_profile,
    open_run,
    run_chunk,
    step_result,
)
from omnitable.exec.tuning import Cluster, StepTuning
from omnitable.observability.progress import (
    LegacyProgress,
    ProgressEvent,
    dispatcher,
    eta,
    takes_event,
)

if TYPE_CHECKING:
    from omnitable.catalog.store import CatalogStore
    from omnitable.context import TableContext
    from omnitable.features.planner import Plan

log = logging.getLogger("omnitable.backfill")

ITEMS_PER_STEP = 16  # default chunking of a step into work items (checkpoint_fragments wins)
CONFLICT_ATTEMPTS = 3  # leases of an item whose commit conflicts before the item (plan) fails


class QueueFailed(OmniTableError):
    """A work item of the plan failed for good (in this worker or another): the plan stops."""


@dataclass(frozen=True)
class QueueOptions:
    """How a queue worker leases: ``lease_s`` (an item's lease; a dead worker's item is leased
    again after it), ``heartbeat_s`` (how often a live worker extends it; default a third of
    ``lease_s``), ``poll_s`` (first wait when a step's items are all leased; doubles up to
    ``max_poll_s``)."""

    lease_s: float = 60.0
    heartbeat_s: float | None = None
    poll_s: float = 0.5
    max_poll_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("lease_s", "poll_s", "max_poll_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                raise ValidationError(f"Cannot run a backfill queue: {name} must be > 0 seconds")
        hb = self.heartbeat_s
        if hb is not None and (not isinstance(hb, int | float) or hb <= 0):
            raise ValidationError("Cannot run a backfill queue: heartbeat_s must be > 0 seconds")

    @property
    def beat_every(self) -> float:
        return self.heartbeat_s if self.heartbeat_s is not None else self.lease_s / 3


def chunk_size(plan: Plan, options: RunOptions, step: int) -> int:
    n = len(plan.steps[step].fragments)
    return options.checkpoint_fragments or max(1, -(-n // ITEMS_PER_STEP))


def _hash(doc: object) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def signature(ctx: TableContext, plan: Plan, options: RunOptions) -> str:
    """What was asked: table, branch, targets, batches, chunking (not the version planned at)."""
    asked = [ctx.record.table_id, ctx.branch, plan.targets, plan.batches,
             options.checkpoint_fragments]  # fmt: skip
    return _hash(asked)


def plan_id(ctx: TableContext, plan: Plan, options: RunOptions) -> str:
    """A stable hash of the plan: processes that plan the same work get the same id."""
    steps = [
        [
            [f.id for f in s.features],
            [f.fragment_id for f in s.fragments],
            chunk_size(plan, options, i),
        ]
        for i, s in enumerate(plan.steps)
    ]
    return _hash([signature(ctx, plan, options), plan.base_version, steps])


def work_items(ctx: TableContext, plan: Plan, pid: str, options: RunOptions) -> list[q.Item]:
    """The plan's items: each step's fragments in chunks of :func:`chunk_size`."""
    out = []
    for i, step in enumerate(plan.steps):
        ids = [f.fragment_id for f in step.fragments]
        size = chunk_size(plan, options, i)
        for c, start in enumerate(range(0, len(ids), size)):
            out.append(q.Item(ctx.record.table_id, pid, i + 1, c, ids[start : start + size]))
    return out


def join_queue(
    ctx: TableContext, plan: Plan, options: RunOptions, plan_at: Callable[[int], Plan] | None
) -> tuple[Plan, str]:
    """The plan this worker runs and its queue id: an open queue of the same backfill planned
    at an older version (by a worker that started first) is joined, planned again at its base
    version; else the queue of ``plan`` is created unless it exists."""
    store, table_id = ctx.catalog.store, ctx.record.table_id
    pid = plan_id(ctx, plan, options)
    header = q.read_header(store, table_id, pid)
    if header is None or header["state"] == q.FAILED:
        found = q.find_open(store, table_id, signature(ctx, plan, options))
        if found is not None and plan_at is not None:
            older = plan_at(int(found[1]["base_version"]))
            if plan_id(ctx, older, options) == found[0]:
                return older, found[0]
            log.warning("queue %s of %s is for another plan: not joined", found[0], ctx.name)
        header = {"signature": signature(ctx, plan, options), "base_version": plan.base_version,
                  "branch": ctx.branch, "targets": plan.targets}  # fmt: skip
        q.create(store, table_id, pid, header, work_items(ctx, plan, pid, options))
    return plan, pid


def run_queue(
    ctx: TableContext,
    plan: Plan,
    spark: SessionSource = None,
    options: RunOptions | None = None,
    progress: Progress | None = None,
    queue_options: QueueOptions | None = None,
    plan_at: Callable[[int], Plan] | None = None,
) -> RunResult:
    """Work the items of ``plan``'s queue until none are left; see the module doc. Each step
    runs with the routes and settings a plain run would pick (:func:`tune_run`: run arguments,
    features' options, run history, defaults), recorded in the run like a plain run's.
    ``progress``: ``True`` or a callable taking a
    :class:`~omnitable.observability.ProgressEvent` gets one after each item this worker
    finishes, counting the fragments and rows of every worker's done items; a callable taking
    four is called as ``progress(step, steps, items_done, items_total)`` (all steps' items).

    Raises:
        QueueFailed: an item failed (here: the original error is raised instead).
        CommitConflict, ErrorRatioExceeded: as :func:`~omnitable.exec.runner.run_plan`.
        ValidationError: ``progress`` is none of the accepted forms.
    """
    options, queue_options = options or RunOptions(), queue_options or QueueOptions()
    started = time.perf_counter()
    report = _reporter(progress)  # a bad progress argument fails before any work
    if plan.is_empty:
        return RunResult(None)
    plan, pid = join_queue(ctx, plan, options, plan_at)
    with open_run(ctx, plan, spark, options, queue=pid) as opened:
        shared, result, tunings = opened.chunks, opened.chunks.result, opened.tunings
        result.steps = [step_result(s, t) for s, t in zip(plan.steps, tunings, strict=True)]
        tuned = _Tunings(tunings, opened.cluster, result)
        run_id = shared.run_id
        on_item = None if report is None else lambda d: report(run_id, ctx.name, d)
        _work(shared, plan, pid, queue_options, tuned, on_item)
        result.seconds = time.perf_counter() - started
    return result


@dataclass
class _Tunings:
    """Each step's tuning, its GPU resource profile built when the worker first runs the step."""

    steps: list[StepTuning]
    cluster: Cluster
    result: RunResult
    ready: set[int] = field(default_factory=set)

    def of(self, step: int) -> StepTuning:
        if step not in self.ready:
            self.ready.add(step)
            gpu_profile(self.steps[step - 1], self.cluster, self.result)
        return self.steps[step - 1]


_Report = Callable[[str, str, "_Done"], None]


@dataclass(frozen=True)
class _Done:
    """The item just finished, the queue's items now (all workers'), and the worker's start."""

    plan: Plan
    item: q.Item
    items: list[q.Item]
    started: float


def _reporter(progress: Progress | None) -> _Report | None:
    """What :func:`_work` calls after each item, from a ``progress=`` argument (None: no
    report, and no read of the queue's items for it)."""
    if callable(progress) and not takes_event(progress):
        legacy = cast(LegacyProgress, progress)
        return lambda _run, _table, d: legacy(d.item.step, len(d.plan.steps),
                                      sum(i.state == q.DONE for i in d.items), len(d.items))  # fmt: skip
    events = dispatcher(progress)
    if events is None:
        return None
    return lambda run_id, table, d: events(_event(run_id, table, d))


def _event(run_id: str, table: str, d: _Done) -> ProgressEvent:
    """A :class:`ProgressEvent` for the item's step: fragments and rows of every done item."""
    rows = {f.fragment_id: f.row_count for s in d.plan.steps for f in s.fragments}
    step = d.item.step
    done = [i for i in d.items if i.state == q.DONE]
    if not d.items:  # another worker finished the queue (and removed its items) meanwhile
        done = [q.Item("", "", n, 0, [f.fragment_id for f in s.fragments])
                for n, s in enumerate(d.plan.steps, 1)]  # fmt: skip
    frags = [f for i in done if i.step == step for f in i.fragments]
    step_rows = sum(rows.get(f, 0) for f in frags)
    run_done = sum(rows.get(f, 0) for i in done for f in i.fragments)
    totals = [sum(f.row_count for f in s.fragments) for s in d.plan.steps]
    elapsed = time.perf_counter() - d.started
    return ProgressEvent(run_id, table, step,
                         len(d.plan.steps), len(frags), len(d.plan.steps[step - 1].fragments),
                         step_rows, totals[step - 1], run_done, sum(totals), elapsed,
                         eta(elapsed, run_done, sum(totals)))  # fmt: skip


def _work(
    run: ChunkRun,
    plan: Plan,
    pid: str,
    opts: QueueOptions,
    tunings: _Tunings,
    report: Callable[[_Done], None] | None,
) -> None:
    """Lease, compute and commit items until the queue is finished."""
    store, table_id = run.ctx.catalog.store, run.ctx.record.table_id
    owner = q.this_owner(run.run_id)
    wait, started = opts.poll_s, time.perf_counter()
    while True:
        got = q.lease_next(store, table_id, pid, owner, opts.lease_s)
        if isinstance(got, q.Finished):
            q.finish(store, table_id, pid)
            return
        if isinstance(got, q.Failed):
            raise QueueFailed(f"Cannot finish backfill queue {pid} of '{run.ctx.name}': "
                              f"{got.error}. Fix the cause and run the backfill again (a new "
                              "plan skips committed work).")  # fmt: skip
        if isinstance(got, q.Wait):
            time.sleep(wait)
            wait = min(wait * 2, opts.max_poll_s)
            continue
        wait = opts.poll_s
        _run_item(run, plan, got, store, opts, tunings.of(got.step))
        if report is not None:
            report(_Done(plan, got, q.items(store, table_id, pid), started))


def _run_item(
    run: ChunkRun,
    plan: Plan,
    item: q.Item,
    store: CatalogStore,
    opts: QueueOptions,
    tuning: StepTuning,
) -> None:
    """One leased item: compute and commit its chunk (which marks it done), or settle it."""
    step = plan.steps[item.step - 1]
    out = run.result.steps[item.step - 1]
    by_id = {f.fragment_id: f for f in step.fragments}
    chunk = [by_id[i] for i in item.fragments]
    tag = f"omnitable-{run.run_id}-step{item.step}-{item.chunk}"
    committed = len(out.versions)
    try:
        with _heartbeats(store, item, opts), q.holding_item(item):
            run_chunk(run, step, chunk, tag, out, tuning)
    except q.ItemLeaseLost as exc:  # another worker took the item: its commit counts
        log.warning("backfill of %s: %s", run.ctx.name, exc)
        run.result.warnings.append(str(exc))
        return
    except (CommitOutcomeUnknown, CatalogError):  # the catalog, not the item: give it back
        _settle_quietly(store, item, q.PENDING)
        raise
    except CommitConflict as exc:  # a concurrent writer: a fresh lease recomputes from the head
        if item.attempts >= CONFLICT_ATTEMPTS:
            _settle_quietly(store, item, q.FAILED, f"CommitConflict: {str(exc)[:500]}")
            raise
        _settle_quietly(store, item, q.PENDING)
        note = (f"work item {item.step}-{item.chunk} conflicted with a concurrent commit "
                f"(attempt {item.attempts} of {CONFLICT_ATTEMPTS}), given back: {exc}")  # fmt: skip
        log.warning("backfill of %s: %s", run.ctx.name, note)
        run.result.warnings.append(note)
        return
    except Exception as exc:
        _settle_quietly(store, item, q.FAILED, f"{type(exc).__name__}: {str(exc)[:500]}")
        raise
    except BaseException:  # interrupted: give the item back at once
        _settle_quietly(store, item, q.PENDING)
        raise
    if len(out.versions) == committed:  # nothing to commit (every fragment skipped or gone)
        q.settle(store, item, q.DONE)
    out.fragments += len(chunk)
    out.rows += sum(f.row_count for f in chunk)


def _settle_quietly(
    store: CatalogStore, item: q.Item, state: str, error: str | None = None
) -> None:
    """Settle ``item`` while an exception propagates (a catalog error here only logs: the
    lease then expires and the item is leased again)."""
    try:
        q.settle(store, item, state, error)
    except Exception as exc:
        log.warning("could not mark work item %s-%s %s: %s", item.step, item.chunk, state, exc)


@contextmanager
def _heartbeats(store: CatalogStore, item: q.Item, opts: QueueOptions) -> Iterator[None]:
    """Extend ``item``'s lease every ``opts.beat_every`` seconds while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(opts.beat_every):
            try:
                if not q.heartbeat(store, item, opts.lease_s):
                    log.warning("lost the lease of work item %s-%s", item.step, item.chunk)
                    return
            except Exception as exc:  # a catalog hiccup: the next beat tries again
                log.warning("heartbeat of work item %s-%s failed: %s", item.step, item.chunk, exc)

    thread = threading.Thread(target=beat, name=f"omnitable-heartbeat-{item.key}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
