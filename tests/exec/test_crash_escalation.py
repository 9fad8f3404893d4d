"""Crash isolation with Spark's defaults (issue 10 item 10).

Local mode (``local[N]``, what ``omnitable.spark_session()`` and the CLI use) runs each task once,
so a record that kills the Python worker cannot rely on Spark's task retry: the driver re-runs
what did not complete with the crashing feature in the child process. The cases run in a process
of their own (these masters differ from the test session's), one after the other in one JVM (one
Spark start): the plain session backfills on SQLite and on PostgreSQL in turn, then it stops and
the CLI starts its own session with its default master; each test checks its own result. The
child's Spark defaults (``SMALL_SPARK``, through spark-submit) suit the tiny tables.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

TESTS = Path(__file__).resolve().parents[1]
BAD = {"SEGV": 2, "EXIT": 1, "MEM": 1, "RAISE": 1}
KINDS = {"SEGV": "crash", "EXIT": "crash", "MEM": "memory", "RAISE": "exception"}
# Spark defaults for both sessions of the child (through spark-submit; masters and task retries
# untouched): the error tables' Delta state in 2 partitions instead of 50 (the setup's CPU time
# 132 s -> 101 s), no UI
SMALL_SPARK = " ".join(
    f"--conf {k}={v}"
    for k, v in {
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }.items()
)

SCRIPT = r"""
import json, sys
import pyarrow as pa
import omnitable
from omnitable import ROW_ID
from features import omt_faulty_features as faulty

texts, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])


def docs(uri, root):
    wh = omnitable.connect(uri, root=root)
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": texts}), "b1", target_fragment_rows=500)
    t.register(faulty.score)
    return wh


def report(wh, spark, summary):
    t = wh.table("docs")
    out = t.read(columns=[ROW_ID, "score"])
    ids = out.column(ROW_ID).to_pylist()
    errors = {r[ROW_ID]: r.kind for r in t.errors(spark=spark).collect()}
    return dict(
        summary,
        scores=out.column("score").to_pylist(),
        kinds={str(ids.index(i)): k for i, k in errors.items()},
        state=t.status().state("b1", "score"),
    )


from pyspark.sql import SparkSession


def cli(specs):
    from omnitable.cli.main import main

    ((backend, uri, root),) = specs
    wh = docs(uri, root)
    code = main(["-w", uri, "backfill", "docs", "-f", "score"])
    return {backend: report(wh, SparkSession.getActiveSession(), {"code": code})}


def builder(specs):
    from omnitable.spark import session as s

    jars = [str(s.jar_path())] + [str(p) for p in s.delta_jar_paths()]
    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.jars", ",".join(jars))
        .config("spark.sql.extensions", s.EXTENSIONS_CLASS + "," + s.DELTA_EXTENSIONS)
        .config("spark.sql.catalog.spark_catalog", s.DELTA_CATALOG)
        .config("spark.ui.enabled", "false")
    )
    for backend, uri, _ in specs:  # env: passwords resolve only for configured servers
        if uri.startswith("postgresql"):
            builder = builder.config("spark.omnitable.warehouses.crash_" + backend, uri)
    spark = builder.getOrCreate()
    results = {}
    for backend, uri, root in specs:
        wh = docs(uri, root)
        result = wh.table("docs").backfill("score").run(spark)
        summary = {"code": 0, "errors": result.errors, "escalated": result.steps[0].escalated}
        results[backend] = report(wh, spark, summary)
    spark.stop()  # the next case starts a session of its own settings (its master)
    return results


for how, specs in cases:
    print("#### case " + how, flush=True)
    print("RESULT " + json.dumps({"builder": builder, "cli": cli}[how](specs)), flush=True)
