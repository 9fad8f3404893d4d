"""The ``python`` engine (docs/features.md, "Engines"): steps of pandas features computed
without Spark, in the run's local Python worker, with the Spark path's results, isolation,
crash escalation and dirty-input handling; steps it cannot run stay on Spark with the reason."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import omt_local_features as L
import pyarrow as pa
import pytest

import omnitable
from omnitable.exceptions import ValidationError
from omnitable.exec.local_engine import LocalTaskError
from omnitable.exec.runner import RunOptions

ROWS = 40


def _no_spark() -> Any:
    raise AssertionError("the python engine started Spark")


def _typed_table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    """Every type the engine takes, with NULLs, in 4 fragments, and deleted rows."""
    t = wh.create_table(name, L.TYPED)
    n = ROWS

    def col(make: Any) -> list[Any]:
        return [None if i % 7 == 3 else make(i) for i in range(n)]

    data = {
        "i8": pa.array(col(lambda i: i - 20), pa.int8()),
        "i16": pa.array(col(lambda i: i * 300), pa.int16()),
        "i32": pa.array(col(lambda i: i * 70_000), pa.int32()),
        "i64": pa.array(col(lambda i: i * 2**40), pa.int64()),
        "f32": pa.array(col(lambda i: i / 3), pa.float32()),
        "f64": pa.array(col(lambda i: float("nan") if i == 5 else i / 7), pa.float64()),
        "s": pa.array(col(lambda i: f"row {i} é"), pa.string()),
        "b": pa.array(col(lambda i: i % 2 == 0), pa.bool_()),
        "d": pa.array(col(lambda i: dt.date(2024, 1, 1) + dt.timedelta(days=i)), pa.date32()),
        "dec": pa.array(col(lambda i: decimal.Decimal(i) / 4), pa.decimal128(10, 2)),
        "bin": pa.array(col(lambda i: bytes([i, 0, 255])), pa.binary()),
    }
    t.append(pa.table(data), "b1", target_fragment_rows=10)
    t.register(L.seen, L.total)
    t.delete(ids=[2, 11, 12, 19, 33])  # fragments 0, 1 and 3 lose rows
    return t


@pytest.mark.spark
def test_python_engine_gives_pandas_what_spark_gives(wh: omnitable.Warehouse, spark: Any) -> None:
    on_spark, local = _typed_table(wh, "on_spark"), _typed_table(wh, "local")
    on_spark.backfill(["seen", "total"]).run(spark)
    result = local.backfill(["seen", "total"]).run(_no_spark, engine="python")
    (step,) = result.steps
    assert step.routes == {"seen@1": "python-local", "total@1": "python-local"}
    assert step.fragments == 4 and step.files == 8 and step.bytes_read > 0
    cols = ["seen", "total"]
    want, got = on_spark.read(columns=cols), local.read(columns=cols)
    assert got.num_rows == ROWS - 5
    assert got.to_pydict() == want.to_pydict()
    first = got.column("seen")[0].as_py()
    assert "i8:float64" in first and "d:object" in first and "date:datetime.date" in first
    assert local.status().state("b1", "seen") == "done"


def test_python_engine_starts_no_spark_and_explains_its_routes(wh: omnitable.Warehouse) -> None:
    t = _typed_table(wh, "t")
    plan = t.backfill(["total"])
    text = plan.explain(engine="python")
    assert "engine=python: one local Python worker, no Spark" in text
    assert "total@1: python-local" in text
    assert "python-local" not in plan.explain()  # the default engine: spark
    result = plan.run(_no_spark, engine="python")
    assert result.steps[0].routes == {"total@1": "python-local"}
    run = t.warehouse.catalog.get_run(result.run_id)
    assert run["metrics"]["steps"][0]["routes"] == {"total@1": "python-local"}
    assert run["plan"]["options"]["engine"] == "python"
    got = t.read(columns=["i64", "f64", "total"]).to_pydict()
    for a, b, total in zip(got["i64"], got["f64"], got["total"], strict=True):
        if a is None or b is None:
            assert total is None
        elif b == b:
            assert total == float(a) + b


def test_prints_of_features_do_not_break_the_worker(
    wh: omnitable.Warehouse, capfd: pytest.CaptureFixture[str]
) -> None:
    t = wh.create_table("t", {"s": "string"})
    t.append(pa.table({"s": [f"x{i}" for i in range(30)]}), "b1", target_fragment_rows=10)
    t.register(L.chatty)
    t.backfill("shout").run(_no_spark, engine="python")
    assert t.read(columns=["shout"]).column(0).to_pylist() == [f"X{i}" for i in range(30)]
    err = capfd.readouterr().err
    assert "chatty on stdout 10" in err and "chatty on stderr 10" in err


@pytest.mark.spark
def test_steps_it_cannot_run_stay_on_spark_with_the_reason(
    wh: omnitable.Warehouse, spark: Any
) -> None:
    t = wh.create_table("t", {"x": "bigint", "ts": "timestamp"})
    start = dt.datetime(2024, 5, 1, 6, tzinfo=dt.timezone.utc)
    t.append(pa.table({"x": list(range(20)),
                       "ts": [start + dt.timedelta(hours=i) for i in range(20)]}),
             "b1", target_fragment_rows=10)  # fmt: skip
    sql = omnitable.sql_feature("x2", "x * 2", "bigint", "1", inputs=["x"])
    t.register(sql, L.hour, L.plus_one)
    plan = t.backfill(["x2", "hour", "plus_one"])
    text = plan.explain(spark, engine="python")
    assert "x2@1: jvm" in text and "hour@1: python-cpu" in text
    assert "plus_one@1: python-local" in text  # the next level, reading the SQL feature's output
    assert "engine=python, the step runs on Spark: input 'ts' is timestamp[us, tz=UTC]" in text
    result = plan.run(spark, engine="python")
    routes = {k: v for s in result.steps for k, v in s.routes.items()}
    assert routes == {"x2@1": "jvm", "hour@1": "python-cpu", "plus_one@1": "python-local"}
    got = t.read(columns=["x2", "plus_one", "hour"]).to_pydict()
    assert got["x2"] == [2 * i for i in range(20)]
    assert got["plus_one"] == [2 * i + 1 for i in range(20)]
    assert got["hour"] == [(6 + i) % 24 for i in range(20)]


@pytest.mark.spark
def test_a_chunk_whose_inputs_changed_type_runs_on_spark(
    wh: omnitable.Warehouse, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is made again at each chunk: one that fails it runs on Spark (with the
    session's crash escalation), logged."""
    from omnitable.exec import runner

    calls: list[str | None] = []

    def reason(step: Any, columns: Any) -> str | None:  # planned local, changed at the chunk
        calls.append(None if not calls else "input 'total' changed type")
        return calls[-1]

    monkeypatch.setattr(runner, "local_reason", reason)
    t = _typed_table(wh, "t")
    result = t.backfill(["total"]).run(spark, engine="python", checkpoint_fragments=4)
    assert calls == [None, "input 'total' changed type"]
    assert result.steps[0].routes == {"total@1": "python-local"}  # as planned
    assert result.steps[0].scans == 1 and result.steps[0].bytes_read > 0  # Spark's metrics
    assert t.status().state("b1", "total") == "done"


