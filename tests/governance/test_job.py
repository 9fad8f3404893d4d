"""``run_job``: the Prepare -> Execute -> Commit driver every maintenance job shares (dry run,
empty plans, conflicts re-prepare and clean up, other errors clean up and propagate), on a real
table of SQLite and PostgreSQL catalogs (``wh``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import omnitable
from omnitable.catalog.commit import CommitRequest
from omnitable.exceptions import CommitConflict, ValidationError
from omnitable.governance.job import Executed, MaintenancePlan, MaintenanceResult, run_job


class WriteThenCommit:
    """A job that writes one file per attempt and commits an empty catalog commit, failing its
    first ``conflicts`` commits with a conflict (or with ``error`` once)."""

    name = "probe"

    def __init__(self, conflicts: int = 0, error: Exception | None = None, empty: bool = False):
        self.conflicts = conflicts
        self.error = error
        self.empty = empty
        self.prepared: list[int] = []
        self.written: list[str] = []

    def prepare(self, ctx):  # type: ignore[no-untyped-def]
        head = ctx.head_version()
        self.prepared.append(head)
        actions = () if self.empty else ({"write": f"probe-{len(self.prepared)}.bin"},)
        return MaintenancePlan(self.name, ctx.name, ctx.branch, head, actions, {"files": 1})

    def execute(self, ctx, plan):  # type: ignore[no-untyped-def]
        rel = plan.actions[0]["write"]
        with ctx.location.fs.open_output_stream(ctx.location.child_path(rel)) as out:
            out.write(b"x")
        self.written.append(rel)
        return Executed(paths=(rel,))

    def commit(self, ctx, plan, executed):  # type: ignore[no-untyped-def]
        if self.error is not None:
            raise self.error
        if self.conflicts:
            self.conflicts -= 1
            raise CommitConflict("a concurrent write touched the plan")
        version = ctx.commit(CommitRequest(op="maintain", base_version=plan.base_version))
        return MaintenanceResult(self.name, "committed", version, plan, {"files": 1})


@pytest.fixture
def table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("t", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2, 3]}), "b0")
    return t


def _exists(t: omnitable.Table, rel: str) -> bool:
    import pyarrow.fs as pafs

    info = t.location.fs.get_file_info(t.location.child_path(rel))
    return info.type != pafs.FileType.NotFound


def test_dry_run_only_prepares(table: omnitable.Table) -> None:
    job = WriteThenCommit()
    result = run_job(table._ctx, job, dry_run=True)
    assert (result.outcome, result.version, job.written) == ("dry_run", None, [])
    assert "probe t@main" in result.plan.describe()
    assert result.plan.to_dict()["actions"] == [{"write": "probe-1.bin"}]


def test_an_empty_plan_executes_nothing(table: omnitable.Table) -> None:
    job = WriteThenCommit(empty=True)
    result = run_job(table._ctx, job)
    assert (result.outcome, result.version, job.written) == ("nothing_to_do", None, [])


def test_a_conflict_removes_the_files_and_prepares_again(table: omnitable.Table) -> None:
    head = table.version
    job = WriteThenCommit(conflicts=1)
    result = run_job(table._ctx, job)
    assert result.outcome == "committed" and result.version == head + 1
    assert job.prepared == [head, head]
    assert not _exists(table, job.written[0]) and _exists(table, job.written[1])


def test_repeated_conflicts_skip_the_job(table: omnitable.Table) -> None:
    head = table.version
    job = WriteThenCommit(conflicts=5)
    result = run_job(table._ctx, job, attempts=2)
    assert (result.outcome, result.version) == ("skipped", None)
    assert "concurrent write" in result.summary["conflict"]
    assert not any(_exists(table, p) for p in job.written) and len(job.written) == 2
    assert table.version == head


def test_another_error_removes_the_files_and_propagates(table: omnitable.Table) -> None:
    job = WriteThenCommit(error=RuntimeError("disk full"))
    with pytest.raises(RuntimeError, match="disk full"):
        run_job(table._ctx, job)
    assert not _exists(table, job.written[0])


def test_attempts_must_be_positive(table: omnitable.Table) -> None:
    with pytest.raises(ValidationError, match="at least 1"):
        run_job(table._ctx, WriteThenCommit(), attempts=0)
