"""``omnitable namespace create|list|drop`` and ``ns.table`` wherever the CLI takes a table."""

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


def test_namespace_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = str(tmp_path / "wh")
    assert _run(capsys, "-w", wh, "namespace", "create", "ns", "--comment", "crawl")[0] == 0
    code, _, err = _run(capsys, "-w", wh, "namespace", "create", "ns")
    assert code == 1 and "namespace 'ns': it already exists" in err
    assert _run(capsys, "-w", wh, "namespace", "create", "ns", "--if-not-exists")[0] == 0
    with omnitable.connect(wh) as w:
        assert w.catalog.namespace_properties("ns") == {"comment": "crawl"}
        w.create_table("ns.web", {"x": "bigint"}).append(pa.table({"x": [1, 2]}), "a")
        w.create_table("web", {"x": "bigint"})
    code, out, _ = _run(capsys, "--json", "-w", wh, "namespace", "list")
    assert json.loads(out) == [
        {"namespace": "default", "tables": 1},
        {"namespace": "ns", "tables": 1},
    ]
    code, out, _ = _run(capsys, "--json", "-w", wh, "tables", "--namespace", "ns")
    assert [(r["table"], r["rows"]) for r in json.loads(out)] == [("ns.web", 2)]
    code, out, _ = _run(capsys, "--json", "-w", wh, "tables")
    assert sorted(r["table"] for r in json.loads(out)) == ["ns.web", "web"]
    code, out, _ = _run(capsys, "-w", wh, "show", "ns.web")
    assert code == 0 and "ns.web" in out
    code, out, _ = _run(capsys, "--json", "-w", wh, "history", "ns.web")
    assert code == 0 and len(json.loads(out)) == 2
    code, _, err = _run(capsys, "-w", wh, "namespace", "drop", "ns")
    assert code == 2 and "holds tables (ns.web)" in err
    code, _, err = _run(capsys, "-w", wh, "show", "nope.web")
    assert code == 3 and "namespace 'nope' does not exist" in err
    code, _, err = _run(capsys, "-w", wh, "namespace", "create", "a.b")
    assert code == 2 and "Cannot use namespace name" in err
    code, out, _ = _run(capsys, "--json", "-w", wh, "namespace", "drop", "ns", "--cascade")
    assert code == 0 and json.loads(out) == {"namespace": "ns", "dropped_tables": ["ns.web"]}
    code, out, _ = _run(capsys, "-w", wh, "namespace", "list")
    assert code == 0 and "default" in out and "ns" not in out.replace("Namespaces", "")
