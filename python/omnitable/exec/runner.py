"""Running a backfill plan on Spark: one job per step (per checkpoint chunk), atomic commits.

For each step the driver reads the step's inputs through the ``omnitable`` data source (one
input partition per fragment, rows in order; only the inputs' column files are opened), adds the
SQL features' expressions (evaluated in the JVM), and runs :func:`omnitable.exec.task.compute_partition`
in Python workers with ``mapInArrow``. Tasks run every pandas feature inside the record-level
isolation wrapper, write one column file per fragment and feature and return descriptors with
their failed records. Per chunk the driver checks the error ratio (``max_error_ratio``: above
it the chunk commits nothing and the run aborts), writes the failed records to the table's error
table, then commits the files with lineage in one transaction (``checkpoint_fragments``; default
one commit per step), so a restarted run skips committed work.

With ``engine="python"`` the steps of pandas features run without Spark instead
(:mod:`omnitable.exec.local_engine`); the Spark session is then made only when a step or the
error log needs it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, ExpectedProvider, LineageEntry
from omnitable.catalog.records import ColumnRecord, FragmentRecord
from omnitable.catalog.runs import RunScope
from omnitable.catalog.snapshot import Snapshot, SnapshotScope
from omnitable.exceptions import (
    CommitConflict,
    CommitOutcomeUnknown,
    ErrorRatioExceeded,
    NotFoundError,
    ValidationError,
)
from omnitable.exec.errors import append_errors
from omnitable.exec.escalation import TaskProgress, crash_escalation
from omnitable.exec.local_engine import LocalPythonWorker, local_reason
from omnitable.exec.shipping import ship_modules
from omnitable.exec.step_job import ChunkJob, TaskOutput, execute_chunk, retry_offsets
from omnitable.exec.tuning import Cluster, StepTuning, resource_profile, run_locally, tune
from omnitable.format.fs import delete_quietly
from omnitable.isolation import MODES
from omnitable.observability import metrics
from omnitable.observability.progress import ProgressEvent, dispatcher, eta
from omnitable.settings import (
    BACKFILL_ENGINE,
    BACKFILL_MAX_ERROR_RATIO,
    BACKFILL_MAX_SKIP_RATIO,
    BACKFILL_ON_CORRUPT,
    BACKFILL_TUNING,
    Sources,
)
from omnitable.spark.session import active_or_new_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from omnitable.context import TableContext
    from omnitable.features.definition import Feature
    from omnitable.features.planner import Plan, Step

# (step, steps, fragments done, fragments total), or one taking a ProgressEvent, or True
# (a line on stderr): docs/observability.md
Progress = Callable[[int, int, int, int], None] | Callable[[ProgressEvent], None] | bool
# a session, a function making one (called when a step first needs Spark), or None (the active
# session, else a new local one)
SessionSource: TypeAlias = "SparkSession | Callable[[], SparkSession] | None"
log = logging.getLogger("omnitable.backfill")


def _ship_payload_modules(session: SparkSession, plan: Plan) -> None:
    """Ship the local modules that pickled features reference (a helper module next to the
    notebook or script) when this process can import them; one it cannot import fails the
    feature's load with a clear error before any job runs."""
    for name in sorted(
        {
            m
            for s in plan.steps
            for f in s.features
            if f.payload
            for m in f.payload.get("modules", [])
        }
    ):
        try:
            ship_modules(session, [name])
        except ImportError as exc:
            log.info("not shipping module %s of a pickled feature: %s", name, exc)


