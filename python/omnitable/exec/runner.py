"""Running a backfill plan on Spark: one job per step (per checkpoint chunk), atomic commits.

For each step the driver reads the step's inputs through the ``omnitable`` data source (one
input partition per fragment, rows in order; only the inputs' column files are opened), adds the
SQL features' expressions (evaluated in the JVM), and runs :func:`omnitable.exec.task.compute_partition`
in Python workers with ``mapInArrow``. Tasks write one column file per fragment and feature and
return descriptors; the driver commits them with lineage in one transaction per chunk
(``checkpoint_fragments``; default: the whole step), so a restarted run skips committed work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import CommitRequest, LineageEntry
from omnitable.catalog.records import ROW_ID
from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import ValidationError
from omnitable.exec.shipping import ship_modules
from omnitable.exec.task import FRAGMENT, OFFSET, compute_partition, step_spec
from omnitable.format.descriptors import FileDescriptor
from omnitable.format.fs import delete_quietly

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from omnitable.features.planner import Plan, Step
    from omnitable.table import Table


@dataclass
class StepResult:
    features: list[str]
    fragments: int
    rows: int
    files: int
    versions: list[int]
    seconds: float


@dataclass
class RunResult:
    """Outcome of ``Plan.run()``."""

    run_id: str | None
    versions: list[int] = field(default_factory=list)
    steps: list[StepResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def version(self) -> int | None:
        return self.versions[-1] if self.versions else None

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "versions": self.versions,
            "seconds": round(self.seconds, 3),
            "steps": [s.__dict__ for s in self.steps],
        }


Progress = Callable[[int, int, int, int], None]  # (step, steps, fragments done, fragments total)


def run_plan(
    plan: Plan,
    spark: SparkSession | None = None,
    *,
    checkpoint_fragments: int | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Execute ``plan``; see the module doc. Raises whatever a step raises, after recording
    the run as failed (committed checkpoints stay committed and are skipped by a re-run)."""
    from omnitable.spark.session import active_or_new_session

    if checkpoint_fragments is not None and (
        not isinstance(checkpoint_fragments, int) or checkpoint_fragments < 1
    ):
        raise ValidationError("Cannot run backfill: checkpoint_fragments must be a positive int")
    started = time.perf_counter()
    if plan.is_empty:
        return RunResult(None)
    table = plan.table
    catalog = table._catalog
    session = active_or_new_session(spark, table.warehouse)
    pandas_modules = sorted(
        {
            f.ref.split(":", 1)[0]
            for s in plan.steps
            for f in s.features
            if f.kind == "pandas" and f.ref
        }
    )
    ship_modules(session.sparkContext, pandas_modules)
    run_id = catalog.start_run(
        table.record,
        "backfill",
        {
            "targets": plan.targets,
            "batches": plan.batches,
            "base_version": plan.base_version,
            "steps": [[f.id for f in s.features] for s in plan.steps],
        },
    )
    result = RunResult(run_id)
    try:
        for index, step in enumerate(plan.steps, 1):
            report = _step_progress(progress, index, len(plan.steps))
            result.steps.append(
                _run_step(session, table, step, index, run_id, checkpoint_fragments, result, report)
            )
    except BaseException as exc:
        catalog.finish_run(run_id, "failed", result.summary(), message=str(exc)[:2000])
        raise
    result.seconds = time.perf_counter() - started
    catalog.finish_run(run_id, "succeeded", result.summary())
    return result


def _step_progress(progress: Progress | None, index: int, steps: int) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        if progress is not None:
            progress(index, steps, done, total)

    return report


def _run_step(
    session: SparkSession,
    table: Table,
    step: Step,
    index: int,
    run_id: str,
    checkpoint: int | None,
    result: RunResult,
    progress: Callable[[int, int], None],
) -> StepResult:
    started = time.perf_counter()
    fragments = step.fragments
    size = checkpoint or max(1, len(fragments))
    out = StepResult([f.id for f in step.features], 0, 0, 0, [], 0.0)
    progress(0, len(fragments))
    for start in range(0, len(fragments), size):
        chunk_ids = {f.fragment_id for f in fragments[start : start + size]}
        snap = table.snapshot()
        work = {
            name: [f.fragment_id for f in frags if f.fragment_id in chunk_ids]
            for name, frags in step.work.items()
        }
        work = {k: v for k, v in work.items() if v}
        files = _execute(session, table, snap, step, work, run_id, index)
        try:
            failpoint("backfill.before_commit")
            version = _commit(table, snap, step, files, run_id)
        except BaseException:
            delete_quietly(table.location.fs, [table.location.child_path(d.path) for _, d in files])
            raise
        failpoint("backfill.after_commit")
        out.versions.append(version)
        result.versions.append(version)
        frag_rows = {f.fragment_id: f.row_count for f in fragments}
        out.fragments += len(chunk_ids)
        out.rows += sum(frag_rows[i] for i in chunk_ids)
        out.files += len(files)
        progress(out.fragments, len(fragments))
    out.seconds = time.perf_counter() - started
    return out


