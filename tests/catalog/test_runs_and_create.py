"""Concurrent create_table of one name; runs whose driver died are reported abandoned."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable import _failpoints


def test_concurrent_create_table_of_one_name(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    point = "catalog.create_table"
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"{point}=pause:{tmp_path}")
    out: dict[str, Any] = {}

    def first() -> None:
        try:
            out["table"] = wh.create_table("t", {"x": "double"})
        except Exception as exc:
            out["error"] = exc

    thread = threading.Thread(target=first)
    thread.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / f"{point}.reached").exists():  # checked the name, not yet inserted
        assert thread.is_alive() and time.monotonic() < deadline, out
        time.sleep(0.02)
    # the first holds the namespace's lock (SQLite: the write lock; PostgreSQL: its row, FOR
    # UPDATE) until it commits: the second waits for it, then finds the name taken
    second = threading.Thread(target=lambda: out.update(second=_create(wh)))
    second.start()
    (tmp_path / f"{point}.go").touch()
    second.join(120)
    thread.join(120)
    outcomes = [out.get("table") or out.get("error"), out["second"]]
    assert sum(isinstance(o, omnitable.AlreadyExistsError) for o in outcomes) == 1, outcomes
    assert sum(isinstance(o, omnitable.Table) for o in outcomes) == 1, outcomes
    assert isinstance(out.get("table"), omnitable.Table), outcomes  # the first holder wins
    assert wh.tables() == ["t"]


def test_a_pause_nobody_releases_fails_loudly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A ``pause:`` failpoint whose ``.go`` never comes raises in the paused thread (a test
    waiting on the paused writer fails instead of silently going on after the timeout)."""
    monkeypatch.setattr(_failpoints, "PAUSE_TIMEOUT_S", 0.05)
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"p.stuck=pause:{tmp_path}")
    with pytest.raises(_failpoints.FailpointTimeout, match=r"p\.stuck\.go never appeared"):
        _failpoints.failpoint("p.stuck")
    assert "failpoint p.stuck: paused" in capfd.readouterr().err
    assert (tmp_path / "p.stuck.reached").exists()
    _failpoints.failpoint("p.stuck")  # later arrivals pass at once


def _create(wh: omnitable.Warehouse) -> Any:
    try:
        return wh.create_table("t", {"x": "double"})
    except omnitable.AlreadyExistsError as exc:
        return exc


DRIVER = textwrap.dedent("""
    import os, sys, omnitable
    wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
    print(wh.catalog.start_run(wh.table("t").record, "backfill"), flush=True)
    os._exit(0)  # the driver dies without finishing its run
""")


def test_run_whose_driver_died_is_abandoned(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    t = wh.create_table("t", {"x": "double"})
    uri, root = catalog_spec
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, uri, root or ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    dead = done.stdout.strip()
    alive = wh.catalog.start_run(t.record, "backfill")
    assert wh.catalog.get_run(dead)["status"] == "abandoned"
    assert wh.catalog.get_run(alive)["status"] == "running"
    listed = {r["run_id"]: r["status"] for r in wh.catalog.list_runs(t.record)}
    assert listed == {dead: "abandoned", alive: "running"}
    wh.catalog.finish_run(alive, "succeeded")
    assert wh.catalog.get_run(alive)["status"] == "succeeded"


def test_run_without_heartbeat_is_abandoned(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("t", {"x": "double"})
    run = wh.catalog.start_run(t.record, "backfill")
    from sqlalchemy import text

    with wh.catalog.store.write() as conn:  # a driver on another host that went silent
        conn.execute(
            text(
                "UPDATE runs SET host = 'elsewhere', heartbeat_at = '2000-01-01T00:00:00.000000Z' "
                "WHERE run_id = :r"
            ),
            {"r": run},
        )
    assert wh.catalog.get_run(run)["status"] == "abandoned"


APPENDER = textwrap.dedent("""
    import sys, pyarrow as pa, omnitable
    wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
    wh.table("t").append(pa.table({"x": [1.0, 2.0]}), "b")  # dies before its commit
""")


def test_table_runs_show_an_append_whose_process_died_as_abandoned(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    t = wh.create_table("t", {"x": "double"})
    t.append(pa.table({"x": [0.0]}), "first")
    uri, root = catalog_spec
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        OMNITABLE_FAILPOINTS="append.before_commit=exit",
    )
    died = subprocess.run(
        [sys.executable, "-c", APPENDER, uri, root or ""], env=env, timeout=120, check=False
    )
    assert died.returncode == 77
    runs = t.runs()
    assert [(r["kind"], r["status"]) for r in runs] == [
        ("ingest", "abandoned"),
        ("ingest", "succeeded"),
    ]
    assert runs[0]["plan"] == {"batch": "b"} and runs[0]["finished_at"] is None
    assert t.version == 1
