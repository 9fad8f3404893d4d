"""The engine of the governance procedures (``CALL <catalog>.system.compact(...)``, ``fold``,
``expire_versions``, ``remove_orphan_files``, ``maintain``; docs/spark.md "Procedures"): the JVM
runs ``python -m omnitable.cli.procedure`` on the Spark driver, so the jobs run exactly as
``Table.maintain`` runs them (Prepare -> Execute -> Commit, docs/governance.md).

- The warehouse is ``OMNITABLE_WAREHOUSE`` (the Spark catalog's own ``warehouse``): an ``env:NAME``
  password resolves from this process's environment; nothing is passed on argv.
- stdin holds one JSON request: ``{"table": str, "branch": str | null, "jobs": [str],
  "dry_run": bool, "options": {job: {option: value}}}``.
- stdout gets one JSON answer: ``{"results": [{"job", "outcome", "branch", "base_version",
  "version", "actions", "summary"}]}`` (summary values as text: strings as they are, others as
  JSON), or ``{"error": {"kind", "type", "message"}}`` with kind ``validation`` (bad arguments,
  nothing changed), ``not_found`` (no such table or branch), ``conflict`` (also a lost lease) or
  ``failed``. The exit status is 0 whenever an answer was written.
- Leases: each job that may commit runs under the job's catalog lease
  (``lease:<table_id>:<job>``, catalog/lease.py), taken, renewed and released as a governance
  service does (governance/service.py, ``GovernService.run_leased``), so a CALL and a service
  never run one job of a table at once. A job whose lease another owner holds is not run: its row
  has outcome ``leased``, ``version`` null, ``actions`` 0 and the holder in ``summary``
  (``holder``, ``expires``). Every commit re-checks the lease inside its transaction; a lost lease
  commits nothing and answers ``conflict`` (``LeaseLost``). A dry run commits nothing and takes
  no lease.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import sys
import traceback
import uuid
from collections.abc import Mapping
from typing import Any

from omnitable.catalog.lease import Holder, LeaseLost
from omnitable.exceptions import CommitConflict, NotFoundError, OmniTableError, ValidationError
from omnitable.governance.job import MaintenanceResult
from omnitable.table import Table
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


def _leased(job: str, t: Table, held: Holder) -> dict[str, Any]:
    """The row of a job not run because ``held`` holds its lease."""
    expires = dt.datetime.fromtimestamp(held.expires, dt.timezone.utc).isoformat()
    return {"job": job, "outcome": "leased", "branch": t.current_branch, "base_version": t.version,
            "version": None, "actions": 0,
            "summary": {"holder": held.owner, "expires": expires}}  # fmt: skip


def _maintain(t: Table, jobs: list[str], dry_run: bool, options: dict[str, Any]) -> list[Any]:
    """The rows of ``jobs`` run in order on ``t``, each under its lease unless a dry run."""
    if dry_run:
        return [_row(r) for r in t.maintain(jobs, dry_run=True, options=options)]
    owner = f"spark-call:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    service = t.governor(jobs, interval=1, rounds=1, options=options, owner=owner)
    rows = []
    for job in jobs:
        got = service.run_leased(job)
        rows.append(_leased(job, t, got) if isinstance(got, Holder) else _row(got))
    return rows


def run(warehouse: str, raw: Any) -> dict[str, Any]:
    """The answer to request ``raw`` on ``warehouse`` (see the module docstring)."""
    try:
        table, branch, jobs, dry_run, options = _request(raw)
        with connect(warehouse) as wh:
            t = wh.table(table)
            if branch is not None and branch != "main":
                t = t.branch(branch)
            rows = _maintain(t, jobs, dry_run, options)
        return {"results": rows}
    except OmniTableError as exc:
        kind = (
            "validation" if isinstance(exc, ValidationError)
            else "not_found" if isinstance(exc, NotFoundError)
            else "conflict" if isinstance(exc, CommitConflict | LeaseLost)
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
