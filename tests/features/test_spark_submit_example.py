"""examples/spark_submit_backfill.py runs as a spark-submit batch job, twice (idempotent)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from omnitable.spark.submit_args import submit_args

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_submit_backfill.py"


def test_backfill_through_spark_submit(tmp_path: Path) -> None:
    submit = Path(sys.executable).with_name("spark-submit")
    assert submit.exists(), "the pyspark wheel installs bin/spark-submit into the venv"
    wh = str(tmp_path / "wh")
    cmd = [
        str(submit),
        *submit_args(wh),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        str(EXAMPLE),
        wh,
    ]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert first.returncode == 0, first.stderr[-4000:]
    assert "step 3: level 3, spark-sql, quality@1" in first.stdout
    assert "committed versions [" in first.stdout
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert second.returncode == 0, second.stderr[-4000:]
    assert "nothing to do" in second.stdout
    assert "committed versions []" in second.stdout
