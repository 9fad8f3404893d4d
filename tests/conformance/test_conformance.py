"""Commit conformance, Python implementation: every scenario of tests/conformance/scenarios/
run against the Python committer on SQLite and PostgreSQL (the ScalaTest ConformanceSuite runs
the same files against the JVM committer). The concurrent writer commits between the committing
writer's snapshot and its commit (failpoint ``append.before_commit``, ``delete.before_commit``,
``update.before_commit``, or ``rollback.before_commit`` / ``revert.before_commit`` for a rollback
/ revert, ``merge.before_commit`` for a ``merge_branch``, ``upsert.before_commit`` for an ``upsert`` into a
keyed table, ``backfill.before_commit`` for a
``backfill``: after it computed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.dataops.delete import delete_rows
from omnitable.dataops.upsert import upsert_rows
from omnitable.exceptions import (
    AlreadyExistsError,
    CommitConflict,
    NotFoundError,
    ValidationError,
)


def _steps() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "conformance_steps", Path(__file__).with_name("steps.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


steps = _steps()
OUTCOMES = {
    "conflict": CommitConflict,
    "not_found": NotFoundError,
    "exists": AlreadyExistsError,
    "invalid": ValidationError,
}


def run_python(wh: omnitable.Warehouse, scenario: dict[str, Any]) -> dict[str, Any]:
    """The committing writer through the Python API; its outcome as ``expect`` spells it. The
    ``around`` steps (a backfill) start first and commit after it: the committing writer runs
    when the backfill reaches its commit (failpoint ``backfill.before_commit``)."""
    base_next = steps.prepare(wh, scenario)
    outcome: dict[str, Any] = {}

    def commit_now() -> None:
        outcome.update(_commit(wh, scenario, base_next))

    if "around" not in scenario:
        return _commit(wh, scenario, base_next)
    with hooked("backfill.before_commit", commit_now):
        steps.run_around(wh, scenario, base_next)
    assert outcome, "the around steps never reached backfill.before_commit"
    return outcome


def _commit(wh: omnitable.Warehouse, scenario: dict[str, Any], base_next: int) -> dict[str, Any]:
    commit = scenario["commit"]
    table = wh.table(steps.TABLE)

    def concurrent() -> None:
        for step in scenario["concurrent"]:
            steps.apply_step(wh, step, base_next)

    try:
        op = commit.get("op", "append")
        if op == "merge" and "insert" in commit:
            # the JVM's MERGE … WHEN NOT MATCHED THEN INSERT: its new batch under the append's
            # rules (the update of the matched row lands in the same commit, after them)
            ins = commit["insert"]
            with hooked("append.before_commit", concurrent):
                table.append(steps.rows(ins["batch"], ins["rows"]), ins["batch"])
            return {
                "version": table.update(steps.update_data(table, commit), columns=["score"]).version
            }
        if op == "merge":  # Python's reference for the JVM's MERGE INTO: delete or update
            op = "delete" if "url" not in commit else "update"
            commit = {"url": commit["delete_url"]} if op == "delete" else commit
        if op == "upsert":  # one attempt: the JVM's keyed MERGE cannot re-plan
            with hooked("upsert.before_commit", concurrent):
                upserted = upsert_rows(table._ctx, steps.upsert_data(commit), "last_write_wins",
                                       append_name=commit["batch"], attempts=1)  # fmt: skip
            return {"version": upserted.version}
        if op == "merge_branch":  # a three-way merge into main (re-plans when a branch moves)
            with hooked("merge.before_commit", concurrent):
                merged = table.merge(commit["source"], strategy=commit.get("strategy", "fail"))
            return {"version": merged.version}
        if op == "backfill":  # computed on the snapshot; the concurrent steps run at its commit
            from pyspark.sql import SparkSession

            spark = SparkSession.getActiveSession()
            assert spark is not None
            with hooked("backfill.before_commit", concurrent):
                return {"version": table.backfill([commit["feature"]]).run(spark).version}
        if op == "delete":
            # one attempt, as a Spark SQL DELETE (Table.delete retries on a conflict)
            with hooked("delete.before_commit", concurrent):
                result = delete_rows(table._ctx, steps.delete_where(commit), None, attempts=1)
            return {"version": result.version}
        if op == "update":
            data = steps.update_data(table, commit)
            with hooked("update.before_commit", concurrent):
                return {"version": table.update(data, columns=["score"]).version}
        if op == "rollback":
            with hooked("rollback.before_commit", concurrent):
                version = table.rollback(commit["to"])
        elif op == "revert":
            with hooked("revert.before_commit", concurrent):
                version = table.revert(
                    commit["version"], dependents=commit.get("dependents", "fail")
                )
        else:
            with hooked("append.before_commit", concurrent):
                data = steps.commit_rows(commit, base_next)
                version = table.append(data, commit["batch"], mode=commit.get("mode", "error"))
        return {"version": version}
    except (CommitConflict, NotFoundError, AlreadyExistsError, ValidationError) as exc:
        kind = next(k for k, cls in OUTCOMES.items() if isinstance(exc, cls))
        return {kind: str(exc)}


def _uses_spark(scenario: dict[str, Any]) -> bool:
    phases = ("base", "concurrent", "around")
    steps_ = [*(s for p in phases for s in scenario.get(p, [])), scenario["commit"]]
    return any(s.get("op") == "backfill" for s in steps_)


@pytest.mark.parametrize("name", steps.names())
def test_scenario(wh: omnitable.Warehouse, name: str, request: pytest.FixtureRequest) -> None:
    scenario = steps.load(name)
    if _uses_spark(scenario):
        request.getfixturevalue("spark")  # the backfill steps run on the shared session
    outcome = run_python(wh, scenario)
    expect = scenario["expect"]
    if "version" in expect:
        assert outcome == {"version": expect["version"]}
    else:
        (kind,) = [k for k in OUTCOMES if k in expect]
        assert kind in outcome, outcome
        assert expect[kind] in outcome[kind]
    after = steps.state(wh)
    assert after["batches"] == expect.get("batches")
    assert after["rows"] == expect.get("rows")
    if "status" in expect:
        assert after["status"] == expect["status"]
    if "columns" in expect:
        assert after["columns"] == expect["columns"]
    if "batch_order" in expect:
        assert after["batch_order"] == expect["batch_order"]


def test_every_scenario_says_what_it_expects() -> None:
    for name in steps.names():
        expect = steps.load(name)["expect"]
        assert len([k for k in ("version", *OUTCOMES) if k in expect]) == 1, name
        assert set(steps.load(name).get("around_expect", {})) <= {"conflict"}, name


def test_serve_answers_each_request_on_one_line_and_survives_errors(tmp_path: Path) -> None:
    """``steps.py serve`` (the JVM runners' one Python process): one JSON answer a line, a failed
    step answered with its traceback, and the process serves on."""
    wh = str(tmp_path / "wh")
    requests = [
        {"args": ["prepare", wh, "", "append_same_name"]},
        {"args": ["run", wh, "", json.dumps([{"op": "no_such_step"}])]},
        {"args": ["state", wh, ""]},
    ]
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("steps.py")), "serve"],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(answers) == 3, proc.stdout
    with omnitable.connect(wh) as warehouse:
        assert json.loads(answers[0]["out"]) == {"next_row_id": steps.next_row_id(warehouse)}
    assert "unknown step 'no_such_step'" in answers[1]["error"]
    assert json.loads(answers[2]["out"])["batches"] == ["b0"]
