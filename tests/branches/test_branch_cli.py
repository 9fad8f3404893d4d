"""``omnitable branch create|list|delete`` and ``omnitable tag create|list|delete`` (text and
``--json``) through ``main()``, with the exit codes of bad names (2) and unknown refs (3)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.cli.main import main

from .common import base_table, batch, rows


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def wh_path(tmp_path: Path) -> str:
    path = str(tmp_path / "wh")
    with omnitable.connect(path) as wh:
        t = base_table(wh)  # v2 is the head
        t.append(batch("m", [50]), "m")  # v3
    return path


def test_branch_commands(wh_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "-w", wh_path, "branch", "create", "t", "exp")
    assert code == 0, err
    assert "Created branch 'exp' of 't' at version 3" in out
    code, out, err = _run(capsys, "--json", "-w", wh_path, "branch", "create", "t", "old",
                          "--from-version", "1")  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert (made["table"], made["name"], made["kind"], made["version"]) == ("t", "old", "branch", 1)
    assert (made["parent"], made["fork_version"]) == ("main", 1)
    code, out, err = _run(capsys, "-w", wh_path, "branch", "create", "t", "sub", "--from-branch",
                          "old")  # fmt: skip
    assert code == 0 and "at version 1" in out
    code, out, _ = _run(capsys, "--json", "-w", wh_path, "branch", "list", "t")
    listed = {r["name"]: r for r in json.loads(out)["branches"]}
    assert list(listed) == ["exp", "main", "old", "sub"]
    assert (listed["main"]["version"], listed["main"]["parent"]) == (3, None)
    assert listed["sub"]["fork_version"] == 1
    code, out, _ = _run(capsys, "-w", wh_path, "branch", "list", "t")
    assert code == 0 and "branches of t" in out and "exp" in out and "sub" in out
    code, _, err = _run(capsys, "-w", wh_path, "branch", "delete", "t", "sub")
    assert code == 0, err
    code, out, _ = _run(capsys, "--json", "-w", wh_path, "branch", "delete", "t", "exp")
    assert code == 0 and json.loads(out) == {"table": "t", "deleted": "exp", "kind": "branch"}
    with omnitable.connect(wh_path) as wh:
        t = wh.table("t")
        assert [r.name for r in t.branches()] == ["main", "old"]
        assert rows(t.branch("old")) == rows(t, version=1)


def test_tag_commands(wh_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "-w", wh_path, "tag", "create", "t", "v1", "--version", "1")
    assert code == 0 and "Tagged version 1 of 't' as 'v1'" in out, err
    assert _run(capsys, "-w", wh_path, "branch", "create", "t", "exp")[0] == 0
    code, out, err = _run(capsys, "--json", "-w", wh_path, "tag", "create", "t", "kept",
                          "--branch", "exp", "--max-age", "3600")  # fmt: skip
    assert code == 0, err
    made = json.loads(out)
    assert (made["kind"], made["version"], made["parent"], made["max_age_s"]) == (
        "tag",
        3,
        "main",
        3600,
    )  # fmt: skip  (exp's head is version 3, committed on main: a ref names that branch)
    assert made["expires_at"] is not None
    code, out, _ = _run(capsys, "--json", "-w", wh_path, "tag", "list", "t")
    tags = json.loads(out)["tags"]
    assert [(r["name"], r["version"], r["expires_at"] is None) for r in tags] == [
        ("kept", 3, False), ("v1", 1, True)
    ]  # fmt: skip
    code, out, _ = _run(capsys, "-w", wh_path, "tag", "list", "t")
    assert code == 0 and "tags of t" in out and "never" in out
    code, out, _ = _run(capsys, "-w", wh_path, "branch", "create", "t", "ft", "--from-tag", "v1")
    assert code == 0 and "at version 1" in out
    code, out, _ = _run(capsys, "--json", "-w", wh_path, "tag", "delete", "t", "v1")
    assert code == 0 and json.loads(out) == {"table": "t", "deleted": "v1", "kind": "tag"}
    code, out, _ = _run(capsys, "-w", wh_path, "tag", "delete", "t", "kept")
    assert code == 0 and "Deleted tag 'kept' of 't'" in out
    with omnitable.connect(wh_path) as wh:
        assert wh.table("t").tags() == []


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["branch", "create", "t", "a/b"], 2, "Invalid branch name 'a/b'"),
        (["branch", "create", "t", "123"], 2, "Invalid branch name"),
        (["tag", "create", "t", "x'y"], 2, "Invalid tag name"),
        (["branch", "delete", "t", "main"], 2, "Cannot delete branch 'main'"),
        (["branch", "create", "t", "x", "--from-tag", "v", "--from-version", "1"], 2, "from_tag"),
        (["tag", "create", "t", "x", "--max-age", "0"], 2, "max_age"),
        (["branch", "create", "t", "x", "--from-branch", "nope"], 3, "nope"),
        (["branch", "create", "t", "x", "--from-tag", "nope"], 3, "Cannot find tag 'nope'"),
        (["branch", "create", "t", "x", "--from-version", "99"], 3, "99"),
        (["branch", "delete", "t", "nope"], 3, "Cannot find branch 'nope'"),
        (["tag", "delete", "t", "nope"], 3, "Cannot find tag 'nope'"),
        (["tag", "create", "t", "x", "--branch", "nope"], 3, "nope"),
        (["branch", "list", "missing"], 3, "Cannot find table 'missing'"),
    ],
)
def test_errors_map_to_exit_codes(
    wh_path: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    got, _, err = _run(capsys, "-w", wh_path, *args)
    assert (got, message in err) == (code, True), err
    with omnitable.connect(wh_path) as wh:
        t = wh.table("t")
        assert [r.name for r in t.branches()] == ["main"] and t.tags() == []


def test_merge_and_rebase_commands(wh_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with omnitable.connect(wh_path) as wh:
        t = wh.table("t")
        exp = t.create_branch("exp")
        ids = [r["_ai_unique_id_"] for r in rows(t)]
        exp.update(pa.table({"_ai_unique_id_": [ids[0]], "s": ["branch"]}), columns=["s"])
        t.update(pa.table({"_ai_unique_id_": [ids[1]], "s": ["main"]}), columns=["s"])
    code, out, err = _run(capsys, "-w", wh_path, "branch", "merge", "t", "exp")
    assert code == 4, (out, err)  # the same (fragment, column) cell changed on both sides
    assert "conflict" in err and "strategy='ours'" in err
    code, out, err = _run(capsys, "--json", "-w", wh_path, "branch", "merge", "t", "exp",
                          "--strategy", "theirs")  # fmt: skip
    assert code == 0, err
    merged = json.loads(out)
    assert (merged["source"], merged["into"], merged["fast_forward"]) == ("exp", "main", False)
    assert [c["kind"] for c in merged["resolved"]] == ["cell"]
    with omnitable.connect(wh_path) as wh:
        t = wh.table("t")
        by_id = {r["_ai_unique_id_"]: r["s"] for r in rows(t)}
        assert by_id[ids[0]] == "branch" and by_id[ids[1]] == "s1"  # theirs: the source's cell
        t.append(batch("later", [77]), "later")
    code, out, err = _run(capsys, "-w", wh_path, "branch", "rebase", "t", "exp")
    assert code == 0, err
    assert "Merged 'main' into 'exp'" in out
    code, out, err = _run(capsys, "-w", wh_path, "branch", "merge", "t", "exp", "--into", "exp")
    assert code == 2 and "into itself" in err
    code, out, err = _run(capsys, "-w", wh_path, "branch", "merge", "t", "nope")
    assert code == 3 and "nope" in err
    with omnitable.connect(wh_path) as wh:
        assert 77 in [r["x"] for r in rows(wh.table("t").branch("exp"))]
