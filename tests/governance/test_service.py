"""The governance service (governance/service.py, catalog/lease.py) on SQLite and PostgreSQL: two
services never run the same job at once, a job whose lease was taken commits nothing, a service
killed mid-execute is taken over once its lease expires (its files are orphans), a table dropped
while governed, intervals, and the CLI's service mode."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import omnitable
from omnitable._failpoints import hooked
from omnitable.catalog.lease import acquire, holder, lease_key
from omnitable.cli.main import main
from omnitable.exceptions import ValidationError
from omnitable.governance.job import run_job
from omnitable.governance.orphans import OrphanJob
from omnitable.governance.service import JobReport, parse_interval

from .conftest import decayed_table, table_files

pytestmark = pytest.mark.shared_warehouse


def _in_thread(fn: Any) -> Any:
    out: list[Any] = []
    th = threading.Thread(target=lambda: out.append(fn()))
    th.start()
    th.join()
    return out[0]


def test_parse_interval() -> None:
    assert [parse_interval(v) for v in ("30s", "10m", "1h", "1.5h", "2d", "45", 0.5)] == [
        30,
        600,
        3600,
        5400,
        172800,
        45,
        0.5,
    ]
    for bad in ("10x", "", "m", "-1s", "0m", True):
        with pytest.raises(ValidationError, match="interval"):
            parse_interval(bad)  # type: ignore[arg-type]


def test_two_services_never_run_the_same_job(wh: omnitable.Warehouse, name: str) -> None:
    """While A executes compact under its lease, B (another thread) is refused that job but
    runs another one; A commits, releases, and B's next round finds nothing to do."""
    t = decayed_table(wh, name, deletes=False)
    a = t.governor(["compact"], interval="1s", rounds=1, owner="A")
    b = t.governor(["compact", "fold"], interval="1s", rounds=1, owner="B")
    seen: list[tuple[JobReport, ...]] = []
    with hooked("governance.after_file", lambda: seen.append(_in_thread(b.run_round).jobs)):
        (ra,) = a.run()
    (got,) = seen
    assert [(j.job, j.outcome, j.holder) for j in got] == [
        ("compact", "leased", "A"),
        ("fold", "nothing_to_do", None),
    ]
    assert (ra.jobs[0].outcome, ra.jobs[0].version) == ("committed", t.version)
    assert holder(wh.catalog.store, t.record.table_id, "compact") is None  # released
    assert b.run_one("compact").outcome == "nothing_to_do"
    assert t.read().column("x").to_pylist() == list(range(12))


def test_a_job_whose_lease_was_taken_commits_nothing(wh: omnitable.Warehouse, name: str) -> None:
    """A's lease expires (forced) and B takes it mid-execute: A's commit is refused inside its
    transaction, its files are removed; then B runs the job."""
    t = decayed_table(wh, name, deletes=False)
    store, key = wh.catalog.store, lease_key(t.record.table_id, "compact")
    files, version = table_files(t), t.version
    a = t.governor(["compact"], interval="1s", owner="A", ttl_s=30)

    def expire_and_take() -> None:
        with store.write() as conn:
            raw = json.loads(conn.execute(text("SELECT value FROM omnitable_meta WHERE key = :k"),
                                          {"k": key}).scalar_one())  # fmt: skip
            raw["expires"] = 0
            conn.execute(text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
                         {"k": key, "v": json.dumps(raw)})  # fmt: skip
        assert not isinstance(acquire(store, t.record.table_id, "compact", "B", 30), type(None))

    with hooked("governance.before_commit", expire_and_take):
        report = a.run_one("compact")
    assert report.outcome == "lease_lost" and "held by 'B'" in (report.error or "")
    assert t.version == version and table_files(t) == files
    assert holder(store, t.record.table_id, "compact").owner == "B"  # type: ignore[union-attr]
    b = t.governor(["compact"], interval="1s", owner="B", ttl_s=30)
    assert b.run_one("compact").outcome == "committed"
    assert t.read().column("x").to_pylist() == list(range(12))


CHILD = """
import sys, omnitable
wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
wh.table(sys.argv[3]).governor(["compact"], interval=1, rounds=1, ttl_s=1, owner="dead").run()
"""