def step_dataframe(
    session: SparkSession, table: Table, snap: Snapshot, step: Step, fragment_ids: list[str]
) -> DataFrame:
    """The step's input: one partition per fragment, inputs plus SQL feature values."""
    df = (
        session.read.format("omnitable")
        .option("warehouse", table.warehouse.uri)
        .option("versionAsOf", str(snap.version))
        .option("fragments", ",".join(fragment_ids))
        .option("split_fragments", "false")
        .load(table.name)
    )
    pandas_inputs = {c for f in step.features if f.kind == "pandas" for c in f.inputs}
    cols = [FRAGMENT, OFFSET] + [c for c in step.inputs if c in pandas_inputs]
    exprs = [f"`{c}`" for c in cols]
    for f in step.features:
        if f.kind == "sql":
            ((out, ddl),) = f.outputs.items()
            exprs.append(f"CAST(({f.expr}) AS {ddl}) AS `{out}`")
    return df.selectExpr(*exprs)


def _execute(
    session: SparkSession,
    table: Table,
    snap: Snapshot,
    step: Step,
    work: dict[str, list[str]],
    run_id: str,
    index: int,
) -> list[tuple[str, FileDescriptor]]:
    frag_ids = sorted({i for ids in work.values() for i in ids})
    by_id = {f.fragment_id: f for f in snap.fragments}
    features = [f.load() for f in step.features if f.name in work]
    spec = step_spec(
        root=table.warehouse.root.uri,
        location=table.record.location,
        features=features,
        work=work,
        row_counts={i: by_id[i].row_count for i in frag_ids},
        paths={i: by_id[i].path for i in frag_ids},
        options=table.warehouse.write_options,
        run_id=run_id,
    )
    df = step_dataframe(session, table, snap, step, frag_ids)
    sc = session.sparkContext
    tag = f"omnitable-{run_id}-step{index}"
    sc.addJobTag(tag)
    sc.setJobDescription(f"backfill {table.name}: {', '.join(f.id for f in features)}")
    try:
        rows = df.mapInArrow(lambda it: compute_partition(spec, it), "descriptor string").collect()
    finally:
        sc.removeJobTag(tag)
        sc.setJobDescription(None)  # type: ignore[arg-type]
    files = []
    for r in rows:
        d = json.loads(r.descriptor)
        files.append((d["feature"], FileDescriptor.from_dict(d["file"])))
    expected = sum(len(v) for v in work.values())
    if len(files) != expected:
        delete_quietly(table.location.fs, [table.location.child_path(d.path) for _, d in files])
        raise ValidationError(
            f"Cannot commit backfill step {index}: tasks reported {len(files)} files, expected "
            f"{expected} (a fragment was not read completely)"
        )
    return files


def _commit(
    table: Table, snap: Snapshot, step: Step, files: list[tuple[str, FileDescriptor]], run_id: str
) -> int:
    feats = {f.name: f for f in step.features}
    by_name = {c.name: c for c in snap.columns}
    removed: list[str] = []
    lineage: list[LineageEntry] = []
    new_files = []
    for feature_name, desc in files:
        f = feats[feature_name]
        new_files.append(desc)
        out_ids = {by_name[o].column_id for o in f.outputs}
        for old in snap.files_by_fragment.get(desc.fragment_id, []):
            if old.group_name == f.name and set(old.columns) <= out_ids:
                removed.append(old.file_id)
        in_ids = [by_name[i].column_id for i in f.inputs if i in by_name]
        providers = snap.resolve(desc.fragment_id, in_ids)
        inputs = [
            {
                "column": name,
                "file_id": p.file_id if p else None,
                "version": p.added_version if p else None,
            }
            for name, p in zip(
                (i for i in f.inputs if i in by_name), providers.values(), strict=True
            )
        ]
        engine = "spark-sql" if f.kind == "sql" else "pandas"
        lineage.extend(
            LineageEntry(desc.file_id, o, f.name, f.version, inputs, engine) for o in f.outputs
        )
    req = CommitRequest(
        op="backfill",
        base_version=snap.version,
        run_id=run_id,
        summary={
            "features": sorted(f.id for f in step.features),
            "fragments": len({d.fragment_id for _, d in files}),
            "rows": sum(d.row_count for _, d in files),
        },
        new_files=new_files,
        removed_files=removed,
        lineage=lineage,
    )
    return int(table._catalog.commit(table.record, req))


__all__ = ["ROW_ID", "RunResult", "StepResult", "run_plan"]
