"""Spark's own scan metrics prove fusion (an input shared by fused features is read once per
fragment), and unreadable input fragments are skipped up to a ratio and reported, on either
engine (the ``python`` engine reads the inputs with the table's own reader)."""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable

from . import omt_test_features as F

pytestmark = pytest.mark.spark

FEATURES = [F.shout, F.first_char, F.clean]  # all read `text`


def _table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"text": "string", "other": "string"})
    t.append(
        pa.table(
            {"text": [f"some text number {i} " * 5 for i in range(3000)], "other": ["o"] * 3000}
        ),
        "b1",
        target_fragment_rows=1000,
    )
    t.register(*FEATURES)
    return t


def test_fused_features_read_their_shared_input_once(wh: omnitable.Warehouse, spark) -> None:  # type: ignore[no-untyped-def]
    fused = _table(wh, "fused")
    plan = fused.backfill([f.name for f in FEATURES])
    assert len(plan.steps) == 1 and len(plan.steps[0].features) == 3
    result = plan.run(spark)
    (step,) = result.steps
    assert step.scans == 1
    separate = _table(wh, "separate")
    per_feature = [separate.backfill(f.name).run(spark).steps[0] for f in FEATURES]
    assert [s.scans for s in per_feature] == [1, 1, 1]
    # Spark-reported bytes: each separate backfill reads `text` fully, the fused one once
    assert all(s.bytes_read == step.bytes_read for s in per_feature)
    assert sum(s.bytes_read for s in per_feature) == 3 * step.bytes_read
    snap = fused.snapshot()
    text_id = snap.column("text").column_id
    base_bytes = sum(
        f.size_bytes
        for fr in snap.fragments
        for f in [snap.resolve(fr.fragment_id, [text_id])[text_id]]
        if f
    )
    assert step.bytes_read <= base_bytes  # only `text` chunks, never `other`
    run = fused.warehouse.catalog.get_run(result.run_id)
    assert run["metrics"]["steps"][0]["bytes_read"] == step.bytes_read


def _corrupt_one_fragment(t: omnitable.Table) -> str:
    snap = t.snapshot()
    frag = snap.fragments[1]
    col = snap.column("text")
    victim = snap.resolve(frag.fragment_id, [col.column_id])[col.column_id]
    assert victim is not None
    path = t.location.child_path(victim.path)
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:  # keep the size, destroy the footer
        f.write(data[: len(data) - 64] + b"\0" * 64)
    with pytest.raises(pa.ArrowInvalid):
        pq.read_metadata(path)
    return frag.fragment_id


ENGINES = pytest.mark.parametrize("engine", ["spark", "python"])


def _spark(spark: Any, engine: str) -> Any:
    """The session a run on ``engine`` gets: on the python engine these runs log no failed
    record, so they must not make one."""

    def no_spark() -> Any:
        raise AssertionError("the python engine started Spark")

    return spark if engine == "spark" else no_spark


@ENGINES
def test_unreadable_input_fragment_is_skipped_and_reported(
    wh: omnitable.Warehouse, spark, engine: str
) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh, "dirty")
    bad = _corrupt_one_fragment(t)
    result = t.backfill("shout").run(_spark(spark, engine), max_skip_ratio=0.5, engine=engine)
    assert result.steps[0].routes == {
        "shout@1": "python-local" if engine == "python" else "python-cpu"
    }
    assert [s["fragment"] for s in result.skipped] == [bad]
    assert result.skipped[0]["batch"] == "b1" and result.skipped[0]["error"]
    assert t.status().state("b1", "shout") == "partial"
    run = t.warehouse.catalog.get_run(result.run_id)
    assert [s["fragment"] for s in run["metrics"]["skipped"]] == [bad]
    plan = t.backfill("shout")  # the skipped fragment stays missing, ready for a later run
    assert [f.fragment_id for f in plan.steps[0].fragments] == [bad]


@ENGINES
def test_skip_ratio_and_fail_mode(wh: omnitable.Warehouse, spark, engine: str) -> None:  # type: ignore[no-untyped-def]
    t = _table(wh, "dirty")
    _corrupt_one_fragment(t)
    version = t.version
    with pytest.raises(omnitable.ErrorRatioExceeded, match="could not be read"):
        t.backfill("shout").run(_spark(spark, engine), engine=engine)  # 1 of 3 > the default 1 %
    assert t.version == version
    failure = "OMNITABLE_" if engine == "spark" else "Cannot read column file .* Parquet magic"
    with pytest.raises(Exception, match=failure):
        t.backfill("shout").run(_spark(spark, engine), on_corrupt="fail", engine=engine)
    assert t.version == version


def test_missing_input_file_fails_the_python_engine(wh: omnitable.Warehouse) -> None:
    """A missing file is not corruption: it fails the run even with ``on_corrupt="skip"``."""
    t = _table(wh, "gone")
    snap = t.snapshot()
    col = snap.column("text")
    victim = snap.resolve(snap.fragments[1].fragment_id, [col.column_id])[col.column_id]
    assert victim is not None
    os.remove(t.location.child_path(victim.path))
    version = t.version
    with pytest.raises(omnitable.CorruptInputError, match="No such file") as info:
        t.backfill("shout").run(_spark(None, "python"), max_skip_ratio=1.0, engine="python")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert t.version == version


@ENGINES
def test_input_that_is_not_corrupt_fails_the_backfill(
    wh: omnitable.Warehouse, spark, engine: str
) -> None:  # type: ignore[no-untyped-def]
    """A readable input file whose `text` holds integers (schema drift) is not skipped as
    corruption: the run fails with the cause and commits nothing."""
    t = _table(wh, "drift")
    snap = t.snapshot()
    col = snap.column("text")
    victim = snap.resolve(snap.fragments[1].fragment_id, [col.column_id])[col.column_id]
    assert victim is not None
    path = t.location.child_path(victim.path)
    data = pq.read_table(path)
    i = data.schema.get_field_index(col.physical_name)
    pq.write_table(data.set_column(i, col.physical_name, pa.array(range(1000), pa.int64())), path)
    version = t.version
    mismatch = "OMNITABLE_SCHEMA_MISMATCH" if engine == "spark" else "stored as int64"
    with pytest.raises(Exception, match=mismatch) as info:
        t.backfill("shout").run(_spark(spark, engine), max_skip_ratio=0.5, engine=engine)
    assert "not corruption" in str(info.value)
    assert t.version == version
