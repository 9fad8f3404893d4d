"""Input partitions carry everything executors need: a read on Spark's local-cluster master
(two executor JVMs, nothing shared with the driver but the files and the catalog) equals
Table.read(), planned on the driver and on the executors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_read_on_local_cluster(tmp_path: Path) -> None:
    script = Path(__file__).with_name("local_cluster_check.py")
    env = dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "OK rows=" in proc.stdout and "executors=2" in proc.stdout, proc.stdout
    slices = int(proc.stdout.split("slices=")[1].split()[0])
    assert slices > 1, proc.stdout
