"""Every example in examples/ that needs no Spark runs to completion."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# spark_* and models_* examples start Spark: tests/spark/test_spark_examples.py runs them
PLAIN = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith(("spark", "models_")))


@pytest.mark.parametrize("script", PLAIN, ids=lambda p: p.name)
def test_example_runs(script: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "wh")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
