"""Routing and tuning of backfill steps (docs/features.md, "Routing and tuning").

**Routing**: each feature of a step runs on the engine that fits it: an SQL feature in the JVM
(``jvm``), a pandas feature on CPU Python workers (``python-cpu``), a feature with
``prefer="gpu"`` on a GPU stage (``python-gpu``, a Spark stage-level resource profile asking one
GPU per task) when the cluster has GPUs (``spark.executor.resource.gpu.amount`` or
``spark.task.resource.gpu.amount`` above 0), else on CPU with a warning. On the ``python``
engine a step of pandas features runs without Spark, in the run's local Python worker
(``python-local``, :mod:`omnitable.exec.local_engine`).

**Tuning**: per step, the settings its Python tasks run with — ``batch_rows`` (records per call
of a pandas feature), ``fragments_per_task`` (whole fragments per Spark task) and ``memory_mb``
(the per-call memory budget of record isolation) — come from, in this order: the user (run
arguments, then the features' own options), the step's metrics in the last successful runs of the
same features (same versions) on a cluster of the same size, else the defaults. Values picked
from history aim a call at :data:`TARGET_CALL_S` seconds within the memory budget (peak memory
per record seen, times :data:`MEMORY_HEADROOM`), and spread a step's fragments over
:data:`WAVES` tasks per core (each task pays Spark's and the Python worker's overhead once) with
at most :data:`MAX_TASK_COMPUTE_S` of feature time per task; they always stay within
:data:`BOUNDS`. A memory budget picked from history sizes calls only; a user's ``memory_mb`` is
also the per-call address-space cap of record isolation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from omnitable.exec.task import DEFAULT_BATCH_ROWS

if TYPE_CHECKING:
    from pyspark.resource import ResourceProfile
    from pyspark.sql import SparkSession

    from omnitable.context import TableContext
    from omnitable.features.definition import Feature
    from omnitable.features.planner import Plan, Step

JVM, PYTHON_CPU, PYTHON_GPU, PYTHON_LOCAL = "jvm", "python-cpu", "python-gpu", "python-local"
LOCAL_REASON = "engine=python: the run's local Python worker, no Spark job"
NO_GPU_WARNING = "prefers GPU but the cluster has none; running on CPU"
DEFAULTS: dict[str, int | None] = {
    "batch_rows": DEFAULT_BATCH_ROWS,
    "fragments_per_task": 1,
    "memory_mb": None,
}
BOUNDS: dict[str, tuple[int, int]] = {
    "batch_rows": (1_024, 1_048_576),
    "fragments_per_task": (1, 256),
    "memory_mb": (512, 16_384),
}
TARGET_CALL_S = 0.5  # a pandas feature call (one batch) of about this long
WAVES = 2  # tasks per core a step aims at (each task pays Spark's and Python's overhead once)
MAX_TASK_COMPUTE_S = 60.0  # at most this much feature time per task (a retry redoes a task)
HISTORY_RUNS = 3  # successful runs of the same step read
MEMORY_HEADROOM = 2.0  # memory budget: this times the peak memory seen per row of a call
LOCAL_MASTER = "python-engine"  # Cluster.master of a run without Spark


@dataclass(frozen=True)
class Cluster:
    """The shape of the cluster a run uses: its parallelism (task slots), executor count when
    set, and GPUs per executor and per task (0: none)."""

    parallelism: int
    executors: int | None = None
    gpus: float = 0.0
    task_gpus: float = 0.0
    master: str = ""

    @classmethod
    def of(cls, conf: Mapping[str, str | None]) -> Cluster:
        """From Spark configuration values (``spark.master``, ``spark.default.parallelism``,
        ``spark.executor.instances``/``cores``, the ``gpu`` resource amounts)."""
        master = conf.get("spark.master") or ""
        local = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
        executors = _int(conf.get("spark.executor.instances"))
        parallelism = _int(conf.get("spark.default.parallelism"))
        if parallelism is None and local and local.group(1) != "*":
            parallelism = int(local.group(1))
        if parallelism is None and executors:
            parallelism = executors * (_int(conf.get("spark.executor.cores")) or 1)
        return cls(
            parallelism=parallelism or 1,
            executors=executors,
            gpus=_float(conf.get("spark.executor.resource.gpu.amount")),
            task_gpus=_float(conf.get("spark.task.resource.gpu.amount")),
            master=master,
        )

    @classmethod
    def python_engine(cls) -> Cluster:
        """A run whose every step runs on the ``python`` engine: one local Python worker (the
        size of a ``local[1]`` session, so each reuses the other's history)."""
        return cls(parallelism=1, master=LOCAL_MASTER)

    @classmethod
    def of_session(cls, session: SparkSession) -> Cluster:
        keys = (
            "spark.master", "spark.default.parallelism", "spark.executor.instances",
            "spark.executor.cores", "spark.executor.resource.gpu.amount",
            "spark.task.resource.gpu.amount",
        )  # fmt: skip
        conf: dict[str, str | None] = {}
        for key in keys:
            try:
                conf[key] = session.conf.get(key, None)
            except Exception:  # a key the server refuses to show: unknown
                conf[key] = None
        return cls.of(conf)

    @property
    def has_gpus(self) -> bool:
        return self.gpus > 0 or self.task_gpus > 0

    @property
    def local(self) -> bool:
        return self.master.startswith("local")

    def size(self) -> dict[str, Any]:
        """What a run records; history of another size is not used."""
        return {"parallelism": self.parallelism, "executors": self.executors}


@dataclass(frozen=True)
class Route:
    feature: str
    route: str
    reason: str


@dataclass
class StepTuning:
    """How one step runs: routes, settings with their source, the reasons, warnings."""

    routes: list[Route]
    values: dict[str, int | None]
    sources: dict[str, str]
    reasons: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gpu_stage: bool = False
    local: bool = False  # runs on the python engine (routes python-local)
    profile: Any = None  # the GPU stage's ResourceProfile (set when the step runs), or None
    profile_note: str = ""

    def settings(self) -> dict[str, dict[str, Any]]:
        """``{name: {"value": v, "source": "default" | "history" | "user"}}``."""
        return {k: {"value": v, "source": self.sources[k]} for k, v in self.values.items()}

    def feature_options(self, f: Feature) -> dict[str, Any]:
        """The options a pandas feature's calls run with (its own, tuned values applied)."""
        out = dict(f.options)
        if self.values["batch_rows"] is not None:
            out["batch_rows"] = self.values["batch_rows"]
        if self.values["memory_mb"] is not None and self.sources["memory_mb"] == "user":
            # a budget from history (resident memory) sizes calls only: as an address-space
            # cap it would fail calls of libraries that reserve address space (BLAS threads)
            out["memory_mb"] = self.values["memory_mb"]
        return out


def route(f: Feature, cluster: Cluster | None) -> Route:
    """The engine of ``f`` on ``cluster`` (None: not known yet) and why."""
    if f.kind == "sql":
        return Route(f.id, JVM, "SQL feature: evaluated by Spark SQL in the JVM")
    if f.prefer != "gpu":
        return Route(f.id, PYTHON_CPU, "pandas feature: Python workers on CPU")
    if cluster is None:
        return Route(f.id, PYTHON_GPU, "prefers GPU: a GPU stage if the cluster has GPUs, else CPU")
    if not cluster.has_gpus:
        return Route(f.id, PYTHON_CPU, NO_GPU_WARNING)
    return Route(f.id, PYTHON_GPU, "prefers GPU and the cluster has GPUs: GPU stage")


def run_locally(tuning: StepTuning, reason: str | None) -> None:
    """Apply the ``python`` engine's decision for the step: its routes become ``python-local``
    when ``reason`` is None, else the reason it stays on Spark is shown with its settings."""
    if reason is not None:
        tuning.reasons.append(f"engine=python, the step runs on Spark: {reason}")
        return
    tuning.local = True
    tuning.routes = [Route(r.feature, PYTHON_LOCAL, LOCAL_REASON) for r in tuning.routes]


def resource_profile(cluster: Cluster) -> tuple[ResourceProfile | None, str]:
    """The stage-level resource profile of a GPU stage (one GPU per task, or the configured
    task amount) and a note; None where Spark cannot schedule one (local mode runs every task
    in the driver's process: the tasks see the machine's GPUs without a profile)."""
    if cluster.local:
        return None, "local mode: no resource profile (tasks share the driver's GPUs)"
    from pyspark.resource import ResourceProfileBuilder, TaskResourceRequests

    amount = cluster.task_gpus or 1.0
    requests = TaskResourceRequests().cpus(1).resource("gpu", amount)
    return ResourceProfileBuilder().require(
        requests
    ).build, f"resource profile: {amount:g} GPU per task"


def tune(
    ctx: TableContext,
    plan: Plan,
    cluster: Cluster | None,
    *,
    enabled: bool = True,
    user: Mapping[str, int | None] | None = None,
) -> list[StepTuning]:
    """Routes and settings of every step of ``plan`` (see the module doc) on ``cluster`` (None:
    not known yet, history of any size is used); ``user``: run arguments (``batch_rows``, ``fragments_per_task``, ``memory_mb``; None: not given)."""
    runs = _history(ctx) if enabled else []
    return [_tune_step(step, cluster, runs, enabled, dict(user or {})) for step in plan.steps]


def _history(ctx: TableContext) -> list[dict[str, Any]]:
    """The table's successful backfill runs' metrics, newest first."""
    return [
        r["metrics"]
        for r in ctx.catalog.list_runs(ctx.record)
        if r["kind"] == "backfill" and r["status"] == "succeeded" and r.get("metrics")
    ]


def _tune_step(
    step: Step,
    cluster: Cluster | None,
    runs: list[dict[str, Any]],
    enabled: bool,
    user: dict[str, int | None],
) -> StepTuning:
    routes = [route(f, cluster) for f in step.features]
    out = StepTuning(routes, dict(DEFAULTS), {k: "default" for k in DEFAULTS})
    out.gpu_stage = cluster is not None and any(r.route == PYTHON_GPU for r in routes)
    out.warnings += [f"{r.feature} {r.reason}" for r in routes if r.reason == NO_GPU_WARNING]
    pandas = [f for f in step.features if f.kind == "pandas"]
    if not enabled:
        out.reasons.append("tuning off: defaults")
    elif pandas:
        _from_history(out, step, cluster, runs)
    for name in DEFAULTS:  # user values win: run arguments, then the features' own options
        own = [int(v) for f in pandas if (v := f.options.get(name)) is not None]
        value = user.get(name) if user.get(name) is not None else (min(own) if own else None)
        if value is not None:
            out.values[name], out.sources[name] = int(value), "user"
    return out


def _from_history(
    out: StepTuning, step: Step, cluster: Cluster | None, runs: list[dict[str, Any]]
) -> None:
    """Pick the step's values from its last runs' metrics (same features and versions)."""
    ids = sorted(f.id for f in step.features)
    seen, other = [], 0
    parallelism = cluster.parallelism if cluster is not None else None
    for metrics in runs:
        recorded = metrics.get("cluster", {}).get("parallelism")
        parallelism = parallelism or recorded
        for s in metrics.get("steps", []):
            if sorted(s.get("features", [])) == ids and s.get("rows") and s.get("settings"):
                if recorded != parallelism:
                    other += 1
                else:
                    seen.append(s)
        if len(seen) >= HISTORY_RUNS:
            break
    if other and not seen:
        out.reasons.append(
            f"history ignored: {other} run(s) of these features on a cluster of another size "
            f"(parallelism {parallelism} now); defaults"
        )
        return
    if not seen:
        out.reasons.append("no history of these features: defaults")
        return
    picked = _pick(seen, len(step.fragments), int(parallelism or 1))
    for name, (value, why) in picked.items():
        out.values[name], out.sources[name] = value, "history"
        out.reasons.append(f"{name}={value}: {why}")


def _pick(
    seen: list[dict[str, Any]], fragments: int, parallelism: int
) -> dict[str, tuple[int, str]]:
    """Values from step metrics of earlier runs (newest first), within :data:`BOUNDS`."""
    rows = sum(int(s["rows"]) for s in seen)
    frags = sum(max(1, int(s.get("fragments", 1))) for s in seen)
    compute = sum(float(s.get("compute_seconds", 0.0)) for s in seen)
    picked: dict[str, tuple[int, str]] = {}
    last = seen[0]
    per_row_s = compute / rows if rows else 0.0
    batch = BOUNDS["batch_rows"][1] if per_row_s <= 0 else int(TARGET_CALL_S / per_row_s)
    used = int(last["settings"].get("batch_rows", {}).get("value") or DEFAULT_BATCH_ROWS)
    peak = int(last.get("peak_memory_bytes", 0))
    note = f"{per_row_s * 1e6:.2f} us/record over {rows} record(s)"
    if peak > 0:
        # the whole worker's peak charged to one call's records: an over-estimate, on the safe side
        per_row_bytes = peak / max(1, min(used, int(last["rows"])))
        budget = _clamp("memory_mb", math.ceil(MEMORY_HEADROOM * peak / 2**20))
        cap = int(budget * 2**20 / MEMORY_HEADROOM / per_row_bytes)
        picked["memory_mb"] = (budget, f"{MEMORY_HEADROOM:g}x the peak worker memory seen")
        if cap < batch:
            batch, note = cap, f"{note}; memory caps a call at {cap} record(s)"
    picked["batch_rows"] = (_clamp("batch_rows", batch), f"a call of ~{TARGET_CALL_S:g}s ({note})")
    per_frag_s = compute / frags  # feature time per fragment
    even = math.ceil(fragments / max(1, parallelism * WAVES))
    cap = int(MAX_TASK_COMPUTE_S / per_frag_s) if per_frag_s > 0 else even
    fpt = _clamp("fragments_per_task", min(even, max(1, cap)))
    picked["fragments_per_task"] = (
        fpt,
        f"{WAVES} wave(s) of tasks on {parallelism} core(s) for {fragments} fragment(s), each "
        f"task at most ~{MAX_TASK_COMPUTE_S:g}s of feature time ({per_frag_s:.3f}s per fragment)",
    )
    return picked


def _clamp(name: str, value: int) -> int:
    low, high = BOUNDS[name]
    return max(low, min(high, int(value)))


def explain_lines(tunings: list[StepTuning], cluster: Cluster | None) -> list[str]:
    """The routing and tuning section of a plan's explain."""
    if cluster is None:
        head = "  routing and tuning (no Spark session yet: cluster shape decided at run):"
    elif cluster.master == LOCAL_MASTER:
        head = "  routing and tuning (engine=python: one local Python worker, no Spark):"
    else:
        gpu = "GPUs" if cluster.has_gpus else "no GPUs"
        head = f"  routing and tuning (cluster: parallelism {cluster.parallelism}, {gpu}):"
    lines = [head]
    for i, t in enumerate(tunings, 1):
        lines.append(f"    step {i}:")
        lines += [f"      {r.feature}: {r.route} ({r.reason})" for r in t.routes]
        if any(r.route != JVM for r in t.routes):
            values = ", ".join(f"{k}={t.values[k]} ({t.sources[k]})" for k in t.values)
            lines.append(f"      settings: {values}")
            lines += [f"      why: {r}" for r in t.reasons]
    return lines


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _float(value: str | None) -> float:
    try:
        return float(value) if value is not None else 0.0
    except ValueError:
        return 0.0
