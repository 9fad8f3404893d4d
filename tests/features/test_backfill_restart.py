"""A backfill killed midway leaves only whole checkpoint commits; a re-run finishes the rest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

import omnitable

from . import omt_test_features as F

pytestmark = pytest.mark.spark

SCRIPT = textwrap.dedent("""
    import sys, omnitable
    wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
    spark = omnitable.spark_session(wh, master="local[1]", **{
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    wh.table("docs").backfill("clean").run(spark, checkpoint_fragments=1)
    print("finished", flush=True)
""")


def test_killed_backfill_keeps_whole_checkpoints_and_rerun_skips_them(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], spark
) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": [f" Row {i} " for i in range(12)]}), "b1", target_fragment_rows=4)
    t.register(F.clean)
    uri, root = catalog_spec
    env = dict(
        os.environ,
        OMNITABLE_FAILPOINTS="backfill.after_commit=exit",
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, uri, root or ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 77, proc.stderr[-3000:]  # died right after its first checkpoint
    assert "finished" not in proc.stdout

    snap = t.snapshot()
    states = [F.clean.version == "1" and _done(t, frag.fragment_id) for frag in snap.fragments]
    assert states.count(True) == 1  # exactly one whole checkpoint is visible
    assert t.status().state("b1", "clean") == "partial"
    clean = t.read(columns=["clean"]).column("clean").to_pylist()
    assert sum(v is not None for v in clean) == 4  # that fragment's rows, nothing else

    plan = t.backfill("clean")
    assert len(plan.steps[0].fragments) == 2  # the committed fragment is skipped
    plan.run(spark)
    assert t.read(columns=["clean"]).column("clean").to_pylist() == [f"row {i}" for i in range(12)]
    assert t.status().state("b1", "clean") == "done"


def _done(t: omnitable.Table, fragment_id: str) -> bool:
    snap = t.snapshot()
    col = snap.column("clean")
    return snap.resolve(fragment_id, [col.column_id])[col.column_id] is not None