def test_a_service_killed_mid_execute_is_taken_over(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], name: str
) -> None:
    t = decayed_table(wh, name, deletes=False)
    files, version, rows = table_files(t), t.version, t.read().to_pylist()
    uri, root = catalog_spec
    env = dict(os.environ, OMNITABLE_FAILPOINTS="governance.after_file=sleep:120",
               PYTHONPATH=os.pathsep.join(sys.path))  # fmt: skip
    with subprocess.Popen([sys.executable, "-c", CHILD, uri, root or "", name], env=env,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if "failpoint governance.after_file: sleeping" in line:
                    break
        finally:
            proc.kill()
    store = wh.catalog.store
    assert holder(store, t.record.table_id, "compact").owner == "dead"  # type: ignore[union-attr]
    assert t.version == version and t.read().to_pylist() == rows  # the old layout serves
    orphans = table_files(t) - files
    assert len(orphans) == 1
    b = t.governor(["compact"], interval="1s", owner="B", ttl_s=30)
    assert b.run_one("compact").outcome == "leased"  # until the dead lease expires (1 s)
    time.sleep(1.1)
    assert b.run_one("compact").outcome == "committed"
    assert t.read().to_pylist() == rows
    cleaned = run_job(t._ctx, OrphanJob(min_age_s=0))
    assert cleaned.summary["files_deleted"] == 1 and not orphans & table_files(t)


def test_a_table_dropped_while_governed(wh: omnitable.Warehouse, name: str) -> None:
    """The job in flight commits nothing and removes its files; the service reports the drop
    and stops governing the table."""
    t = decayed_table(wh, name, deletes=False)
    service = t.governor(["compact", "fold"], interval=0.01, rounds=5, owner="A")
    with hooked("governance.after_file", lambda: wh.drop_table(name)):
        reports = service.run()
    (only,) = reports
    (job,) = only.jobs
    assert only.dropped and job.outcome == "dropped" and job.version is None
    assert f"'{name}' was dropped" in (job.error or "")
    assert table_files(t) == set()
    with pytest.raises(omnitable.NotFoundError):
        wh.table(name)


def test_service_arguments_are_validated(wh: omnitable.Warehouse, name: str) -> None:
    t = decayed_table(wh, name, deletes=False)
    for kwargs, match in [
        ({"jobs": ["vacuum"]}, "known jobs"),
        ({"jobs": []}, "non-empty"),
        ({"interval": "soon"}, "interval"),
        ({"rounds": 0}, "rounds"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"options": {"fold": {}}}, "not run"),
    ]:
        args: dict[str, Any] = {"jobs": ["compact"], "interval": "1m", **kwargs}
        with pytest.raises(ValidationError, match=match):
            t.governor(args.pop("jobs"), **args)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_service_rounds_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        decayed_table(wh, "docs", deletes=False)
    code, out, err = _cli(capsys, "--json", "-w", wh_dir, "govern", "docs", "--jobs",
                          "compact,fold", "--interval", "0.01s", "--rounds", "2")  # fmt: skip
    assert code == 0, err
    first, second = (json.loads(line) for line in out.splitlines())
    assert [j["outcome"] for j in first["jobs"]] == ["committed", "nothing_to_do"]
    assert [j["outcome"] for j in second["jobs"]] == ["nothing_to_do", "nothing_to_do"]
    assert "round 1: compact: committed" in err and "governing docs every 0.01s" in err
    for args, match in [
        (["--rounds", "2"], "needs --interval"),
        (["--interval", "10x"], "Invalid interval"),
        (["--interval", "1m", "--dry-run"], "without --interval"),
    ]:
        code, _, err = _cli(capsys, "-w", wh_dir, "govern", "docs", *args)
        assert code == 2 and match in err


SERVE = """
import sys
from omnitable.cli.main import main
sys.exit(main(["-w", sys.argv[1], "govern", "docs", "--interval", "1h"]))
"""


def test_cli_service_stops_on_sigterm(tmp_path: Path) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        decayed_table(wh, "docs", deletes=False)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), COLUMNS="200")
    with subprocess.Popen([sys.executable, "-c", SERVE, wh_dir], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "round 1 done" in line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(lines) + proc.stdout.read()
    assert any("compact: committed" in line for line in lines)
    with omnitable.connect(wh_dir) as wh:
        assert holder(wh.catalog.store, wh.table("docs").record.table_id, "compact") is None