"""


def _texts() -> tuple[list[str], dict[int, str]]:
    texts = [f"record number {i}" for i in range(1500)]
    marked: dict[int, str] = {}
    pos = 101
    for marker, count in BAD.items():
        for _ in range(count):
            texts[pos] = f"{marker} {texts[pos]}"
            marked[pos] = marker
            pos += 277
    return texts, marked


Spec = tuple[str, str, str | None]  # (backend, warehouse uri, data root)
Runs = dict[str, dict[str, dict[str, Any]]]  # how -> backend -> summary


def _run(cases: list[tuple[str, list[Spec]]]) -> Runs:
    """Run the cases (``how``, its specs) one after the other in a process of their own:
    how -> backend -> its summary (with the case's stdout)."""
    texts, _ = _texts()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*sys.path, str(TESTS)])
    env["PYSPARK_SUBMIT_ARGS"] = f"{SMALL_SPARK} pyspark-shell"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(texts), json.dumps(cases)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    runs: Runs = {}
    for part in proc.stdout.split("#### case ")[1:]:
        how, _, stdout = part.partition("\n")
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        if lines:
            results = json.loads(lines[-1][len("RESULT ") :])
            runs[how] = {backend: dict(r, stdout=stdout) for backend, r in results.items()}
    missing = [how for how, _ in cases if how not in runs]
    assert not missing, f"no result for {missing}: " + proc.stdout[-3000:] + proc.stderr[-6000:]
    return runs


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """The plain session's backfills on SQLite and (when the test server is configured) on
    PostgreSQL, then the CLI's on SQLite, in one process: how -> backend -> summary."""
    tmp = tmp_path_factory.mktemp("crash-escalation")
    specs: list[Spec] = [("sqlite", str(tmp / "wh"), None)]
    if os.environ.get("OMNITABLE_TEST_POSTGRES_URL"):
        dbs = request.getfixturevalue("pg_databases")
        specs.append(("postgres", dbs.create(), str(tmp / "data")))
    return _run([("builder", specs), ("cli", [("sqlite", str(tmp / "cli-wh"), None)])])


def _check(summary: dict) -> None:  # type: ignore[type-arg]
    texts, marked = _texts()
    assert summary["code"] == 0, summary
    assert summary["state"] == "done"
    for pos, (text, value) in enumerate(zip(texts, summary["scores"], strict=True)):
        assert value == (None if pos in marked else len(text) / 2), (pos, text, value)
    assert summary["kinds"] == {str(p): KINDS[m] for p, m in marked.items()}


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_plain_local_session_isolates_crashes(
    backend: str,
    runs: Runs,
    request: pytest.FixtureRequest,
) -> None:
    if backend == "postgres":  # skips (fails under OMNITABLE_REQUIRE_POSTGRES) without a server
        request.getfixturevalue("pg_databases")
    summary = runs["builder"][backend]
    _check(summary)
    assert summary["errors"] == {"score@1": sum(BAD.values())}
    assert summary["escalated"] == ["score"]


def test_cli_with_its_default_master_isolates_crashes(
    runs: Runs,
) -> None:
    summary = runs["cli"]["sqlite"]
    _check(summary)
    assert "re-run in the child process after a crash: score" in summary["stdout"]


def test_sessions_report_how_they_escalate(spark) -> None:  # type: ignore[no-untyped-def]
    from omnitable.exec.escalation import crash_escalation

    # The test session is local[2,4] (Spark retries tasks, the retry escalates), but an earlier
    # test's builder may have set another spark.master on it (the CLI's local[*]): in local mode
    # the driver path is armed either way.
    got = crash_escalation(spark)
    assert got.driver_fallback and got.warning is None
    assert got.strategy == (
        "task-retry" if spark.conf.get("spark.master") == "local[2,4]" else "driver"
    )


class _Conf:
    """The public configuration of a session we cannot start here (a cluster)."""

    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Session:
    def __init__(self, **values: str) -> None:
        self.conf = _Conf({k.replace("_", "."): v for k, v in values.items()})


@pytest.mark.parametrize(
    "conf, strategy",
    [
        ({"spark_master": "local"}, "driver"),
        ({"spark_master": "local[*]"}, "driver"),
        ({"spark_master": "local[4, 1]"}, "driver"),
        ({"spark_master": "local[2,4]"}, "task-retry"),
        ({"spark_master": "yarn"}, "task-retry"),  # Spark's default maxFailures is 4
        ({"spark_master": "spark://h:7077", "spark_task_maxFailures": "2"}, "task-retry"),
        ({"spark_master": "k8s://h", "spark_task_maxFailures": "1"}, "none"),
        ({"spark_master": "local-cluster[2,1,1024]", "spark_task_maxFailures": "1"}, "none"),
    ],
)
def test_escalation_strategy_from_public_conf(conf: dict[str, str], strategy: str) -> None:
    from omnitable.exec.escalation import crash_escalation

    got = crash_escalation(_Session(**conf))  # type: ignore[arg-type]
    assert got.strategy == strategy
    master = conf["spark_master"]
    assert got.driver_fallback == (master == "local" or master.startswith("local["))
    assert (got.warning is not None) == (strategy == "none")
    if got.warning:
        assert "spark.task.maxFailures >= 2" in got.warning
