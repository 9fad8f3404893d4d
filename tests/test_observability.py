"""Observability (docs/observability.md): progress events of a real backfill, ``omnitable
runs`` and ``Table.runs`` filters, JSON log lines carrying the run id, and Prometheus metrics
served or pushed only when asked. One SQLite warehouse and a few small SQL-feature backfills for
the module."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable.catalog.runs import RunScope
from omnitable.cli.main import main
from omnitable.observability import ProgressEvent, metrics, run_context
from omnitable.observability.logs import configure_from_environment
from omnitable.observability.progress import StderrProgress, dispatcher

pytestmark = pytest.mark.spark

ROWS, FRAGMENT_ROWS = 3000, 1000


@dataclass
class Observed:
    path: Path
    wh: omnitable.Warehouse
    table: omnitable.Table
    events: list[ProgressEvent] = field(default_factory=list)
    legacy: list[tuple[int, int, int, int]] = field(default_factory=list)
    logs: list[dict[str, Any]] = field(default_factory=list)
    results: dict[str, Any] = field(default_factory=dict)
    before: dict[str, float] = field(default_factory=dict)
    stderr: str = ""
    cli_out: str = ""


def _counters() -> dict[str, float]:
    return {
        "started": metrics.RUNS_STARTED.value(kind="backfill"),
        "succeeded": metrics.RUNS_SUCCEEDED.value(kind="backfill"),
        "failed": metrics.RUNS_FAILED.value(kind="backfill", status="failed"),
        "rows": metrics.BACKFILL_ROWS.value(),
        "fragments": metrics.BACKFILL_FRAGMENTS.value(),
        "running": metrics.RUNS_RUNNING.value(kind="backfill"),
    }


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory, spark: Any) -> Iterator[Observed]:
    path = tmp_path_factory.mktemp("observe") / "wh"
    wh = omnitable.connect(str(path))
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": [f"row {i}" for i in range(ROWS)]}), "b1",
             target_fragment_rows=FRAGMENT_ROWS)  # fmt: skip
    t.register(
        omnitable.sql_feature("upper_text", "upper(text)", "string", "1"),
        omnitable.sql_feature("text_len", "length(text)", "int", "1"),
        omnitable.sql_feature("lower_text", "lower(text)", "string", "1"),
        omnitable.sql_feature("from_cli", "concat(text, '!')", "string", "1"),
        omnitable.sql_feature("never", "length(text) * 2", "int", "1"),
    )  # fmt: skip
    obs = Observed(path, wh, t, before=_counters())
    stream = io.StringIO()
    handler = omnitable.configure_logging(json=True, stream=stream)
    logger = logging.getLogger("omnitable")
    try:
        obs.results["events"] = t.backfill(["upper_text"]).run(
            spark, checkpoint_fragments=1, progress=obs.events.append
        )
        obs.results["legacy"] = t.backfill(["text_len"]).run(
            spark, progress=lambda s, n, d, tot: obs.legacy.append((s, n, d, tot))
        )
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
    obs.logs = [json.loads(line) for line in stream.getvalue().splitlines()]
    err = io.StringIO()
    obs.results["stderr"] = t.backfill(["lower_text"]).run(
        spark, progress=StderrProgress(err, min_interval_s=0)
    )
    obs.stderr = err.getvalue()
    with contextlib.redirect_stdout(io.StringIO()) as cli_out:  # the CLI's progress and result
        obs.results["cli"] = main(["-w", str(path), "backfill", "docs", "-f", "from_cli"])
    obs.cli_out = cli_out.getvalue()

    def stop(event: ProgressEvent) -> None:  # fails the run before its first Spark job
        raise RuntimeError(f"stopped at step {event.step}: no text is short enough")

    with pytest.raises(RuntimeError, match="no text is short enough"):
        t.backfill(["never"]).run(spark, progress=stop)
    yield obs
    wh.close()


def test_progress_events_report_rows_fragments_and_a_finite_eta(observed: Observed) -> None:
    run = observed.results["events"]
    events = observed.events
    assert {e.run_id for e in events} == {run.run_id} and {e.table for e in events} == {"docs"}
    assert [(e.step, e.steps) for e in events] == [(1, 1)] * 4  # step start + 3 chunks
    assert [e.fragments_done for e in events] == [0, 1, 2, 3]
    assert {e.fragments_total for e in events} == {ROWS // FRAGMENT_ROWS}
    assert [e.rows_done for e in events] == [0, 1000, 2000, 3000]
    assert {e.rows_total for e in events} == {ROWS} == {e.run_rows_total for e in events}
    elapsed = [e.elapsed_s for e in events]
    assert elapsed == sorted(elapsed) and elapsed[0] >= 0
    assert events[0].eta_s is None  # no rate before the first chunk
    etas = [e.eta_s for e in events[1:]]
    assert all(x is not None and math.isfinite(x) and x >= 0 for x in etas)
    assert events[-1].eta_s == 0.0 and events[-1].fraction == 1.0
    assert "rows 3000/3000" in events[-1].describe()


def test_the_four_argument_callback_still_works(observed: Observed) -> None:
    assert observed.legacy == [(1, 1, 0, 3), (1, 1, 3, 3)]


def test_progress_true_prints_one_line_per_event(observed: Observed, capsys: Any) -> None:
    lines = observed.stderr.splitlines()
    assert lines[-1].startswith("docs step 1/1: fragments 3/3, rows 3000/3000 (100% of run)")
    assert lines[-1].endswith("ETA 0s")
    assert isinstance(dispatcher(True), StderrProgress) and dispatcher(None) is None
    with pytest.raises(omnitable.ValidationError, match="ProgressEvent"):
        observed.table.backfill(["lower_text"]).run(progress=lambda a, b: None)
    event = observed.events[-1]
    StderrProgress()(event)  # stderr by default
    assert "fragments 3/3" in capsys.readouterr().err


def test_backfill_log_lines_carry_the_run_id(observed: Observed) -> None:
    ids = {observed.results["events"].run_id, observed.results["legacy"].run_id}
    lines = [x for x in observed.logs if x["logger"] in ("omnitable.backfill", "omnitable.runs")]
    assert lines, observed.logs
    for line in lines:
        assert set(line) >= {"time", "level", "logger", "message", "run_id", "table"}
        assert line["run_id"] in ids and line["table"] == "docs" and line["kind"] == "backfill"
    steps = [x for x in lines if "committed" in x["message"]]
    assert {x["run_id"] for x in steps} == ids
    assert any(x["message"].endswith("succeeded") for x in lines)


def test_runs_lists_filters_and_shows_one(observed: Observed, capsys: Any) -> None:
    t, wh = observed.table, observed.wh
    runs = t.runs()
    assert [r["kind"] for r in runs] == ["backfill"] * 5 + ["ingest"]
    assert [r["run_id"] for r in t.runs(limit=2)] == [r["run_id"] for r in runs[:2]]
    (failed,) = t.runs(status="failed")
    assert "no text is short enough" in failed["message"]
    assert len(t.runs(status="succeeded")) == 5 and t.runs(status="running") == []
    assert [r["run_id"] for r in wh.runs(limit=3)] == [r["run_id"] for r in runs[:3]]
    assert {r["table"] for r in wh.runs()} == {"docs"}
    with pytest.raises(omnitable.ValidationError, match="status must be one of"):
        t.runs(status="done")
    with pytest.raises(omnitable.ValidationError, match="positive integer"):
        wh.runs(limit=0)

    w = str(observed.path)
    assert main(["-w", w, "runs", "--json", "--status", "failed"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["run_id"] for r in listed] == [failed["run_id"]]
    assert main(["-w", w, "runs", "docs", "--limit", "2"]) == 0
    text = capsys.readouterr().out
    assert runs[0]["run_id"] in text and runs[1]["run_id"] in text
    assert runs[2]["run_id"] not in text

    ok = observed.results["events"].run_id
    assert main(["-w", w, "runs", "--run", ok]) == 0
    shown = capsys.readouterr().out
    assert "step 1: upper_text@1" in shown and "rows=3000" in shown and "fragments=3" in shown
    assert main(["-w", w, "runs", "--run", failed["run_id"]]) == 0
    assert "failure:" in capsys.readouterr().out
    assert main(["-w", w, "--json", "runs", "--run", ok]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["steps"][0]["rows"] == ROWS
    assert main(["-w", w, "runs", "--run", "backfill-nosuchrun"]) == 3


def test_runs_show_the_step_metrics_each_step_has(observed: Observed, capsys: Any) -> None:
    other = observed.wh.create_table("other", {"x": "int"})
    catalog = observed.wh.catalog
    run_id = catalog.start_run(other.record, "backfill")
    steps = [
        {"features": ["a@1"], "rows": 5, "peak_memory_bytes": 1024, "settings": {"batch": 64}},
        {"features": ["b@1"], "rows": 6, "spills": 0},
    ]
    catalog.finish_run(run_id, "succeeded", {"steps": steps})
    assert main(["-w", str(observed.path), "runs", "--run", run_id]) == 0
    shown = capsys.readouterr().out
    assert "rows=5, peak_memory_bytes=1024, spills=-, settings=batch=64" in shown
    assert "rows=6, peak_memory_bytes=-, spills=0, settings=-" in shown
    assert [r["run_id"] for r in observed.wh.runs(limit=1)] == [run_id]
    assert other.runs()[0]["table"] == "other"


def test_metrics_count_runs_and_rows(observed: Observed) -> None:
    now, before = _counters(), observed.before
    assert now["started"] - before["started"] == 5
    assert now["succeeded"] - before["succeeded"] == 4
    assert now["failed"] - before["failed"] == 1
    assert now["rows"] - before["rows"] == 4 * ROWS  # the failed run committed nothing
    assert now["fragments"] - before["fragments"] == 12
    assert now["running"] == before["running"]


def test_metrics_are_served_only_when_asked(observed: Observed) -> None:
    assert not [t for t in threading.enumerate() if t.name == "omnitable-metrics"]
    with metrics.serve(0) as server:
        assert server.host == "127.0.0.1"
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = response.read().decode()
    assert "# TYPE omnitable_runs_started_total counter" in body
    assert 'omnitable_runs_succeeded_total{kind="backfill"}' in body
    rows = next(line for line in body.splitlines() if line.startswith("omnitable_backfill_rows"))
    assert float(rows.split()[1]) >= 4 * ROWS
    assert 'omnitable_runs_failed_total{kind="backfill",status="failed"}' in body
    assert not [t for t in threading.enumerate() if t.name == "omnitable-metrics"]
    with pytest.raises(omnitable.ValidationError, match="port"):
        metrics.serve(70000)


def test_metrics_push_to_a_gateway() -> None:
    received: list[tuple[str, str, bytes]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, self.headers["Content-Type"], body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        metrics.push(f"http://127.0.0.1:{server.server_address[1]}", job="trainer 1")
    finally:
        server.shutdown()
        server.server_close()
    ((path, ctype, body),) = received
    assert path == "/metrics/job/trainer%201" and ctype.startswith("text/plain")
    assert body.decode() == metrics.render()
    with pytest.raises(omnitable.ValidationError, match="http"):
        metrics.push("ftp://gateway")


def test_cli_backfill_reports_its_steps_and_run(observed: Observed) -> None:
    assert observed.results["cli"] == 0
    assert "step 1: from_cli@1 — 3 fragments, 3000 rows" in observed.cli_out
    cli_run = observed.table.runs(status="succeeded", limit=1)[0]
    assert f"run {cli_run['run_id']} committed" in observed.cli_out


def test_run_filters_on_every_catalog(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("filters", {"x": "int"})
    stream = io.StringIO()
    handler = omnitable.configure_logging(json=True, stream=stream)
    try:
        t.append(pa.table({"x": [1]}), "b1")
    finally:
        logging.getLogger("omnitable").removeHandler(handler)
        logging.getLogger("omnitable").setLevel(logging.NOTSET)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    (ingest,) = t.runs()
    assert lines and all(x["run_id"] == ingest["run_id"] for x in lines)  # ingest logs too
    assert {x["kind"] for x in lines} == {"ingest"} and {x["table"] for x in lines} == {"filters"}
    with pytest.raises(RuntimeError, match="boom"), RunScope(wh.catalog, t.record, "backfill"):
        raise RuntimeError("boom")
    t.append(pa.table({"x": [2]}), "b2")
    ingests = [r["run_id"] for r in t.runs() if r["kind"] == "ingest"]
    assert [r["run_id"] for r in t.runs(status="succeeded")] == ingests
    assert [r["run_id"] for r in t.runs(status="succeeded", limit=1)] == ingests[:1]
    (failed,) = wh.runs(status="failed")
    assert failed["message"] == "boom" and failed["table"] == "filters"
    assert [r["kind"] for r in wh.runs(limit=2)] == ["ingest", "backfill"]
    assert wh.runs(status="abandoned") == [] and t.runs(status="aborted") == []
    assert wh.run(failed["run_id"])["table"] == "filters"


def test_log_format_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("omnitable")
    monkeypatch.setenv("OMNITABLE_LOG_FORMAT", "yaml")
    with pytest.raises(omnitable.ValidationError, match="json or text"):
        configure_from_environment()
    monkeypatch.setenv("OMNITABLE_LOG_FORMAT", "text")
    handler = configure_from_environment()
    try:
        assert handler is not None and handler in logger.handlers
        stream = io.StringIO()
        assert omnitable.configure_logging(stream=stream, level="DEBUG") in logger.handlers
        assert handler not in logger.handlers  # replaced, not added
        with run_context("backfill-x", "backfill", "docs"):
            logging.getLogger("omnitable.test").debug("inside")
        logging.getLogger("omnitable.test").debug("outside")
        inside, outside = stream.getvalue().splitlines()
        assert inside.endswith("[run=backfill-x table=docs] inside")
        assert outside.endswith("[run=None table=None] outside")
    finally:
        for h in [h for h in logger.handlers if getattr(h, "_omnitable_configured", False)]:
            logger.removeHandler(h)
        logger.setLevel(logging.NOTSET)
    monkeypatch.delenv("OMNITABLE_LOG_FORMAT")
    assert configure_from_environment() is None
