"""Routing by engine and tuning from run history (docs/features.md, "Routing and tuning"):
per-step metrics are recorded, the next run picks its settings from them within bounds and
shows them in explain, user values win, ``tuning="off"`` keeps the defaults, history of another
cluster size is ignored, and each feature's route is shown with a warning where a GPU is
preferred but missing."""

from __future__ import annotations

import pyarrow as pa
import pytest

import omnitable
from omnitable.exec.tuning import (
    BOUNDS,
    DEFAULTS,
    NO_GPU_WARNING,
    PYTHON_CPU,
    PYTHON_GPU,
    Cluster,
    resource_profile,
    route,
)

from . import omt_adaptive_features as F

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

METRICS = ("rows", "bytes_read", "bytes_written", "seconds", "peak_memory_bytes", "failures",
           "retries", "spills", "settings")  # fmt: skip


def _table(wh: omnitable.Warehouse, name: str, *features: omnitable.Feature) -> omnitable.Table:
    t = wh.create_table(name, {"x": "double"})
    t.append(pa.table({"x": [float(i) for i in range(1200)]}), "b1", target_fragment_rows=100)
    t.register(*features)
    return t


def _steps(wh: omnitable.Warehouse, run_id: str) -> list[dict]:  # type: ignore[type-arg]
    return wh.catalog.get_run(run_id)["metrics"]["steps"]  # type: ignore[no-any-return]


@pytest.fixture(params=["sqlite"])
def catalog_spec(request: pytest.FixtureRequest, shared_warehouses):  # type: ignore[no-untyped-def]
    return shared_warehouses.spec("sqlite", None)


def test_metrics_recorded_then_second_run_tunes_within_bounds(wh, spark) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh, "tuned", F.scaled)
    first = t.backfill("scaled").run(spark)
    (step,) = _steps(wh, first.run_id)
    assert all(k in step for k in METRICS)
    assert step["rows"] == 1200 and step["failures"] == 0 and step["bytes_written"] > 0
    assert step["peak_memory_bytes"] > 0 and step["bytes_read"] > 0 and step["spills"] == 0
    assert {k: v["source"] for k, v in step["settings"].items()} == {
        "batch_rows": "default", "fragments_per_task": "default", "memory_mb": "default"
    }  # fmt: skip
    assert step["settings"]["batch_rows"]["value"] == DEFAULTS["batch_rows"]
    assert wh.catalog.get_run(first.run_id)["metrics"]["cluster"]["parallelism"] == 2

    t.backfill("scaled").run(spark, tuning="off")  # nothing to do: no new run, no history
    t.append(pa.table({"x": [1.0] * 300}), "b2", target_fragment_rows=100)
    plan = t.backfill("scaled")
    text = plan.explain(spark)
    assert "scaled@1: python-cpu" in text and "(history)" in text
    second = plan.run(spark)
    (tuned,) = _steps(wh, second.run_id)
    for name, (low, high) in BOUNDS.items():
        assert tuned["settings"][name]["source"] == "history"
        assert low <= tuned["settings"][name]["value"] <= high
        assert f"{name}={tuned['settings'][name]['value']} (history)" in text
    assert tuned["rows"] == 300
    assert t.read(columns=["scaled"], batches=["b2"]).column("scaled").to_pylist() == [0.5] * 300

    # the same features on a cluster of another size: history ignored, defaults, noted
    t.append(pa.table({"x": [2.0] * 100}), "b3")
    from omnitable.exec.tuning import tune

    other = tune(t._ctx, t.backfill("scaled"), Cluster(parallelism=64))
    assert other[0].values == DEFAULTS
    assert "another size" in " ".join(other[0].reasons)

    # user values win over history; tuning off keeps the defaults
    user = t.backfill("scaled").run(spark, batch_rows=2048, fragments_per_task=3)
    (mine,) = _steps(wh, user.run_id)
    assert mine["settings"]["batch_rows"] == {"value": 2048, "source": "user"}
    assert mine["settings"]["fragments_per_task"] == {"value": 3, "source": "user"}
    assert mine["settings"]["memory_mb"]["source"] == "history"
    t.append(pa.table({"x": [3.0] * 100}), "b4")
    off = t.backfill("scaled").run(spark, tuning="off")
    (plain,) = _steps(wh, off.run_id)
    assert {k: v["value"] for k, v in plain["settings"].items()} == DEFAULTS
    assert {v["source"] for v in plain["settings"].values()} == {"default"}
    with pytest.raises(omnitable.ValidationError, match="batch_rows must be a positive int"):
        t.backfill("scaled").run(spark, batch_rows=0)
    with pytest.raises(omnitable.ValidationError, match="tuning"):
        t.backfill("scaled").run(spark, tuning="maybe")


def test_routes_in_explain_and_gpu_preference_without_gpus(wh, spark) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh, "routed", F.doubled, F.scaled, F.embedded)
    plan = t.backfill(["doubled", "scaled", "embedded"])
    text = plan.explain(spark)
    assert "doubled@1: jvm" in text and "scaled@1: python-cpu" in text
    assert f"embedded@1: python-cpu ({NO_GPU_WARNING})" in text
    result = plan.run(spark)
    assert any(NO_GPU_WARNING in w for w in result.warnings)
    routes = {k: v for s in _steps(wh, result.run_id) for k, v in s["routes"].items()}
    assert routes == {"doubled@1": "jvm", "scaled@1": "python-cpu", "embedded@1": "python-cpu"}
    got = t.read(columns=["x", "doubled", "embedded"]).to_pydict()
    assert got["doubled"] == [2 * x for x in got["x"]]
    w = [i / 15 for i in range(16)]
    norm = sum(v * v for v in w)
    assert got["embedded"] == pytest.approx([x * norm for x in got["x"]])


def test_gpu_cluster_routes_to_a_gpu_stage_with_a_resource_profile() -> None:
    standalone = Cluster.of(
        {"spark.master": "spark://head:7077", "spark.executor.instances": "4",
         "spark.executor.cores": "8", "spark.executor.resource.gpu.amount": "1",
         "spark.task.resource.gpu.amount": "0.25"}
    )  # fmt: skip
    assert standalone.parallelism == 32 and standalone.has_gpus
    assert route(F.embedded, standalone).route == PYTHON_GPU
    assert route(F.scaled, standalone).route == PYTHON_CPU
    profile, note = resource_profile(standalone)
    assert profile is not None and "0.25 GPU per task" in note
    assert profile.taskResources["gpu"].amount == 0.25
    cpu_only = Cluster.of({"spark.master": "local[2]"})
    assert cpu_only.parallelism == 2 and not cpu_only.has_gpus
    assert route(F.embedded, cpu_only).reason == NO_GPU_WARNING
    local_gpu = Cluster.of({"spark.master": "local[4]", "spark.task.resource.gpu.amount": "1"})
    assert route(F.embedded, local_gpu).route == PYTHON_GPU
    assert resource_profile(local_gpu)[0] is None  # Spark schedules no profiles in local mode
