"""``omnitable govern``: one pass of maintenance jobs from the command line (dry run, JSON,
unknown jobs)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_govern_dry_run_then_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        t = wh.create_table("docs", {"x": "bigint"})
        t.append(pa.table({"x": list(range(12))}), "b0", target_fragment_rows=3)
        version = t.version
    code, out, err = _run(capsys, "-w", wh_dir, "govern", "docs", "--dry-run")
    assert code == 0, err
    assert "compact docs@main" in out and '"batch": "b0"' in out and "dry_run" in out
    code, out, err = _run(
        capsys, "--json", "-w", wh_dir, "govern", "docs", "--jobs", "compact,fold"
    )
    assert code == 0, err
    compact, fold = json.loads(out)
    assert (compact["outcome"], compact["version"]) == ("committed", version + 1)
    assert (
        compact["summary"]["fragments_before"] == 4 and compact["summary"]["fragments_after"] == 1
    )
    assert fold["outcome"] == "nothing_to_do"
    with omnitable.connect(wh_dir) as wh:
        assert wh.table("docs").batches()[0].fragments == 1


def test_govern_unknown_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        wh.create_table("docs", {"x": "bigint"})
    code, _, err = _run(capsys, "-w", wh_dir, "govern", "docs", "--jobs", "vacuum")
    assert code == 2 and "known jobs: compact, " in err and "fold" in err


def test_govern_expire_and_orphans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        t = wh.create_table("docs", {"x": "bigint"})
        for i in range(3):
            t.append(pa.table({"x": [i]}), "b0", mode="replace")
        head = t.version
    code, out, err = _run(
        capsys, "--json", "-w", wh_dir, "govern", "docs", "--jobs", "expire,orphans",
        "--retain-last", "1", "--orphan-min-age", "0",
    )  # fmt: skip
    assert code == 0, err
    expire, orphans = json.loads(out)
    assert expire["outcome"] == "committed" and orphans["job"] == "orphans"
    with omnitable.connect(wh_dir) as wh:
        docs = wh.table("docs")
        assert docs.read().column("x").to_pylist() == [2]
        with pytest.raises(omnitable.NotFoundError, match="horizon"):
            docs.read(version=head - 1)
    code, out, err = _run(capsys, "--json", "-w", wh_dir, "history", "docs")
    assert code == 0, err
    assert {h["version"] for h in json.loads(out) if h["expired"]} == set(range(head))
    code, _, err = _run(capsys, "-w", wh_dir, "govern", "docs", "--older-than", "60")
    assert code == 2 and "expire" in err
