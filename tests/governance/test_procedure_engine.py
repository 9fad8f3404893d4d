"""The governance procedures' Python engine (cli/procedure.py, ``python -m
omnitable.cli.procedure``): a request is checked before anything runs, every error becomes an
answer the JVM maps to an ``OMNITABLE_*`` class, and the answer's rows say what
``Table.maintain`` returned (summary values as text). The CALLs: tests/spark/."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable._failpoints import hooked
from omnitable.catalog.lease import Holder, Lease, acquire, holder, lease_key, release
from omnitable.cli import procedure


def _error(wh: str, raw: Any) -> tuple[str, str]:
    err = procedure.run(wh, raw)["error"]
    return err["kind"], err["message"]


def test_requests_are_checked_and_errors_answered(tmp_path: Path) -> None:
    uri = str(tmp_path / "wh")
    with omnitable.connect(uri) as wh:
        t = wh.create_table("docs", {"x": "bigint"})
        t.append(pa.table({"x": list(range(6))}), "b0", target_fragment_rows=2)
    assert _error(uri, [1])[0] == "validation"
    assert _error(uri, {"table": "", "jobs": ["compact"]})[0] == "validation"
    assert _error(uri, {"table": "docs", "jobs": []})[0] == "validation"
    assert _error(uri, {"table": "docs", "jobs": ["compact"], "dry_run": "yes"})[0] == "validation"
    assert _error(uri, {"table": "docs", "jobs": ["compact"], "options": {"compact": 1}})[0] == (
        "validation"
    )
    kind, message = _error(uri, {"table": "docs", "jobs": ["compact"], "options": {"fold": {}}})
    assert kind == "validation" and "not run: fold" in message
    assert _error(uri, {"table": "nope", "jobs": ["compact"]}) == (
        "not_found",
        "Cannot find table 'nope'; existing tables: docs",
    )
    assert _error(uri, {"table": "docs", "branch": "nope", "jobs": ["compact"]})[0] == "not_found"

    answer = procedure.run(
        uri,
        {"table": "docs", "jobs": ["compact", "expire"], "options": {"expire": {"retain_last": 1}}},
    )
    compact, expire = answer["results"]
    assert (compact["job"], compact["outcome"], compact["version"]) == ("compact", "committed", 2)
    assert (compact["base_version"], compact["actions"], compact["branch"]) == (1, 1, "main")
    assert compact["summary"]["fragments_before"] == "3"
    assert expire["outcome"] == "committed" and expire["summary"]["horizons"] == '{"main":2}'


def test_main_reads_stdin_and_the_warehouse_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(procedure.WAREHOUSE_ENV, raising=False)
    assert procedure.main() == 2
    monkeypatch.setenv(procedure.WAREHOUSE_ENV, str(tmp_path / "wh"))
    monkeypatch.setattr("sys.stdin", io.StringIO("not json"))
    assert procedure.main() == 2
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"table": "t", "jobs": ["compact"]})))
    capsys.readouterr()
    assert procedure.main() == 0
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "not_found"


def test_jobs_run_under_their_lease_like_a_service(tmp_path: Path) -> None:
    """A held lease: the job is not run (``leased``, holder in the summary, nothing committed);
    a free one is taken and released; a lease taken mid-job commits nothing (``conflict``)."""
    uri = str(tmp_path / "wh")
    with omnitable.connect(uri) as wh:
        t = wh.create_table("docs", {"x": "bigint"})
        t.append(pa.table({"x": list(range(6))}), "b0", target_fragment_rows=2)
        store, tid = wh.catalog.store, t.record.table_id
        held = acquire(store, tid, "compact", "svc-A", 60)
        assert isinstance(held, Lease)
        version = t.version
        (row,) = procedure.run(uri, {"table": "docs", "jobs": ["compact"]})["results"]
        assert (row["outcome"], row["version"], row["actions"]) == ("leased", None, 0)
        assert (row["branch"], row["base_version"]) == ("main", version)
        assert row["summary"]["holder"] == "svc-A" and t.version == version
        release(store, held)

        taken: list[Lease | Holder] = []

        def take() -> None:  # ours expired and another owner took it, before the commit
            with store.write() as conn:
                conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"),
                             {"k": lease_key(tid, "compact")})  # fmt: skip
            taken.append(acquire(store, tid, "compact", "svc-B", 60))

        with hooked("governance.before_commit", take):
            kind, message = _error(uri, {"table": "docs", "jobs": ["compact"]})
        assert kind == "conflict" and "held by 'svc-B'" in message and t.version == version
        assert isinstance(taken[0], Lease) and release(store, taken[0])

        (row,) = procedure.run(uri, {"table": "docs", "jobs": ["compact"]})["results"]
        assert row["outcome"] == "committed" and t.version == version + 1
        assert holder(store, tid, "compact") is None  # released