@dataclass(frozen=True)
class RunOptions:
    """How a plan runs.

    Attributes:
        checkpoint_fragments: commit every this many fragments per step (None: once per step).
        isolation: record-level isolation mode for every pandas feature: ``auto`` (each
            feature's own setting, in-process with escalation to a child process),
            ``inprocess``, ``subprocess`` or ``off`` (a failing record fails the job).
        max_error_ratio: abort when more than this fraction of a feature's records in a
            checkpoint chunk fail (that chunk commits nothing).
        on_corrupt: ``skip`` (an input fragment with a corrupt file, after the reader's
            retries, is skipped — left missing — and reported) or ``fail`` (the job fails).
            Other read errors (schema drift, missing file, permissions) always fail the job.
        max_skip_ratio: abort when more than this fraction of a chunk's fragments is skipped.
        allow_version_drift: run features stored by value (pickled) with other library
            ``major.minor`` versions than they were pickled with (a different Python minor
            version or a missing library still fails; docs/features.md).
        engine: ``spark`` (every step a Spark job) or ``python``: steps of pandas features on
            CPU run without Spark, in one local Python worker process
            (:mod:`omnitable.exec.local_engine`; other steps on Spark, with the reason).
    """

    checkpoint_fragments: int | None = None
    isolation: str = "auto"
    max_error_ratio: float = BACKFILL_MAX_ERROR_RATIO.default
    on_corrupt: str = BACKFILL_ON_CORRUPT.default
    max_skip_ratio: float = BACKFILL_MAX_SKIP_RATIO.default
    allow_version_drift: bool = False
    tuning: str = BACKFILL_TUNING.default
    batch_rows: int | None = None
    fragments_per_task: int | None = None
    memory_mb: int | None = None
    engine: str = BACKFILL_ENGINE.default

    def __post_init__(self) -> None:
        for name in ("batch_rows", "fragments_per_task", "memory_mb"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValidationError(
                    f"Cannot run backfill: {name} must be a positive int or None, got {v!r}"
                )
        cp = self.checkpoint_fragments
        if cp is not None and (not isinstance(cp, int) or isinstance(cp, bool) or cp < 1):
            raise ValidationError(
                "Cannot run backfill: checkpoint_fragments must be a positive int"
            )
        if self.isolation not in MODES:
            raise ValidationError(
                f"Cannot run backfill: isolation must be one of {', '.join(MODES)}, "
                f"got {self.isolation!r}"
            )
        checked = (BACKFILL_MAX_ERROR_RATIO, BACKFILL_MAX_SKIP_RATIO, BACKFILL_ON_CORRUPT,
                   BACKFILL_TUNING, BACKFILL_ENGINE)  # fmt: skip
        for setting in checked:
            setting.check(getattr(self, setting.name), "run backfill", setting.name)

    @classmethod
    def resolve(cls, sources: Sources, **arguments: Any) -> RunOptions:
        """Options from ``arguments``; a None ``backfill.<name>`` one comes from ``sources``."""
        return cls(**{**arguments, **sources.resolve_fields("backfill.", arguments)})


@dataclass
class StepResult:
    features: list[str]
    fragments: int = 0
    rows: int = 0
    files: int = 0
    versions: list[int] = field(default_factory=list)
    seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)  # feature@version -> failed records
    skipped: list[dict[str, Any]] = field(default_factory=list)  # unreadable input fragments
    bytes_read: int = 0  # compressed column-chunk bytes the step's scans read (Spark metrics)
    scans: int = 0
    escalated: list[str] = field(default_factory=list)  # features re-run in the child process
    bytes_written: int = 0  # bytes of the column files the step wrote
    compute_seconds: float = 0.0  # time the tasks spent in pandas features (all tasks)
    peak_memory_bytes: int = 0  # peak resident memory of a Python worker (max over tasks)
    failures: int = 0  # failed records (error rows), all features
    retries: int = 0  # task attempts after a failure, and features escalated to a child
    spills: int = 0  # bytes the tasks spilled, memory + disk (Spark's task metrics)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)  # value and source
    routes: dict[str, str] = field(default_factory=dict)  # feature id -> jvm | python-cpu | -gpu


