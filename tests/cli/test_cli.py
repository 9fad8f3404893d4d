from __future__ import annotations

import json
from pathlib import Path

import pytest

import omnitable
from omnitable.catalog.address import parse_address
from omnitable.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_builds_tables_and_reports_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wh = str(tmp_path / "wh")
    code, out, err = _run(capsys, "--json", "-w", wh, "demo", "--limit", "15", "--no-spark")
    assert code == 0, err
    result = json.loads(out)
    names = {t["name"]: t for t in result["tables"]}
    assert names["code"]["batches"] and sum(names["code"]["batches"].values()) == 45
    assert names["code"]["columns"] == 8
    assert "appended batch stdlib/a-f" in err  # progress and steps go to stderr in JSON mode
    # running it again rebuilds cleanly
    code, out, _ = _run(capsys, "--json", "-w", wh, "demo", "--limit", "5", "--no-spark")
    assert code == 0 and sum(json.loads(out)["tables"][0]["batches"].values()) == 15


def test_tables_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    assert _run(capsys, "-w", wh, "demo", "--limit", "3", "--no-spark")[0] == 0
    code, out, _ = _run(capsys, "--json", "-w", wh, "tables")
    assert code == 0
    assert {r["table"] for r in json.loads(out)} >= {"code"}
    code, out, _ = _run(capsys, "-w", wh, "show", "code")
    assert code == 0
    assert "stdlib/a-f" in out and "add_columns" in out and "content" in out
    code, out, _ = _run(capsys, "--json", "-w", wh, "show", "code")
    info = json.loads(out)
    assert [c["name"] for c in info["columns"]][:3] == [
        "_ai_unique_id_",
        "_ai_append_name_",
        "path",
    ]


def test_errors_map_to_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "-w", str(tmp_path / "wh"), "show", "missing")
    assert code == 3 and "Cannot find table 'missing'" in err
    code, _, err = _run(capsys, "-w", "mysql://x/y", "tables")
    assert code == 2 and "unsupported scheme" in err
    code, _, err = _run(capsys, "-w", str(tmp_path / "wh"), "show", "bad/name")
    assert code == 2 and "table name" in err
    code, _, _ = _run(capsys, "nosuchcommand")
    assert code == 2


def test_empty_warehouse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "-w", str(tmp_path / "empty"), "tables")
    assert code == 0 and "No tables" in out


@pytest.mark.spark
def test_demo_with_features_backfill_and_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spark
) -> None:  # type: ignore[no-untyped-def]
    if not any(Path("/usr/share/doc").glob("*/copyright")):
        pytest.skip("the docs demo table needs Debian package documentation in /usr/share/doc")
    wh = str(tmp_path / "wh")
    code, out, err = _run(capsys, "--json", "-w", wh, "demo", "--limit", "8")
    assert code == 0, err
    findings = json.loads(out)["findings"]
    assert "fused x4" in findings["first_plan"]
    if "second_plan" in findings:  # this machine has Debian changelogs: only the new batch runs
        assert "reused" in findings["second_plan"]
        assert "debian/changelog (1 fragment: missing)" in findings["second_plan"]
    assert set(findings["status"]["quality"].values()) == {"done"}
    assert {r["batch"] for r in findings["sql"]} >= {"debian/copyright"}
    code, out, _ = _run(capsys, "-w", wh, "status", "docs")
    assert code == 0 and "quality" in out and "done" in out
    code, out, _ = _run(capsys, "-w", wh, "backfill", "docs", "-f", "quality", "--explain")
    assert code == 0 and "nothing to do" in out


@pytest.mark.postgres
def test_empty_warehouse_message_hides_a_literal_password(
    pg_databases: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = parse_address(pg_databases.create())  # type: ignore[attr-defined]
    password = str(base.connect_url().password)
    literal = base.url.set(password=password).render_as_string(False)
    omnitable.connect(literal, root=str(tmp_path / "data")).close()
    code, out, err = _run(capsys, "-w", literal, "tables")
    assert code == 0 and "No tables in" in out
    assert f":{password}@" not in out + err and ":***@" in out
