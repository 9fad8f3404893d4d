"""Model features: equal to per-row inference of a small torch model, the model loaded once per
worker process, micro-batched calls, a crashing record isolated (NULL + error row), an OOM
halving the call size, a corrupt artifact failing the backfill with nothing committed, and
registration / deletion checks; objects of script classes stored by value. One SQLite warehouse
and the session's Spark for the module."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import CorruptInputError, ValidationError
from omnitable.exec.inference import ModelCaller, load_model
from omnitable.features.definition import MODEL_STORAGE_OPTION, model_feature
from omnitable.models.store import ModelStore

from . import omt_model_features as mf

N = 600


@pytest.fixture(scope="module")
def mwh(tmp_path_factory: pytest.TempPathFactory) -> Any:
    wh = omnitable.connect(str(tmp_path_factory.mktemp("model-features") / "wh"))
    yield wh
    wh.close()


def _table(wh: omnitable.Warehouse, name: str, fragment_rows: int = 200) -> omnitable.Table:
    t = wh.create_table(name, {"x1": "double", "x2": "double"})
    x = np.arange(N, dtype=np.float64)
    t.append(pa.table({"x1": x, "x2": np.sin(x)}), "b1", target_fragment_rows=fragment_rows)
    return t


def _mlp() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    ).eval()


@pytest.fixture(scope="module")
def scored(mwh, spark, tmp_path_factory) -> Any:  # type: ignore[no-untyped-def]
    """One table, four model features (torch mlp, counting, fragile, oom) backfilled in one
    run (prefer="gpu" of the mlp on this CPU-only machine: it runs on CPU)."""
    counter = tmp_path_factory.mktemp("loads") / "loads"
    mwh.models.register("counting", "1", mf.CountingLinear([2.0, 3.0], 1.0, str(counter)))
    mwh.models.register("fragile", "1", mf.CountingLinear([0.5], 0.0, str(counter) + ".f"))
    mwh.models.register("oom", "1", mf.CountingLinear([3.0], 0.0, str(counter) + ".o"))
    mwh.models.register("mlp", "1", _mlp(), framework="torch")
    t = _table(mwh, "scored")
    t.register(mf.linear, mf.fragile, mf.oom, mf.mlp_score)
    result = t.backfill(["linear", "fragile", "oom", "mlp_score"]).run(spark)
    cols = ["x1", "x2", "y", "rows", "pid", "fragile_y", "oom_y", "oom_rows", "score", ROW_ID]
    return t, result, t.read(columns=cols).to_pandas(), counter


def test_torch_feature_equals_per_row_inference_with_lineage(mwh, scored) -> None:  # type: ignore[no-untyped-def]
    import torch

    t, _, got, _ = scored
    model = _mlp()  # the same seed: the same weights as the registered model
    with torch.no_grad():
        per_row = [
            float(model(torch.tensor([[a, b]], dtype=torch.float32))[0, 0])
            for a, b in zip(got.x1, got.x2, strict=True)
        ]
    np.testing.assert_allclose(got.score.to_numpy(), per_row, rtol=1e-5, atol=1e-6)
    lineage = t.lineage("score")
    assert len(lineage) == 3
    sha = mwh.models.get("mlp", "1").sha256
    assert {x.model for x in lineage} == {f"model=mlp@1 sha256={sha}"}


def test_model_loaded_once_per_worker_and_calls_micro_batched(scored) -> None:  # type: ignore[no-untyped-def]
    _, _, got, counter = scored
    np.testing.assert_allclose(got.y, 2 * got.x1 + 3 * got.x2 + 1)
    assert got.rows.max() == 32  # 200-row fragments cut into calls of at most 32 rows
    loads = collections.Counter(int(p) for p in counter.read_text().split())
    assert set(got.pid) <= set(loads)  # every computing worker loaded the model...
    assert set(loads.values()) == {1}  # ...once, for its 7+ calls over 3 fragments


def test_crashing_record_is_null_with_an_error_row(scored, spark) -> None:  # type: ignore[no-untyped-def]
    t, result, got, _ = scored
    assert result.errors == {"fragile@1": 1}
    bad = got.x1 == 13
    assert got.fragile_y[bad].isna().all()
    np.testing.assert_allclose(got.fragile_y[~bad], got.x1[~bad] * 0.5)
    (err,) = [r.asDict() for r in t.errors(spark=spark).collect()]
    assert err[ROW_ID] == int(got[ROW_ID][bad].iloc[0])
    assert "cannot score 13" in err["message"]


def test_oom_halves_the_call_size_and_computes_every_row(scored) -> None:  # type: ignore[no-untyped-def]
    _, _, got, _ = scored
    np.testing.assert_allclose(got.oom_y, got.x1 * 3)  # no row failed
    assert got.oom_rows.max() == 8  # 64 -> 32 -> 16 -> 8 rows per call


def test_corrupt_artifact_fails_the_backfill_and_commits_nothing(mwh, spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rec = mwh.models.register("corrupt", "1", mf.CountingLinear([4.0], 0.0, str(tmp_path / "c")))
    t = _table(mwh, "corrupt_scores", fragment_rows=N)
    t.register(mf.corrupt)
    before = t.version
    blob = Path(mwh.root.path) / "_models" / rec.sha256
    blob.write_bytes(pickle.dumps(mf.CountingLinear([5.0], 0.0, str(tmp_path / "c"))))
    actual = hashlib.sha256(blob.read_bytes()).hexdigest()
    # the driver raises omnitable's error (not Spark's wrapped task failure, after no retries)
    with pytest.raises(CorruptInputError) as info:
        t.backfill("corrupt").run(spark)
    message = str(info.value)
    assert "Model 'corrupt' version '1' is corrupt" in message and "Traceback" not in message
    assert rec.sha256 in message and actual in message
    assert not list(Path(t._ctx.location.path).rglob("corrupt-*"))  # no output file left
    assert t.version == before
    assert t.read(columns=["y"]).column("y").null_count == N


def test_store_options_reach_the_workers_as_references(mwh, spark, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A model whose store needs storage options: the feature carries the ``env:`` references
    (never a value), each Spark worker resolves them from its own environment; a variable unset
    there fails the backfill on the driver with a message naming it, and commits nothing."""
    monkeypatch.setenv(mf.WORKER_OPTION, "true")  # the driver's, to register the artifacts
    monkeypatch.setenv(mf.UNSET_OPTION, "true")
    store = ModelStore(
        mwh.catalog, mwh.root, storage_options={"skip_instance_cache": f"env:{mf.WORKER_OPTION}"}
    )
    uri = (tmp_path / "remote-store").as_uri()
    store.register("remote", "1", mf.CountingLinear([7.0], 0.0, str(tmp_path / "r")), uri=uri)
    store.register("remote", "2", mf.CountingLinear([9.0], 0.0, str(tmp_path / "r")), uri=uri)
    t = _table(mwh, "remote_scores", fragment_rows=N)
    t.register(mf.remote)
    (stored,) = [f for f in t.features() if f.name == "remote"]
    assert stored.options[MODEL_STORAGE_OPTION] == {
        "skip_instance_cache": f"env:{mf.WORKER_OPTION}"
    }
    t.backfill("remote").run(spark)
    got = t.read(columns=["x1", "y"]).to_pandas()
    np.testing.assert_allclose(got.y, got.x1 * 7.0)

    u = _table(mwh, "remote_unset_scores", fragment_rows=N)
    u.register(mf.remote_unset)
    before = u.version
    with pytest.raises(ValidationError) as info:
        u.backfill("remote_unset").run(spark)  # unset in the workers (set in this driver)
    message = str(info.value)
    assert mf.UNSET_OPTION in message and "skip_instance_cache" in message
    assert "Traceback" not in message
    assert u.version == before
    assert u.read(columns=["y"]).column("y").null_count == N
    other = model_feature(model="remote@1", inputs=["x1"], outputs={"y": "double"}, version="1",
                          storage_options={"skip_instance_cache": f"env:{mf.UNSET_OPTION}"})  # fmt: skip
    with pytest.raises(ValidationError, match="already registered with different code"):
        t.register(other(mf.remote.fn))  # the version fixes its storage options
    with pytest.raises(ValidationError, match="looks like a credential"):
        model_feature(model="remote@1", inputs=["x1"], outputs={"y": "double"}, version="1",
                      storage_options={"token": "s3cr3t"})(mf.remote.fn)  # fmt: skip


