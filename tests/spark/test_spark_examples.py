"""The Spark examples run to completion (each in its own process: one SparkContext each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


EXPECT = {
    "spark_read.py": "OmniTable web @ branch main",
    "models_torch.py": "lineage: model=ctr_mlp@1 sha256=",
    "models_sklearn_style.py": "equal to per-row predict; model=price_tree@1 sha256=",
}


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_spark_example_runs(name: str, tmp_path: Path) -> None:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert EXPECT[name] in proc.stdout
