"""The engine of the governance procedures (``CALL <catalog>.system.compact(...)``, ``fold``,
``expire_versions``, ``remove_orphan_files``, ``maintain``; docs/spark.md "Procedures"): the JVM
runs ``python -m omnitable.cli.procedure`` on the Spark driver, so the jobs run exactly as
``Table.maintain`` runs them (Prepare -> Execute -> Commit, docs/governance.md).

- The warehouse is ``OMNITABLE_WAREHOUSE`` (the Spark catalog's own ``warehouse``): an ``env:NAME``
  password resolves from this process's environment; nothing is passed on argv.
- stdin holds one JSON request: ``{"table": str, "branch": str | null, "jobs": [str],
  "dry_run": bool, "options": {job: {option: value}}}``.
- stdout gets one JSON answer: ``{"results": [{"job", "outcome", "branch", "base_version",
  "version", "actions", "summary"}]}`` (summary values as text: strings as they are, others as JSON), or ``{"error": {"kind", "type", "message"}}`` with kind
  ``validation`` (bad arguments, nothing changed), ``not_found`` (no such table or branch),
  ``conflict`` or ``failed``. The exit status is 0 whenever an answer was written.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Mapping
from typing import Any

from omnitable.exceptions import CommitConflict, NotFoundError, OmniTableError, ValidationError
from omnitable.governance.job import MaintenanceResult
from omnitable.warehouse import connect

WAREHOUSE_ENV = "OMNITABLE_WAREHOUSE"


def _request(raw: Any) -> tuple[str, str | None, list[str], bool, dict[str, Any]]:
    """The checked fields of a request. Raises ValidationError."""
    if not isinstance(raw, Mapping):
        raise ValidationError("the procedure request must be a JSON object")
    table, branch, jobs = raw.get("table"), raw.get("branch"), raw.get("jobs")
    dry_run, options = raw.get("dry_run", False), raw.get("options") or {}
    if not isinstance(table, str) or not table:
        raise ValidationError(f"table must be a table name, got {table!r}")
    if branch is not None and (not isinstance(branch, str) or not branch):
        raise ValidationError(f"branch must be a branch name, got {branch!r}")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
        raise ValidationError(f"jobs must be a non-empty list of job names, got {jobs!r}")
    if not isinstance(dry_run, bool):
        raise ValidationError(f"dry_run must be true or false, got {dry_run!r}")
    if not isinstance(options, Mapping) or not all(
        isinstance(v, Mapping) for v in options.values()
    ):
        raise ValidationError(
            'options must map job names to objects of options, e.g. {"compact": '
            f'{{"min_fragments": 4}}}}, got {json.dumps(options, default=str)}'
        )
    return table, branch, jobs, dry_run, dict(options)


def _row(r: MaintenanceResult) -> dict[str, Any]:
    return {
        "job": r.job,
        "outcome": r.outcome,
        "branch": r.plan.branch,
        "base_version": r.plan.base_version,
        "version": r.version,
        "actions": len(r.plan.actions),
        "summary": {k: _text(v) for k, v in r.summary.items()},
    }


def _text(value: Any) -> str:
    """A summary value as the procedures' ``summary`` map holds it: a string as is, anything
    else as compact JSON."""
    return (
        value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
    )


def run(warehouse: str, raw: Any) -> dict[str, Any]:
    """The answer to request ``raw`` on ``warehouse`` (see the module docstring)."""
    try:
        table, branch, jobs, dry_run, options = _request(raw)
        with connect(warehouse) as wh:
            t = wh.table(table)
            if branch is not None and branch != "main":
                t = t.branch(branch)
            results = t.maintain(jobs, dry_run=dry_run, options=options)
        return {"results": [_row(r) for r in results]}
    except OmniTableError as exc:
        kind = (
            "validation" if isinstance(exc, ValidationError)
            else "not_found" if isinstance(exc, NotFoundError)
            else "conflict" if isinstance(exc, CommitConflict)
            else "failed"
        )  # fmt: skip
        return {"error": {"kind": kind, "type": type(exc).__name__, "message": str(exc)}}
    except Exception as exc:  # the job committed nothing: report it as the call's error
        traceback.print_exc()
        return {"error": {"kind": "failed", "type": type(exc).__name__, "message": str(exc)}}


def main() -> int:
    """Reads the request on stdin, writes the answer on stdout; 0 when an answer was written,
    2 when the warehouse or the request is missing or unreadable."""
    warehouse = os.environ.get(WAREHOUSE_ENV)
    if not warehouse:
        sys.stderr.write(f"{WAREHOUSE_ENV} is not set: it names the warehouse to govern\n")
        return 2
    try:
        raw = json.load(sys.stdin)
    except ValueError as exc:
        sys.stderr.write(f"the procedure request on stdin is not JSON: {exc}\n")
        return 2
    with contextlib.redirect_stdout(sys.stderr):  # whatever a job prints stays out of the answer
        answer = run(warehouse, raw)
    sys.stdout.write(json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