def test_register_needs_the_model_and_delete_is_refused_while_used(wh) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table("refs", {"x1": "double"})
    with pytest.raises(ValidationError, match="model 'nowhere@1' is not in the model store"):
        t.register(mf.unknown)
    wh.models.register("nowhere", "1", {"w": 1})
    t.register(mf.unknown)
    with pytest.raises(ValidationError, match=r"registered features use it \(.*unknown@1"):
        wh.models.delete("nowhere", "1")
    wh.models.register("nowhere", "2", {"w": 2})
    other = model_feature(model="nowhere@2", inputs=["x1"], outputs={"y": "double"}, version="1")
    with pytest.raises(ValidationError, match="already registered with different code"):
        t.register(other(mf.unknown.fn))  # another model under the same feature version
    with pytest.raises(ValidationError, match="model must be 'name@version'"):
        model_feature(model="nowhere", inputs=["x1"], outputs={"y": "double"}, version="1")(
            mf.unknown.fn
        )
    with pytest.raises(ValidationError, match="batch_size must be 'auto' or a positive int"):
        model_feature(
            model="nowhere@1", inputs=["x1"], outputs={"y": "double"}, version="1", batch_size=0
        )(mf.unknown.fn)


def test_caller_auto_size_grows_halves_on_oom_and_gpu_falls_back(mwh, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Without Spark: "auto" doubles after fast calls; a torch-style OOM halves; prefer="gpu"
    on a machine without one warns and runs on CPU."""
    rec = mwh.models.register("plain", "1", mf.CountingLinear([1.0], 0.0, str(tmp_path / "c")))

    def fn(model: Any, x: pd.Series) -> np.ndarray:
        if len(x) > 100:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return np.asarray(x.to_numpy() * model.w[0])

    with pytest.warns(RuntimeWarning, match="prefers a GPU but this worker has none"):
        load_model(rec, "gpu")
    caller = ModelCaller(fn, rec, ["y"], 16, auto=True)
    shipped = ModelCaller(abs, rec, ["y"], 16, auto=True, storage={"auto_mkdir": "1"})
    assert pickle.loads(pickle.dumps(shipped)).storage == {"auto_mkdir": "1"}  # to a child
    with pytest.raises(ValidationError, match=mf.UNSET_OPTION):  # resolved where it loads
        load_model(dataclasses.replace(rec, sha256="0" * 64), "cpu",
                   {"skip_instance_cache": f"env:{mf.UNSET_OPTION}"})  # fmt: skip
    out = caller(pd.Series(np.arange(1000.0)))
    np.testing.assert_allclose(out, np.arange(1000.0))
    assert caller.sizes[:3] == [16, 32, 64]  # doubled after fast calls; 128 ran out of memory
    assert (caller.halvings, caller.size, max(caller.sizes)) == (1, 64, 64)


def test_object_of_a_main_class_is_stored_by_value(mwh, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A model class defined in a script (``__main__``) loads in a process that cannot import
    it (a Spark worker): the store pickles such objects by value."""

    class Doubler:
        def predict(self, x: list[float]) -> list[float]:
            return [2 * v for v in x]

    Doubler.__module__, Doubler.__qualname__ = "__main__", "Doubler"
    rec = mwh.models.register("doubler", "1", Doubler())
    blob = Path(mwh.root.path) / "_models" / rec.sha256
    code = f"import pickle; print(pickle.load(open({str(blob)!r}, 'rb')).predict([1.5]))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[3.0]"
