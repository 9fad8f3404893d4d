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


def test_govern_job_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        t = wh.create_table("docs", {"x": "bigint"})
        t.append(pa.table({"x": list(range(12))}), "b0", target_fragment_rows=2)
    args = ["--json", "-w", wh_dir, "govern", "docs"]
    code, out, err = _run(capsys, *args, "--option", "compact.target_fragment_rows=6")
    assert code == 0, err
    (compact,) = json.loads(out)
    assert compact["summary"]["fragments_after"] == 2
    for bad, says in [
        ("compact.target_fragment_rows", "give JOB.KEY=VALUE"),
        ("target_fragment_rows=6", "give JOB.KEY=VALUE"),
        ("fold.target_fragment_rows=6", "job 'fold' is not in --jobs 'compact'"),
        ("compact.no_such_option=1", "Invalid options for maintenance job 'compact'"),
    ]:
        code, _, err = _run(capsys, *args, "--option", bad)
        assert code == 2 and says in " ".join(err.split()), (bad, err)
    with omnitable.connect(wh_dir) as wh:
        assert wh.table("docs").batches()[0].fragments == 2


def test_access_log_and_views(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh_dir = str(tmp_path / "wh")
    with omnitable.connect(wh_dir) as wh:
        t = wh.create_table("docs", {"a": "bigint", "b": "bigint", "c": "bigint"})
        t.append(pa.table({"a": [1, 2], "b": [3, 4], "c": [5, 6]}), "b0")
        for _ in range(2):
            t.read(columns=["a", "b"])
        t.read(columns=["c"])
    code, out, err = _run(capsys, "--json", "-w", wh_dir, "access-log", "docs", "--since", "1d")
    assert code == 0, err
    assert [(s["columns"], s["count"]) for s in json.loads(out)] == [(["a", "b"], 2), (["c"], 1)]
    code, out, _ = _run(capsys, "-w", wh_dir, "access-log", "docs", "--limit", "1")
    assert code == 0 and "a, b" in out and "c" not in out.split("a, b")[1].split("\n")[0]
    code, _, err = _run(capsys, "-w", wh_dir, "access-log", "docs", "--since", "yesterday")
    assert code == 2 and "Invalid interval" in err
    code, out, err = _run(capsys, "-w", wh_dir, "view", "create", "docs", "hot", "--columns", "a,b")
    assert code == 0 and "govern docs --jobs views" in " ".join(out.split()), err
    code, out, _ = _run(capsys, "--json", "-w", wh_dir, "view", "list", "docs")
    assert [(v["name"], v["columns"]) for v in json.loads(out)] == [
        ("hot", ["_ai_unique_id_", "a", "b"])
    ]
    code, _, err = _run(capsys, "-w", wh_dir, "view", "create", "docs", "cold", "--columns", "zz")
    assert code == 2 and "zz" in err
    code, out, err = _run(capsys, "-w", wh_dir, "view", "drop", "docs", "hot")
    assert code == 0 and "Dropped view 'hot'" in out, err
    code, out, _ = _run(capsys, "-w", wh_dir, "view", "list", "docs")
    assert code == 0 and "has no views" in out
    code, _, err = _run(capsys, "-w", wh_dir, "view", "drop", "docs", "hot")
    assert code == 2 and "hot" in err
