"""One job of a backfill step: read the step's inputs, compute in Python workers.

On Spark, the input is read through the ``omnitable`` data source (one input partition per whole
fragment, rows in order, only the inputs' column files opened, unreadable fragments skipped when
asked), SQL features are evaluated in the JVM, and :func:`omnitable.exec.task.compute_partition`
runs in Python workers with ``mapInArrow``. The job is tagged so its scan metrics can be read
back. On the ``python`` engine (:mod:`omnitable.exec.local_engine`) the same task code runs in
the run's local Python worker, on inputs read by the table's own reader.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import CorruptInputError, NotFoundError, ValidationError
from omnitable.exec.errors import error_offsets
from omnitable.exec.escalation import TaskProgress, worker_died
from omnitable.exec.local_engine import LocalPythonWorker, compute_locally
from omnitable.exec.scan_metrics import ScanMetrics
from omnitable.exec.task import (
    FRAGMENT,
    OFFSET,
    TYPE_ERROR_PREFIX,
    TaskSpec,
    compute_partition,
)
from omnitable.format.fs import delete_quietly
from omnitable.spark.session import warehouse_string
from omnitable.vocabulary.descriptors import FileDescriptor
from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.context import TableContext
    from omnitable.exec.tuning import StepTuning
    from omnitable.features.definition import Feature
    from omnitable.features.planner import Step

log = logging.getLogger("omnitable.backfill")


@dataclass
class TaskOutput:
    """One file a task wrote, with the records that failed while computing it."""

    feature: str
    file: FileDescriptor
    errors: list[dict[str, Any]]
    computed: int
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)  # seconds, peak memory


def retry_offsets(
    session: SparkSession, ctx: TableContext, step: Step, chunk_ids: set[str]
) -> dict[str, dict[str, list[int]]]:
    wanted = {
        name: {frag: file for frag, file in per.items() if frag in chunk_ids}
        for name, per in step.retry.items()
    }
    offsets = error_offsets(session, ctx, [f for per in wanted.values() for f in per.values()])
    return {
        name: {frag: offsets.get(file, []) for frag, file in per.items()}
        for name, per in wanted.items()
    }


def step_dataframe(
    session: SparkSession,
    ctx: TableContext,
    snap: Snapshot,
    step: Step,
    fragment_ids: list[str],
    on_corrupt: str = "fail",
) -> DataFrame:
    """The step's input: one partition per fragment, ids, inputs, SQL feature values and the
    current outputs of features being retried."""
    df = (
        session.read.format("omnitable")
        .option("warehouse", warehouse_string(ctx))
        .option("versionAsOf", str(snap.version))
        .option("fragments", ",".join(fragment_ids))
        .option("split_fragments", "false")
        .option("on_corrupt", "skip_fragment" if on_corrupt == "skip" else "fail")
        .load(ctx.name)
    )
    cols = [FRAGMENT, OFFSET, ROW_ID, *step.pandas_inputs]
    for f in step.features:
        if f.name in step.retry and f.kind == "pandas":  # an SQL feature is recomputed whole
            cols += [o for o in f.outputs if o not in cols]
    exprs = [f"`{c}`" for c in cols]
    ansi = str(session.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    for f in step.features:
        if f.kind == "sql":
            exprs += sql_feature_exprs(f, ansi)
    return df.selectExpr(*exprs)


def sql_feature_exprs(f: Feature, ansi: bool) -> list[str]:
    """The value of an SQL feature, converted to its declared type, and a flag column.

    The conversion is Spark's own (``CAST``) under the session's ANSI mode, except that a value
    that does not convert never fails the job: under ANSI it is ``TRY_CAST`` (the same result
    where ``CAST`` succeeds, NULL where it would raise); without ANSI ``CAST`` gives NULL
    itself. The flag column (``TYPE_ERROR_PREFIX`` + output) holds, for exactly those records
    (a non-NULL value, a NULL conversion), the value as a string and the inputs, from which the
    task records an error of kind ``type``. Spark evaluates the shared expression once.
    """
    ((out, ddl),) = f.outputs.items()
    converted = f"{'TRY_CAST' if ansi else 'CAST'}(({f.expr}) AS {ddl})"
    inputs = ", ".join(f"'{i}', `{i}`" for i in f.inputs) or "'none', NULL"
    flag = (
        f"CASE WHEN ({f.expr}) IS NOT NULL AND {converted} IS NULL THEN named_struct('value', "
        f"CAST(({f.expr}) AS STRING), 'inputs', named_struct({inputs})) END"
    )
    return [f"{converted} AS `{out}`", f"{flag} AS `{TYPE_ERROR_PREFIX}{out}`"]


@dataclass(frozen=True)
class ChunkJob:
    """What stays fixed across the Spark jobs of one checkpoint chunk of a step.

    ``progress``: the ``driver`` crash escalation's marks (see :mod:`omnitable.exec.escalation`),
    or None where Spark's task retry escalates. ``allow_version_drift``: features stored by
    value load with other library versions (:mod:`omnitable.features.payload`). ``tuning``:
    the step's settings (:mod:`omnitable.exec.tuning`); ``profile``: the Spark resource profile
    of a GPU stage, or None. ``local``: the run's local Python worker when the step runs on the
    ``python`` engine (``session`` is then None), else None.
    """

    session: SparkSession | None
    ctx: TableContext
    snap: Snapshot
    step: Step
    retry: dict[str, dict[str, list[int]]]
    run_id: str
    tag: str
    isolation: str
    on_corrupt: str
    progress: TaskProgress | None = None
    allow_version_drift: bool = False
    tuning: StepTuning | None = None
    profile: Any = None
    local: LocalPythonWorker | None = None


def execute_chunk(
    job: ChunkJob, work: dict[str, list[str]]
) -> tuple[list[TaskOutput], list[dict[str, Any]], dict[str, Any], list[str]]:
    """Run one chunk's job (Spark's, or the local Python worker's): (task outputs, skipped
    unreadable fragments, scan metrics, features escalated to the child process after a Python
    worker died).

    With ``progress`` (the ``driver`` crash escalation, see :mod:`omnitable.exec.escalation`)
    a job that fails because a Python worker died is followed by a job over the work that did
    not complete, with the features that were running in the child process; repeated while
    each failure names a feature not escalated yet.
    """
    ctx, tag, progress = job.ctx, job.tag, job.progress
    by_id = {f.fragment_id: f for f in job.snap.fragments}
    metrics = ScanMetrics(job.session) if job.session is not None else None
    local_scan: dict[str, Any] = {"omnitableBytesRead": 0, "omnitableScans": 0,
                                  "corruptFragments": []}  # fmt: skip
    outputs: list[TaskOutput] = []
    escalated: list[str] = []
    remaining = work
    try:
        while remaining:
            try:
                rows = _run_job(job, remaining, escalated, local_scan)
            except Exception as exc:
                remaining = _after_worker_death(ctx, exc, progress, remaining, outputs, escalated)
                continue
            descriptors = [json.loads(r) for r in rows]
            raise_fatal(ctx, descriptors, outputs)
            outputs += [_task_output(d) for d in descriptors]
            break
    finally:
        if progress is not None:
            progress.clear()
    scan: dict[str, Any] = metrics.for_tag(tag) if metrics is not None else dict(local_scan)
    corrupt = {c["fragment"]: c for c in scan.get("corruptFragments", [])}
    produced = {(o.feature, o.file.fragment_id) for o in outputs}
    missing = {fid for name, ids in work.items() for fid in ids if (name, fid) not in produced}
    unexplained = sorted(missing - set(corrupt))
    if unexplained:
        delete_quietly(ctx.location.fs, [ctx.location.child_path(o.file.path) for o in outputs])
        raise ValidationError(
            f"Cannot commit backfill step ({tag}): no output for fragment(s) "
            f"{', '.join(unexplained[:3])} although the reader did not report them unreadable "
            "(a fragment was not read completely)"
        )
    skipped = []
    for fid in sorted(missing):
        c = corrupt[fid]
        skipped.append(
            {
                "fragment": fid,
                "batch": by_id[fid].batch_name,
                "file": c.get("file"),
                "row_group": c.get("rowGroup"),
                "error": str(c.get("error"))[:1000],
            }
        )
        log.warning(
            "backfill of %s skipped unreadable fragment %s (batch %s): %s",
            ctx.name,
            fid,
            by_id[fid].batch_name,
            c.get("error"),
        )
    return outputs, skipped, scan, escalated


def raise_fatal(
    ctx: TableContext, descriptors: list[dict[str, Any]], outputs: list[TaskOutput]
) -> None:
    """Raise the error a task reported instead of computing (a model artifact that is corrupt
    or missing, or storage options the worker cannot resolve,
    :func:`omnitable.exec.task.compute_partition`), on the driver and without Spark's task
    retries, after deleting the files the job wrote.

    Raises:
        CorruptInputError, NotFoundError, ValidationError: as the task reported it (the message
            names the model, its version and, when corrupt, both SHA-256 hashes; for storage
            options, the option and the variable, never a value).
    """
    fatal = [d["fatal"] for d in descriptors if "fatal" in d]
    if not fatal:
        return
    written = [_task_output(d) for d in descriptors if "fatal" not in d] + outputs
    delete_quietly(ctx.location.fs, [ctx.location.child_path(o.file.path) for o in written])
    first = fatal[0]
    classes = {"NotFoundError": NotFoundError, "ValidationError": ValidationError}
    cls = classes.get(first["error"], CorruptInputError)
    raise cls(f"Cannot compute feature '{first['feature']}': {first['message']}")


def _after_worker_death(
    ctx: TableContext,
    exc: Exception,
    progress: TaskProgress | None,
    remaining: dict[str, list[str]],
    outputs: list[TaskOutput],
    escalated: list[str],
) -> dict[str, list[str]]:
    """The work left after a failed job, keeping completed outputs (appended to ``outputs``)
    and escalating the features that were running (appended to ``escalated``); re-raises
    ``exc`` unless a Python worker died while running a feature not escalated yet."""
    if progress is None or not worker_died(exc):
        raise exc
    done, running = progress.read()
    progress.clear()
    outputs += [_task_output(d) for d in done]
    new = sorted({r["feature"] for r in running} - set(escalated))
    if not new:
        delete_quietly(ctx.location.fs, [ctx.location.child_path(o.file.path) for o in outputs])
        raise exc
    escalated += new
    kept = {(o.feature, o.file.fragment_id) for o in outputs}
    left = {name: [i for i in ids if (name, i) not in kept] for name, ids in remaining.items()}
    log.warning(
        "backfill of %s: a Python worker died computing %s; %d output file(s) kept, re-running "
        "the rest with %s in the supervised child process",
        ctx.name, ", ".join(new), len(kept), ", ".join(escalated),
    )  # fmt: skip
    return {k: v for k, v in left.items() if v}


def _run_job(
    job: ChunkJob, work: dict[str, list[str]], escalate: list[str], local_scan: dict[str, Any]
) -> list[str]:
    """One job computing ``work`` (Spark's, or the local worker's, whose scan metrics are added
    to ``local_scan``); its descriptors."""
    session, ctx, snap = job.session, job.ctx, job.snap
    frag_ids = sorted({i for ids in work.values() for i in ids})
    by_id = {f.fragment_id: f for f in snap.fragments}
    drift = job.allow_version_drift
    features = [f.load(ctx.location, drift) for f in job.step.features if f.name in work]
    if job.tuning is not None:
        features = [
            dataclasses.replace(f, options=job.tuning.feature_options(f))
            if f.kind == "pandas"
            else f
            for f in features
        ]
    spec = TaskSpec(
        root=ctx.root.uri,
        location=ctx.record.location,
        features=features,
        work=work,
        retry=job.retry,
        row_counts={i: by_id[i].row_count for i in frag_ids},
        vectors={i: dv.vector for i in frag_ids if (dv := snap.deletion(i)) is not None},
        paths={i: by_id[i].path for i in frag_ids},
        options=ctx.options(),
        run_id=job.run_id,
        isolation=job.isolation,
        progress=job.progress.uri if job.progress is not None else None,
        escalate=escalate,
        allow_version_drift=drift,
    ).to_json()
    if job.local is not None:
        marked = job.progress is not None
        descriptors, scan = compute_locally(
            job.local, ctx, snap, job.step, frag_ids, spec, job.on_corrupt, marked
        )
        local_scan["omnitableBytesRead"] += scan["omnitableBytesRead"]
        local_scan["omnitableScans"] += scan["omnitableScans"]
        local_scan["corruptFragments"] += scan["corruptFragments"]
        return descriptors
    assert session is not None, "a Spark job needs a session"
    df = step_dataframe(session, ctx, snap, job.step, frag_ids, job.on_corrupt)
    per_task = (job.tuning.values["fragments_per_task"] or 1) if job.tuning is not None else 1
    if per_task > 1 and len(frag_ids) > 1:
        # whole input partitions (fragments) concatenated in order: each stays contiguous
        df = df.coalesce(math.ceil(len(frag_ids) / per_task))
    # A session tag (classic and Connect alike): Spark prefixes it per session, and the scan
    # metrics of the job are found by it (ScanMetrics.for_tag).
    session.addTag(job.tag)
    try:
        fn = lambda it: compute_partition(spec, it)  # noqa: E731
        if job.profile is not None:
            rows = df.mapInArrow(fn, "descriptor string", profile=job.profile).collect()
        else:
            rows = df.mapInArrow(fn, "descriptor string").collect()
        return [r.descriptor for r in rows]
    finally:
        session.removeTag(job.tag)


def _task_output(d: dict[str, Any]) -> TaskOutput:
    return TaskOutput(
        d["feature"],
        FileDescriptor.from_dict(d["file"]),
        d["errors"],
        int(d["computed"]),
        d.get("metrics") or {},
    )