@dataclass
class RunResult:
    """Outcome of ``Plan.run()``."""

    run_id: str | None
    versions: list[int] = field(default_factory=list)
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    cluster: dict[str, Any] = field(default_factory=dict)  # the size tuning compares

    @property
    def version(self) -> int | None:
        return self.versions[-1] if self.versions else None

    @property
    def errors(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.steps:
            for k, v in s.errors.items():
                out[k] = out.get(k, 0) + v
        return out

    @property
    def skipped(self) -> list[dict[str, Any]]:
        return [x for s in self.steps for x in s.skipped]

    def summary(self) -> dict[str, Any]:
        return {
            "skipped": self.skipped,
            "run_id": self.run_id,
            "versions": self.versions,
            "errors": self.errors,
            "seconds": round(self.seconds, 3),
            "warnings": self.warnings,
            "cluster": self.cluster,
            "steps": [s.__dict__ for s in self.steps],
        }


def run_plan(
    ctx: TableContext,
    plan: Plan,
    spark: SessionSource = None,
    options: RunOptions | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Execute ``plan`` on ``ctx``'s table; see the module doc. Raises whatever a step raises,
    after recording the run as failed or aborted (committed checkpoints stay and are skipped by a
    re-run)."""
    options = options or RunOptions()
    started = time.perf_counter()
    report = dispatcher(progress)  # a bad progress argument fails before any work
    if plan.is_empty:
        return RunResult(None)
    with open_run(ctx, plan, spark, options) as opened:
        shared, cluster, result = opened.chunks, opened.cluster, opened.chunks.result
        run_id = shared.run_id
        rlog = logging.LoggerAdapter(log, {"run_id": run_id, "table": ctx.name})
        rlog.info("backfill of %s: %d step(s), run %s", ctx.name, len(plan.steps), run_id)
        totals = [sum(f.row_count for f in s.fragments) for s in plan.steps]
        for index, (step, tuning) in enumerate(zip(plan.steps, opened.tunings, strict=True), 1):
            out = step_result(step, tuning)
            result.steps.append(out)
            tracked = _Tracked(report, run_id, ctx.name, index, totals, result, started)
            try:
                _run_step(shared, step, index, out, tracked, gpu_profile(tuning, cluster, result))
            finally:
                metrics.BACKFILL_SECONDS.inc(time.perf_counter() - tracked.step_started)
            rlog.info("backfill of %s: step %d/%d (%s) committed %d fragment(s), %d row(s) in "
                      "%.1fs", ctx.name, index, len(plan.steps), ", ".join(out.features),
                      out.fragments, out.rows, out.seconds)  # fmt: skip
        result.seconds = time.perf_counter() - started
    return result


@dataclass(frozen=True)
class OpenRun:
    """A backfill run in progress: what its chunks share, the cluster, each step's tuning."""

    chunks: ChunkRun
    cluster: Cluster
    tunings: list[StepTuning]


@contextlib.contextmanager
def open_run(
    ctx: TableContext, plan: Plan, spark: SessionSource, options: RunOptions, **record: Any
) -> Iterator[OpenRun]:
    """Route and tune the plan's steps (:func:`tune_run`), then open its run record
    (:func:`describe`, with ``record``'s entries) and its engines (:func:`run_engines`); on exit
    the run is recorded as succeeded, or failed or aborted with the exception, which propagates."""
    sessions = Sessions(ctx, plan, spark)
    cluster, tunings = tune_run(ctx, plan, sessions, options)
    described = describe(plan, options, **record, tuning=[t.settings() for t in tunings])
    with (
        RunScope(
            ctx.catalog, ctx.record, "backfill", described, abort_on=(ErrorRatioExceeded,)
        ) as scope,
        run_engines(sessions, ctx, scope, options, tunings, cluster) as chunks,
    ):
        warn_tunings(ctx, tunings, chunks.result)
        yield OpenRun(chunks, cluster, tunings)


def tune_run(
    ctx: TableContext, plan: Plan, sessions: Sessions, options: RunOptions
) -> tuple[Cluster, list[StepTuning]]:
    """The run's cluster and every step's routes and settings (:func:`tune`: the run
    arguments, then the features' options, then the run history, then the defaults), with the
    ``python`` engine's decisions. The session is made here unless every step runs without
    Spark (the cluster is then :meth:`Cluster.python_engine`)."""
    cluster, tunings = route_and_tune(
        ctx, plan, options, lambda: Cluster.of_session(sessions.get())
    )
    assert cluster is not None
    return cluster, tunings


def route_and_tune(
    ctx: TableContext,
    plan: Plan,
    options: RunOptions,
    spark_cluster: Callable[[], Cluster | None],
) -> tuple[Cluster | None, list[StepTuning]]:
    """The cluster (:meth:`Cluster.python_engine` when every step runs without Spark, else
    ``spark_cluster()``) and every step's routes and settings on it, on ``options.engine``."""
    reasons = engine_reasons(ctx, plan, options)
    local = all(r is None for r in reasons)
    cluster = Cluster.python_engine() if local else spark_cluster()
    user = {k: getattr(options, k) for k in ("batch_rows", "fragments_per_task", "memory_mb")}
    tunings = tune(ctx, plan, cluster, enabled=options.tuning == "on", user=user)
    if options.engine == "python":
        for tuning, reason in zip(tunings, reasons, strict=True):
            run_locally(tuning, reason)
    return cluster, tunings


def engine_reasons(ctx: TableContext, plan: Plan, options: RunOptions) -> list[str | None]:
    """Per step, why it runs on Spark (None: on the ``python`` engine)."""
    if options.engine != "python":
        return ["engine=spark"] * len(plan.steps)
    columns = [c for c in ctx.all_columns()[1] if c.state == "active"]
    return [local_reason(step, columns) for step in plan.steps]


class Sessions:
    """The run's Spark session, made (and the features' modules shipped to it) on first need:
    a run whose steps all run on the ``python`` engine, with no failed record to log, starts
    none. ``spark``: a session, a function making one, or None (the active one, else a new
    local one)."""

    def __init__(
        self,
        ctx: TableContext,
        plan: Plan,
        spark: SessionSource,
    ) -> None:
        self._ctx, self._plan, self._spark = ctx, plan, spark
        self._session: SparkSession | None = None
        self._driver_escalation: bool | None = None

    def get(self) -> SparkSession:
        if self._session is None:
            given = self._spark() if callable(self._spark) else self._spark
            self._session = prepare_session(self._ctx, self._plan, given)
        return self._session

    def driver_escalation(self, options: RunOptions, result: RunResult) -> bool:
        """Whether the driver escalates crashes of the session's chunks (worked out, and a
        warning added to ``result`` when crash escalation cannot run, on the first call)."""
        if self._driver_escalation is None:
            escalation = crash_escalation(self.get())
            if escalation.warning is not None and options.isolation == "auto":
                log.warning("backfill of %s: %s", self._ctx.name, escalation.warning)
                result.warnings.append(escalation.warning)
            self._driver_escalation = escalation.driver_fallback and options.isolation == "auto"
        return self._driver_escalation


def warn_tunings(ctx: TableContext, tunings: list[StepTuning], result: RunResult) -> None:
    """Log the tunings' warnings (e.g. a GPU preference on a CPU cluster) into ``result``."""
    for t in tunings:
        for w in t.warnings:
            log.warning("backfill of %s: %s", ctx.name, w)
            result.warnings.append(w)


def step_result(step: Step, tuning: StepTuning) -> StepResult:
    """A step's empty result, with the settings and routes it runs with (as ``runs()`` shows)."""
    out = StepResult([f.id for f in step.features])
    out.settings = tuning.settings()
    out.routes = {r.feature: r.route for r in tuning.routes}
    return out


def prepare_session(ctx: TableContext, plan: Plan, spark: SparkSession | None) -> SparkSession:
    """The session to run ``plan`` with, the modules its features import shipped to it."""
    session = active_or_new_session(spark, ctx)
    modules = sorted(
        {
            f.ref.split(":", 1)[0]
            for s in plan.steps
            for f in s.features
            if f.kind == "pandas" and f.ref and f.payload is None  # pickled: loaded by value
        }
    )
    ship_modules(session, modules)
    _ship_payload_modules(session, plan)
    return session


def describe(plan: Plan, options: RunOptions, **extra: Any) -> dict[str, Any]:
    """What the run record says about the plan."""
    return {
        "targets": plan.targets,
        "batches": plan.batches,
        "base_version": plan.base_version,
        "steps": [[f.id for f in s.features] for s in plan.steps],
        "options": options.__dict__,
        **extra,
    }


@contextlib.contextmanager
def run_engines(
    sessions: Sessions,
    ctx: TableContext,
    scope: RunScope,
    options: RunOptions,
    tunings: list[StepTuning],
    cluster: Cluster,
) -> Iterator[ChunkRun]:
    """What every chunk of the run in ``scope`` shares, with a fresh :class:`RunResult` (the
    scope's metrics from the start): the session (made here when a step runs on Spark: a
    warning when crash escalation cannot run there) and the local Python worker (when a step
    runs on the ``python`` engine: ended on exit, at once when the run fails or is
    interrupted)."""
    result = RunResult(scope.run_id, cluster=cluster.size())
    scope.metrics = result.summary
    if any(not t.local for t in tunings):
        sessions.driver_escalation(options, result)
    local = LocalPythonWorker() if any(t.local for t in tunings) else None
    try:
        yield ChunkRun(sessions, ctx, scope.run_id, options, result, local)
    except BaseException:
        if local is not None:
            local.close(abort=True)
        raise
    if local is not None:
        local.close()


def gpu_profile(tuning: StepTuning, cluster: Cluster, result: RunResult) -> StepTuning:
    """``tuning`` with the resource profile of a GPU stage built when it needs one; a session
    that cannot build one (e.g. an older Spark Connect) runs the stage without it, noted."""
    if not tuning.gpu_stage:
        return tuning
    try:
        profile, note = resource_profile(cluster)
    except Exception as exc:  # the client cannot build profiles
        profile, note = None, f"no resource profile ({type(exc).__name__}: {exc})"
    tuning.profile, tuning.profile_note = profile, note
    tuning.reasons.append(f"GPU stage: {note}")
    if profile is None and not cluster.local:
        result.warnings.append(f"GPU stage without a resource profile: {note}")
    return tuning


@dataclass
class _Tracked:
    """The step's ``progress(fragments_done, fragments_total)``: counts what each committed chunk
    adds in the process's metrics and reports a :class:`ProgressEvent` (rows from the step's
    result so far, ETA from the run's rate)."""

    report: Callable[[ProgressEvent], None] | None
    run_id: str
    table: str
    index: int
    totals: list[int]  # rows planned per step
    result: RunResult
    started: float  # the run's perf_counter start
    step_started: float = field(default_factory=time.perf_counter)
    _seen: tuple[int, int] = (0, 0)  # (fragments, rows) counted in the metrics so far

    def __call__(self, done: int, total: int) -> None:
        out = self.result.steps[self.index - 1]
        metrics.BACKFILL_FRAGMENTS.inc(max(0, out.fragments - self._seen[0]))
        metrics.BACKFILL_ROWS.inc(max(0, out.rows - self._seen[1]))
        self._seen = (out.fragments, out.rows)
        if self.report is None:
            return
        run_done = sum(s.rows for s in self.result.steps)
        run_total = sum(self.totals)
        elapsed = time.perf_counter() - self.started
        event = ProgressEvent(self.run_id, self.table, self.index, len(self.totals), done, total,
                              out.rows, self.totals[self.index - 1], run_done, run_total, elapsed,
                              eta(elapsed, run_done, run_total))  # fmt: skip
        self.report(event)


@dataclass(frozen=True)
class ChunkRun:
    """What every step and chunk of one backfill run shares."""

    sessions: Sessions
    ctx: TableContext
    run_id: str
    options: RunOptions
    result: RunResult
    local: LocalPythonWorker | None = None


def _run_step(
    run: ChunkRun,
    step: Step,
    index: int,
    out: StepResult,
    progress: Callable[[int, int], None],
    tuning: StepTuning | None = None,
) -> None:
    """Compute and commit one step, one checkpoint chunk at a time, with ``tuning``'s routes
    and settings (None: defaults)."""
    started = time.perf_counter()
    fragments = step.fragments
    size = run.options.checkpoint_fragments or max(1, len(fragments))
    progress(0, len(fragments))
    for start in range(0, len(fragments), size):
        chunk = fragments[start : start + size]
        tag = f"omnitable-{run.run_id}-step{index}-{start // size}"
        run_chunk(run, step, chunk, tag, out, tuning)
        out.fragments += len(chunk)
        out.rows += sum(f.row_count for f in chunk)
        progress(out.fragments, len(fragments))
    out.seconds = time.perf_counter() - started


def run_chunk(
    run: ChunkRun,
    step: Step,
    chunk: list[FragmentRecord],
    tag: str,
    out: StepResult,
    tuning: StepTuning | None = None,
) -> None:
    """One chunk: check the plan still holds, compute (one Spark job, more after a worker
    death), check the skip and error ratios, record the errors, commit."""
    ctx, options = run.ctx, run.options
    chunk_ids = {f.fragment_id for f in chunk}
    snap = _chunk_snapshot(ctx, step, chunk)
    _check_plan_holds(snap, step, chunk)
    work = {
        name: [f.fragment_id for f in frags if f.fragment_id in chunk_ids]
        for name, frags in step.work.items()
    }
    retry = retry_offsets(run.sessions.get(), ctx, step, chunk_ids) if step.retry else {}
    for name, per_frag in step.retry.items():  # nothing recorded to retry: skip
        work[name] = [
            i for i in work.get(name, []) if i not in per_frag or retry.get(name, {}).get(i)
        ]
    gone = {f.fragment_id for f in chunk if f.row_count > 0 and snap.live_rows(f) == 0}
    work = {k: [i for i in v if i not in gone] for k, v in work.items()}  # all rows deleted
    work = {k: v for k, v in work.items() if v}
    outputs: list[TaskOutput] = []
    skipped: list[dict[str, Any]] = []
    if work:
        local = _local_worker(run, step, snap, tuning)
        if local is not None:
            escalate = options.isolation == "auto"
        else:
            escalate = run.sessions.driver_escalation(options, run.result)
        marks = TaskProgress(ctx.location.join("_progress", tag).uri) if escalate else None
        session = run.sessions.get() if local is None else None
        job = ChunkJob(session, ctx, snap, step, retry, run.run_id, tag, options.isolation,
                       options.on_corrupt, marks, options.allow_version_drift, tuning,
                       tuning.profile if tuning is not None else None, local)  # fmt: skip
        outputs, skipped, scan, escalated = execute_chunk(job, work)
        out.retries += len([f for f in escalated if f not in out.escalated])
        out.escalated += [f for f in escalated if f not in out.escalated]
        out.bytes_read += int(scan.get("omnitableBytesRead", 0))
        out.scans += int(scan.get("omnitableScans", 0))
        _add_task_metrics(out, outputs, scan)
    written = [ctx.location.child_path(o.file.path) for o in outputs]
    try:
        _check_skip_ratio(skipped, len(chunk), options.max_skip_ratio)
    except BaseException:
        delete_quietly(ctx.location.fs, written)
        raise
    out.skipped += skipped
    if not outputs:  # nothing to commit when every fragment of the chunk was skipped
        return
    try:
        _check_error_ratio(step, outputs, options.max_error_ratio)
        _record_errors(run.sessions, ctx, snap, outputs, run.run_id, step)
        failpoint("backfill.before_commit")
        version = _commit(ctx, snap, step, outputs, run.run_id)
    except BaseException as exc:
        if not isinstance(exc, CommitOutcomeUnknown):  # the commit may reference them
            delete_quietly(ctx.location.fs, written)
        raise
    failpoint("backfill.after_commit")
    out.versions.append(version)
    run.result.versions.append(version)
    out.files += len(outputs)
    for o in outputs:
        if o.errors:
            key = next(f.id for f in step.features if f.name == o.feature)
            out.errors[key] = out.errors.get(key, 0) + len(o.errors)


def _add_task_metrics(out: StepResult, outputs: list[TaskOutput], scan: dict[str, Any]) -> None:
    """Add one chunk's task-reported and Spark-reported metrics to the step's."""
    out.bytes_written += sum(int(o.file.size_bytes) for o in outputs)
    out.compute_seconds += sum(float(o.metrics.get("seconds", 0.0)) for o in outputs)
    out.peak_memory_bytes = max(
        [out.peak_memory_bytes, *(int(o.metrics.get("peak_memory_bytes", 0)) for o in outputs)]
    )
    out.failures += sum(len(o.errors) for o in outputs)
    out.retries += int(scan.get("failedTasks", 0))
    # the listener's sums of Spark's task metrics (an older jar reports none: 0)
    out.spills += int(scan.get("memoryBytesSpilled", 0)) + int(scan.get("diskBytesSpilled", 0))


def _check_skip_ratio(skipped: list[dict[str, Any]], fragments: int, max_ratio: float) -> None:
    if skipped and len(skipped) > max_ratio * fragments:
        first = skipped[0]
        raise ErrorRatioExceeded(
            f"Cannot commit backfill: {len(skipped)} of {fragments} input fragment(s) could not "
            f"be read ({len(skipped) / fragments:.1%}), above max_skip_ratio={max_ratio:.1%}; "
            f"nothing of this step was committed. First: fragment {first['fragment']} (batch "
            f"{first['batch']}), file {first['file']}: {first['error'][:300]}",
            "(input)",
            len(skipped),
            fragments,
        )


def _check_error_ratio(step: Step, outputs: list[TaskOutput], max_ratio: float) -> None:
    for f in step.features:
        mine = [o for o in outputs if o.feature == f.name]
        failed = sum(len(o.errors) for o in mine)
        # over the chunk's records, not only those computed: a retry recomputes a few failed
        # records, and the ones that stay failed are a share of the whole chunk
        records = sum(o.file.row_count for o in mine)
        if failed and failed > max_ratio * records:
            sample = next(e for o in mine for e in o.errors)
            raise ErrorRatioExceeded(
                f"Cannot commit backfill of {f.id}: {failed} of {records} records failed "
                f"({failed / max(1, records):.2%}), above max_error_ratio={max_ratio:.2%}; "
                f"nothing of this step was committed. First failure: {sample['kind']} "
                f"{sample['exception_type']}: {sample['message'][:300]}. Fix the feature and bump "
                "its version, or raise max_error_ratio.",
                f.id,
                failed,
                records,
            )


def _local_worker(
    run: ChunkRun, step: Step, snap: Snapshot, tuning: StepTuning | None
) -> LocalPythonWorker | None:
    """The local worker when the step runs on the ``python`` engine and still can at this
    chunk's snapshot (an input's type changed since the plan: Spark, logged)."""
    if run.local is None or tuning is None or not tuning.local:
        return None
    reason = local_reason(step, snap.columns)
    if reason is not None:
        log.warning("backfill of %s: this chunk runs on Spark: %s", run.ctx.name, reason)
        return None
    return run.local


def _record_errors(
    sessions: Sessions,
    ctx: TableContext,
    snap: Snapshot,
    outputs: list[TaskOutput],
    run_id: str,
    step: Step,
) -> None:
    feats = {f.name: f for f in step.features}
    batch_of = {f.fragment_id: f.batch_name for f in snap.fragments}
    rows = []
    for o in outputs:
        f = feats[o.feature]
        for e in o.errors:
            rows.append(
                dict(
                    e,
                    batch=batch_of[o.file.fragment_id],
                    fragment_id=o.file.fragment_id,
                    file_id=o.file.file_id,
                    feature=f.name,
                    feature_version=f.version,
                    run_id=run_id,
                )
            )
    if rows:
        append_errors(sessions.get(), ctx, rows)


def _chunk_snapshot(ctx: TableContext, step: Step, chunk: list[FragmentRecord]) -> Snapshot:
    """The head, loaded for the chunk's batches only (every file of them: the commit decides
    which files a new one replaces). A batch gone since the plan is a conflict, as a removed
    fragment is."""
    try:
        return ctx.snapshot(scope=SnapshotScope(batches=frozenset(f.batch_name for f in chunk)))
    except NotFoundError as exc:
        raise CommitConflict(
            f"Cannot run backfill step of {', '.join(f.id for f in step.features)}: a batch of "
            f"its chunk was removed by a concurrent commit after the plan ({exc}); nothing of "
            "this chunk was committed. Re-plan and run again.",
            [(f.fragment_id, "*") for f in chunk],
        ) from exc


def _check_plan_holds(snap: Snapshot, step: Step, chunk: list[FragmentRecord]) -> None:
    """Fail a chunk early when what its plan decided on changed before it started: fragments
    gone (batch replaced), or files it patches or replaces replaced. The commit checks the same
    again at the head (see :func:`_commit`)."""
    live = {f.fragment_id for f in snap.fragments}
    gone = [f for f in chunk if f.fragment_id not in live]
    if gone:
        raise CommitConflict(
            f"Cannot run backfill step of {', '.join(f.id for f in step.features)}: "
            f"{len(gone)} planned fragment(s) were removed by a concurrent commit (batch "
            f"'{gone[0].batch_name}' replaced or compacted) after the plan; nothing of this chunk "
            "was committed. Re-plan and run again.",
            [(f.fragment_id, "*") for f in gone],
        )
    by_name = {c.name: c for c in snap.columns}
    chunk_ids = {f.fragment_id for f in chunk}
    changed = []
    for (fid, col), planned in step.targets.items():
        if fid in chunk_ids:
            cid = by_name[col].column_id if col in by_name else -1
            now = snap.resolve(fid, [cid])[cid]
            if (now.file_id if now else None) != planned:
                changed.append((fid, col))
    if changed:
        raise CommitConflict(
            f"Cannot run backfill step of {', '.join(f.id for f in step.features)}: the file(s) "
            f"it patches or replaces for column(s) {', '.join(sorted({c for _, c in changed}))} "
            f"in {len({f for f, _ in changed})} fragment(s) were replaced by a concurrent commit "
            "after the plan; nothing of this chunk was committed. Re-plan and run again.",
            changed,
        )


def _owned_files(
    snap: Snapshot, by_id: dict[int, ColumnRecord], f: Feature, fragment_id: str
) -> list[str]:
    """Files of ``fragment_id`` a new file of ``f`` replaces: those in ``f``'s group holding only
    ``f``'s outputs (also outputs replaced by a type change: no longer visible columns)."""
    return [
        old.file_id
        for old in snap.files_by_fragment.get(fragment_id, [])
        if old.group_name == f.name
        and all(by_id[c].feature == f.name for c in old.columns if c in by_id)
    ]


def _commit(
    ctx: TableContext, snap: Snapshot, step: Step, outputs: list[TaskOutput], run_id: str
) -> int:
    """Commit one chunk's files with lineage. The commit also checks, at the head, the chunk's
    read set (the input files its lineage records), the files the plan patches or replaces, the
    feature versions computed and the output column ids the files were written for."""
    feats = {f.name: f for f in step.features}
    by_name = {c.name: c for c in snap.columns}
    by_id = {c.column_id: c for c in snap.columns}
    removed: list[str] = []
    lineage: list[LineageEntry] = []
    expected: list[ExpectedProvider] = []
    for o in outputs:
        f, desc = feats[o.feature], o.file
        removed += _owned_files(snap, by_id, f, desc.fragment_id)
        desc.column_ids = {c: step.column_ids[c] for c in f.outputs if c in step.column_ids}
        names = [i for i in f.inputs if i in by_name]
        providers = snap.resolve(desc.fragment_id, [by_name[i].column_id for i in names])
        inputs = [
            {
                "column": name,
                "file_id": p.file_id if p else None,
                "version": p.added_version if p else None,
            }
            for name, p in zip(names, providers.values(), strict=True)
        ]
        expected += [
            ExpectedProvider(desc.fragment_id, name, p.file_id if p else None)
            for name, p in zip(names, providers.values(), strict=True)
        ]
        expected += [
            ExpectedProvider(desc.fragment_id, c, step.targets[(desc.fragment_id, c)], "target")
            for c in f.outputs
            if (desc.fragment_id, c) in step.targets
        ]
        engine = "spark-sql" if f.kind == "sql" else "pandas"
        lineage.extend(
            LineageEntry(desc.file_id, c, f.name, f.version, inputs, engine, len(o.errors))
            for c in f.outputs
        )
    req = CommitRequest(
        op="backfill",
        base_version=snap.version,
        run_id=run_id,
        summary={
            "features": sorted(f.id for f in step.features),
            "fragments": len({o.file.fragment_id for o in outputs}),
            "rows": sum(o.file.row_count for o in outputs),
            "errors": sum(len(o.errors) for o in outputs),
        },
        new_files=[o.file for o in outputs],
        removed_files=removed,
        lineage=lineage,
        expected_providers=expected,
        feature_versions={feats[o.feature].name: feats[o.feature].version for o in outputs},
    )
    return ctx.commit(req)
