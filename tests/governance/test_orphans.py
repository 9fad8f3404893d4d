"""Removing orphan files (``OrphanJob`` through ``run_job``) on SQLite and PostgreSQL catalogs:
only files no catalog row can reference are deleted (never a removed row's file, a key index, a
pickled feature payload, an error table's file), never a file of a write still in flight (the
running-run rule), a killed write's files once old enough; bytes freed are reported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import ValidationError
from omnitable.format import access
from omnitable.governance.job import MaintenanceResult, run_job
from omnitable.governance.jobs import JOBS
from omnitable.governance.orphans import OrphanJob


def _x(*values: int) -> pa.Table:
    return pa.table({"x": pa.array(values, pa.int64())})


def _files(t: omnitable.Table) -> dict[str, int]:
    base = t.location.path.rstrip("/")
    sel = pafs.FileSelector(base, recursive=True, allow_not_found=True)
    return {
        i.path[len(base) + 1 :]: int(i.size or 0)
        for i in t.location.fs.get_file_info(sel)
        if i.type == pafs.FileType.File
    }


def _plant(t: omnitable.Table, rel: str, data: bytes = b"orphan") -> None:
    full = t.location.child_path(rel)
    t.location.fs.create_dir(full.rsplit("/", 1)[0], recursive=True)
    with t.location.fs.open_output_stream(full) as out:
        out.write(data)


def test_only_unreferenced_files_go(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("k", {"id": "string", "x": "bigint"}, key="id")
    t.upsert(pa.table({"id": ["a", "b"], "x": [1, 2]}), append_name="b0")  # a key index
    t.upsert(pa.table({"id": ["a"], "x": [3]}), append_name="b1")

    def double(x: pd.Series) -> pd.Series:  # defined here: pickled into _features/
        return x * 2

    t.register(omnitable.feature(inputs=["x"], outputs={"x2": "bigint"}, version="1")(double))
    t.create_branch("gone").upsert(pa.table({"id": ["c"], "x": [4]}), append_name="b2")
    t.delete_branch("gone")  # its rows move aside: its files stay referenced
    before = _files(t)
    assert any(p.startswith("_features/") for p in before)
    assert any(p.endswith("_key_index.arrow") for p in before)
    _plant(t, "data/stray-00000000/x-1.parquet", b"x" * 100)
    _plant(t, "_progress/old/0.json", b"{}")
    _plant(t, "errors/_delta_log/00.json", b"{}")  # the error table's own files
    rows = t.read(["id", "x"]).sort_by("id").to_pylist()
    access.flush()  # the read's access-log entry is on disk before the job lists files

    dry = run_job(t._ctx, OrphanJob(min_age_s=0), dry_run=True)
    assert sorted(a["path"] for a in dry.plan.actions) == [
        "_progress/old/0.json",
        "data/stray-00000000/x-1.parquet",
    ]
    assert dry.plan.summary["bytes"] == 102
    assert "data/stray-00000000/x-1.parquet" in _files(t)
    result = run_job(t._ctx, JOBS["orphans"](min_age_s=0))
    assert (result.outcome, result.version) == ("committed", None)
    assert result.summary == {"files_deleted": 2, "bytes_freed": 102, "kept": 0}
    after = _files(t)
    assert any(p.startswith("_access/") for p in after)  # the access log (the read) is kept
    kept = {p: n for p, n in after.items() if not p.startswith("_access/")}
    assert kept == {**before, "errors/_delta_log/00.json": 2}
    assert t.read(["id", "x"]).sort_by("id").to_pylist() == rows
    assert run_job(t._ctx, OrphanJob(min_age_s=0)).outcome == "nothing_to_do"


def test_the_window_keeps_young_files(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("w", {"x": "bigint"})
    t.append(_x(1), "a")
    _plant(t, "data/stray/f.parquet")
    plan = run_job(t._ctx, OrphanJob(), dry_run=True).plan  # default window: 3 days
    assert plan.empty and plan.summary["kept_young"] == 1
    assert plan.summary["min_age_s"] == 259_200
    with pytest.raises(ValidationError, match="min_age_s must be a number >= 0"):
        OrphanJob(min_age_s=-1)


def test_a_write_in_flight_keeps_its_files(wh: omnitable.Warehouse) -> None:
    """An append paused after writing its files (before its commit): a cleanup with window 0
    runs then; the append's run started before its files, so they are kept, and the append
    commits and reads back."""
    t = wh.create_table("f", {"x": "bigint"})
    t.append(_x(1), "a")
    seen: list[MaintenanceResult] = []
    written: list[set[str]] = []

    def cleanup() -> None:
        written.append(set(_files(t)))
        seen.append(run_job(t._ctx, OrphanJob(min_age_s=0)))

    with hooked("append.before_commit", cleanup):
        t.append(_x(2, 3), "b")
    assert seen[0].outcome == "nothing_to_do"
    assert seen[0].plan.summary["kept_young"] >= 1  # the in-flight append's files
    assert seen[0].plan.summary["oldest_running_run"] is not None
    assert written[0] <= set(_files(t))
    assert sorted(t.read(["x"]).column("x").to_pylist()) == [1, 2, 3]


def test_a_killed_write_is_cleaned_once_old_enough(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    """A process killed after writing its files (failpoint ``append.before_commit=exit``)
    leaves files no row references and an abandoned run: a young window keeps them, window 0
    deletes them; the table reads the same."""
    t = wh.create_table("kill", {"x": "bigint"})
    t.append(_x(1), "a")
    before = _files(t)
    script = textwrap.dedent(f"""
        import pyarrow as pa, omnitable
        wh = omnitable.connect({catalog_spec[0]!r}, root={catalog_spec[1]!r})
        wh.table("kill").append(pa.table({{"x": pa.array([2, 3], pa.int64())}}), "b")
    """)
    env = {**os.environ, "OMNITABLE_FAILPOINTS": "append.before_commit=exit"}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert proc.returncode == 77, proc.stderr
    left = {p: size for p, size in _files(t).items() if p not in before}
    assert left
    assert t.runs()[0]["status"] == "abandoned"
    assert run_job(t._ctx, OrphanJob(min_age_s=3600)).outcome == "nothing_to_do"
    result = run_job(t._ctx, OrphanJob(min_age_s=0))
    assert result.summary["files_deleted"] == len(left)
    assert result.summary["bytes_freed"] == sum(left.values())
    assert _files(t) == before
    assert t.read(["x"]).column("x").to_pylist() == [1]