def test_engine_is_validated_and_comes_from_the_settings(
    wh: omnitable.Warehouse, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from omnitable.cli.main import cli

    with pytest.raises(ValidationError, match="engine must be one of spark, python, got 'gpu'"):
        RunOptions(engine="gpu")
    t = _typed_table(wh, "t")
    with pytest.raises(ValidationError, match="engine must be"):
        t.backfill(["total"]).run(_no_spark, engine="jvm")
    assert t.backfill(["total"]).is_empty is False  # nothing ran
    out = CliRunner().invoke(cli, ["-w", wh.uri, "backfill", "t", "-f", "total", "--engine", "x"])
    assert out.exit_code == 2 and "'x' is not one of 'spark', 'python'" in out.output
    with omnitable.connect(wh.uri, settings={"backfill.engine": "python"}) as wh2:
        result = wh2.table("t").backfill(["total"]).run(_no_spark)
    assert result.steps[0].routes == {"total@1": "python-local"}


@pytest.mark.spark
def test_a_failing_record_is_isolated_and_logged(wh: omnitable.Warehouse, spark: Any) -> None:
    """A record that raises is NULL with an error row (written with the session made when
    the first failure is logged); with isolation off it fails the run, committing nothing."""
    from features import omt_faulty_features as faulty

    texts = [f"record {i}" for i in range(30)]
    texts[17] = "RAISE " + texts[17]
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": texts}), "b1", target_fragment_rows=10)
    t.register(faulty.score)
    version = t.version
    with pytest.raises(LocalTaskError, match="ValueError: cannot score 'RAISE record 17'"):
        t.backfill("score").run(_no_spark, engine="python", isolation="off")
    assert t.version == version
    made: list[Any] = []

    def session() -> Any:
        made.append(spark)
        return spark

    result = t.backfill("score").run(session, engine="python", max_error_ratio=0.5)
    assert result.errors == {"score@1": 1} and len(made) == 1
    scores = t.read(columns=["score"]).column(0).to_pylist()
    assert scores == [None if i == 17 else len(x) / 2 for i, x in enumerate(texts)]
    [error] = t.errors(spark=spark).collect()
    assert error.kind == "exception" and "cannot score" in error.message


INTERRUPT = textwrap.dedent("""
    import os, signal, sys, threading, time
    import pyarrow as pa
    import omnitable
    import omt_local_features as L

    wh = omnitable.connect(sys.argv[1])
    t = wh.create_table("t", {"s": "string"})
    t.append(pa.table({"s": ["a", "b"]}), "b1")
    t.register(L.slow)
    threading.Timer(4, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    try:
        t.backfill("slow").run(engine="python")
    except KeyboardInterrupt:
        me = str(os.getpid())
        children = [p for p in os.listdir("/proc") if p.isdigit()
                    and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == me]
        print("INTERRUPTED", round(time.monotonic() - started, 1), children, flush=True)
""")


def test_an_interrupt_ends_the_worker_at_once(tmp_path: Path) -> None:
    """Ctrl-C during a minute-long record: the run stops within seconds, the worker with it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*sys.path, str(Path(__file__).parent)]))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", INTERRUPT, str(tmp_path / "wh")],
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert "INTERRUPTED" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("INTERRUPTED")]
    assert line.endswith("[]"), line  # the worker process is gone (killed and reaped)
    assert time.monotonic() - started < 30  # killed, not waited for (the record takes 60 s)


CRASH = textwrap.dedent("""
    import json, sys
    import pyarrow as pa
    import omnitable
    from omnitable import ROW_ID
    from features import omt_faulty_features as faulty

    uri, texts = sys.argv[1], json.loads(sys.argv[2])
    wh = omnitable.connect(uri)
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": texts}), "b1", target_fragment_rows=500)
    t.register(faulty.score)
    spark = lambda: omnitable.spark_session(wh, master="local[1]", **{
        "spark.ui.enabled": "false", "spark.databricks.delta.snapshotPartitions": "2"})
    result = t.backfill("score").run(spark, engine="python")
    out = t.read(columns=[ROW_ID, "score"])
    ids = out.column(ROW_ID).to_pylist()
    errors = {r[ROW_ID]: r.kind for r in t.errors(spark=spark()).collect()}
    print("RESULT " + json.dumps({
        "errors": result.errors, "escalated": result.steps[0].escalated,
        "routes": result.steps[0].routes, "scores": out.column("score").to_pylist(),
        "kinds": {str(ids.index(i)): k for i, k in errors.items()},
        "state": t.status().state("b1", "score")}))
""")


@pytest.mark.spark
def test_records_that_kill_the_worker_are_isolated(tmp_path: Path) -> None:
    """Segfault, ``os._exit`` and a memory blow-up kill the local worker as they kill Spark's:
    the driver keeps the completed files and re-runs the rest with the feature in the child
    process (the cases of tests/exec/test_crash_escalation.py, in a process of its own)."""
    import json

    from test_crash_escalation import KINDS, _texts

    texts, marked = _texts()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*sys.path, str(Path(__file__).parents[1])]))
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(tmp_path / "wh"), json.dumps(texts)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    summary = json.loads(lines[-1][len("RESULT ") :])
    assert summary["routes"] == {"score@1": "python-local"}
    assert summary["escalated"] == ["score"]
    assert summary["errors"] == {"score@1": len(marked)}
    assert summary["state"] == "done"
    for pos, (text, value) in enumerate(zip(texts, summary["scores"], strict=True)):
        assert value == (None if pos in marked else len(text) / 2), (pos, text, value)
    assert summary["kinds"] == {str(p): KINDS[m] for p, m in marked.items()}


ORPHAN = textwrap.dedent("""
    import time
    from omnitable.exec.local_engine import LocalPythonWorker

    worker = LocalPythonWorker()
    print(worker._started().pid, flush=True)
    time.sleep(600)
""")


def test_the_worker_ends_with_the_process_that_started_it() -> None:
    parent = subprocess.Popen([sys.executable, "-c", ORPHAN], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))  # fmt: skip
    assert parent.stdout is not None
    with parent.stdout:
        child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 20
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_frames_round_trip_and_a_cut_stream_is_an_error() -> None:
    import io

    from omnitable.exec.local_worker import read_frame, write_frame

    stream = io.BytesIO()
    write_frame(stream, b"spec")
    write_frame(stream, memoryview(b"\x00" * 70_000))
    data = stream.getvalue()
    reader = io.BytesIO(data)
    assert read_frame(reader) == b"spec"
    assert read_frame(reader) == b"\x00" * 70_000
    assert read_frame(reader) is None  # a clean end
    cut = io.BytesIO(data[:-1])
    assert read_frame(cut) == b"spec"
    with pytest.raises(EOFError, match="inside a frame"):
        read_frame(cut)
    with pytest.raises(EOFError, match="frame's length"):
        read_frame(io.BytesIO(data[:3]))


def test_task_errors_keep_omnitables_classes() -> None:
    from omnitable.exceptions import CorruptInputError, ErrorRatioExceeded
    from omnitable.exec.local_engine import LocalPythonWorker, _task_error

    err = _task_error({"error": "CorruptInputError", "message": "bad model", "traceback": ""})
    assert type(err) is CorruptInputError and str(err) == "bad model"
    other = _task_error({"error": "ValueError", "message": "no", "traceback": "Traceback..."})
    assert type(other) is LocalTaskError and "ValueError: no" in str(other)
    assert "Traceback..." in str(other)
    assert not isinstance(_task_error({"error": "ErrorRatioExceeded", "message": "m"}),
                          ErrorRatioExceeded)  # fmt: skip  # its constructor takes more
    worker = LocalPythonWorker()
    try:  # a real round trip: the task cannot read this spec
        with pytest.raises(LocalTaskError, match="KeyError: 'root'"):
            worker.compute("{}", pa.table({"a": [1]}))
        with pytest.raises(LocalTaskError, match="KeyError"):  # the same process goes on
            worker.compute("{}", pa.table({"a": [2]}))
    finally:
        worker.close()


@pytest.mark.parametrize(
    ("error", "failure"),
    [
        (FileNotFoundError(2, "No such file"), "environment"),
        (PermissionError(13, "Permission denied"), "environment"),
        (pa.ArrowInvalid("Parquet magic bytes not found in footer"), "corrupt"),
        (OSError("Couldn't deserialize thrift: TProtocolException: Invalid data"), "corrupt"),
        (OSError("ZSTD decompression failed: Corrupted block detected"), "corrupt"),
        (OSError("AWS Error NETWORK_CONNECTION during GetObject operation"), "transient"),
        (OSError("When reading information for key 'x': AWS Error ACCESS_DENIED"), "transient"),
        (OSError(5, "Input/output error"), "transient"),
    ],
)
def test_read_failures_are_classified_as_sparks_reader_does(
    error: BaseException, failure: str
) -> None:
    from omnitable.exceptions import CorruptInputError
    from omnitable.exec.local_engine import read_failure

    assert read_failure(error) == failure
    wrapped = CorruptInputError("Cannot read column file f", "f.parquet")
    wrapped.__cause__ = error
    assert read_failure(wrapped) == failure
    assert read_failure(CorruptInputError("row count", "f.parquet")) == "corrupt"
    assert read_failure(CorruptInputError("a deletion vector")) == "environment"


def test_a_transient_read_error_is_retried_then_fails_even_with_skip(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    from omnitable.format.reader import FragmentReader

    t = _typed_table(wh, "t")
    attempts: list[str] = []

    def flaky(self: FragmentReader, frag: Any, cols: list[str]) -> pa.Table:
        attempts.append(frag.fragment_id)
        raise OSError("AWS Error NETWORK_CONNECTION during GetObject operation")

    monkeypatch.setattr(FragmentReader, "read_fragment", flaky)
    version = t.version
    with pytest.raises(OSError, match="NETWORK_CONNECTION"):
        t.backfill(["total"]).run(_no_spark, engine="python", max_skip_ratio=1.0)
    assert len(attempts) == 3 and len(set(attempts)) == 1  # read 3 times, never skipped
    assert t.version == version
