"""Spark Connect: the session-parity tests (test_session_cases.py) pass on a Connect session,
``omnitable.spark_session(remote=...)`` refuses what it cannot build, and the package holds no
py4j (Spark Connect, like shared and serverless compute, has no JVM gateway in the client)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import omnitable
from omnitable.exceptions import ValidationError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES = HERE / "test_session_cases.py"

# py4j and classic-only internals: none may appear in python/omnitable, except the accumulator
# of failure_counter (a classic-only feature, refused on Connect with a clear error).
PY4J = re.compile(r"\b(py4j|_jvm|_jsc|_jdf|_jsparkSession|_gateway|sparkContext)\b|\.rdd\b")
ALLOWED = {("isolation/udf.py", 'sc = getattr(spark, "sparkContext", spark)')}


@pytest.mark.spark
@pytest.mark.slow
def test_the_session_cases_pass_on_spark_connect(tmp_path: Path) -> None:
    """Runs test_session_cases.py in a child pytest on a local Spark Connect server (started
    with the jar by spark_session(remote="local[2,4]")); every case must pass there too."""
    env = {
        **os.environ,
        "OMNITABLE_TEST_SESSION": "connect",
        # an ephemeral gRPC port, found by pyspark's client: no clash with a server on 15002
        "SPARK_TESTING": "1",
        # this tree's package for the driver and the Python workers; the feature module is not
        # on the path: the backfill ships it as a session artifact
        "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "pytest", str(CASES), "-q", "-p", "no:cacheprovider"]
    cmd += ["--basetemp", str(tmp_path / "t"), "-o", "addopts="]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    summary = re.search(r"(\d+) passed", out)
    assert summary is not None, out[-4000:]
    expected = len(re.findall(r"^def test_", CASES.read_text(), re.M))
    assert int(summary.group(1)) >= expected  # each case at least once (more: per backend)


def test_remote_must_be_local_or_a_connect_url(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="neither a local master"):
        omnitable.spark_session(tmp_path / "wh", remote="yarn")


def test_no_py4j_in_the_package() -> None:
    package = ROOT / "python" / "omnitable"
    found = []
    for path in sorted(package.rglob("*.py")):
        for line in path.read_text().splitlines():
            code = line.split("#", 1)[0]
            if PY4J.search(code) and (str(path.relative_to(package)), code.strip()) not in ALLOWED:
                found.append(f"{path.relative_to(package)}: {line.strip()}")
    assert found == []
