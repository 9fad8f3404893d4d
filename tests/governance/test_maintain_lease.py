"""One-shot maintenance (``Table.maintain``, ``omnitable govern`` without ``--interval``) runs
each job under the same catalog lease a governance service takes (governance/service.py,
``maintain_once``), on SQLite and PostgreSQL: a held lease -> ``leased`` and nothing committed
while the other jobs run; a lease taken mid-job -> ``lease_lost`` and nothing committed; a free
lease is taken for the job and released after it; a dry run takes none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

import omnitable
from omnitable._failpoints import hooked
from omnitable.catalog.lease import Holder, acquire, holder, lease_key
from omnitable.cli.main import main

from .conftest import decayed_table, table_files

pytestmark = pytest.mark.shared_warehouse


def test_a_held_lease_is_reported_and_the_other_jobs_run(
    wh: omnitable.Warehouse, name: str
) -> None:
    t = decayed_table(wh, name)
    store, table_id = wh.catalog.store, t.record.table_id
    held = acquire(store, table_id, "fold", "service-A", 60)
    assert not isinstance(held, Holder)
    (dry,) = t.maintain(["fold"], dry_run=True)  # a dry run takes no lease
    assert dry.outcome == "dry_run" and not dry.plan.empty
    version = t.version
    compact, fold = t.maintain(["compact", "fold"])
    assert (compact.outcome, compact.version) == ("committed", version + 1)
    assert (fold.outcome, fold.version) == ("leased", None)
    assert fold.summary["holder"] == "service-A" and fold.summary["expires"]
    assert fold.plan.empty and fold.plan.base_version == version + 1
    assert t.version == version + 1  # the leased job committed nothing
    assert holder(store, table_id, "fold").owner == "service-A"  # type: ignore[union-attr]
    assert holder(store, table_id, "compact") is None  # ours was released
    assert t.read().column("x").to_pylist() == list(range(2, 12))


def test_a_lease_taken_mid_job_commits_nothing(wh: omnitable.Warehouse, name: str) -> None:
    t = decayed_table(wh, name)
    store, table_id = wh.catalog.store, t.record.table_id
    key = lease_key(table_id, "compact")
    files, version = table_files(t), t.version

    def expire_and_take() -> None:
        with store.write() as conn:
            raw = conn.execute(text("SELECT value FROM omnitable_meta WHERE key = :k"),
                               {"k": key}).scalar_one()  # fmt: skip
            doc = json.loads(raw)
            assert doc["owner"].startswith("maintain:")
            doc["expires"] = 0
            conn.execute(text("UPDATE omnitable_meta SET value = :v WHERE key = :k"),
                         {"k": key, "v": json.dumps(doc)})  # fmt: skip
        assert not isinstance(acquire(store, table_id, "compact", "service-B", 60), Holder)

    with hooked("governance.before_commit", expire_and_take):
        (result,) = t.maintain(["compact"], lease_ttl_s=30)
    assert (result.outcome, result.version) == ("lease_lost", None)
    assert "held by 'service-B'" in result.summary["error"]
    assert t.version == version and table_files(t) == files  # nothing committed, files removed
    assert holder(store, table_id, "compact").owner == "service-B"  # type: ignore[union-attr]
    (again,) = t.maintain(["compact"])
    assert again.outcome == "leased" and again.summary["holder"] == "service-B"
    assert t.read().column("x").to_pylist() == list(range(2, 12))


def test_a_free_lease_is_taken_for_the_job_and_released(wh: omnitable.Warehouse, name: str) -> None:
    t = decayed_table(wh, name)
    store, table_id = wh.catalog.store, t.record.table_id
    seen: list[str] = []

    def look() -> None:
        got = holder(store, table_id, "compact")
        seen.append(got.owner if got else "")

    with hooked("governance.before_commit", look):
        (result,) = t.maintain(["compact"], owner="nightly")
    assert result.outcome == "committed" and seen == ["nightly"]
    assert holder(store, table_id, "compact") is None
    b = t.governor(["compact"], interval="1s", owner="B")
    assert b.run_one("compact").outcome == "nothing_to_do"  # the service is not locked out


def test_cli_one_shot_reports_a_held_lease(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        t = decayed_table(wh, "docs")
        assert not isinstance(acquire(wh.catalog.store, t.record.table_id, "compact", "A", 60),
                              Holder)  # fmt: skip
        version = t.version
    code = main(["--json", "-w", wh_dir, "govern", "docs", "--jobs", "compact,fold",
                 "--lease-ttl", "20"])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    compact, fold = json.loads(out)
    assert (compact["outcome"], compact["summary"]["holder"]) == ("leased", "A")
    assert (fold["outcome"], fold["version"]) == ("committed", version + 1)
    code = main(["-w", wh_dir, "govern", "docs", "--lease-ttl", "-1"])
    assert code == 2 and "ttl_s must be a number > 0" in capsys.readouterr().err
