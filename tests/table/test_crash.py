"""Atomic visibility: a writer killed at any point of a commit leaves no visible partial state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest

import omnitable

WRITER = textwrap.dedent("""
    import sys, pyarrow as pa, omnitable
    wh = omnitable.connect(sys.argv[1], root=sys.argv[2] or None)
    t = wh.table("t")
    t.append(pa.table({"x": list(range(1000))}), "crashing", target_fragment_rows=100)
    print("committed", flush=True)
""")


def _spawn(catalog_spec: tuple[str, str | None], failpoints: str) -> subprocess.Popen[str]:
    uri, root = catalog_spec
    env = dict(os.environ, OMNITABLE_FAILPOINTS=failpoints, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, uri, root or ""],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _wait_for(proc: subprocess.Popen[str], marker: str, timeout: float = 120) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if marker in line:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"writer never reached {marker!r}: {seen}")


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("t", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2, 3]}), "before")
    return t


def _assert_untouched_and_writable(t: omnitable.Table) -> None:
    assert t.version == 1
    assert [b.name for b in t.batches()] == ["before"]
    assert t.read(columns=["x"]).column("x").to_pylist() == [1, 2, 3]
    assert [h.op for h in t.history()] == ["append", "create"]
    # the crashed writer's lock is gone: the next commit succeeds
    t.append(pa.table({"x": [4]}), "after")
    assert t.read(columns=["x"]).column("x").to_pylist() == [1, 2, 3, 4]


@pytest.mark.parametrize(
    "point", ["commit.before_insert", "commit.mid_insert", "commit.before_end"]
)
def test_writer_killed_inside_the_commit_transaction(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], point: str
) -> None:
    t = _table(wh)
    proc = _spawn(catalog_spec, f"{point}=sleep:300")
    try:
        _wait_for(proc, f"failpoint {point}: sleeping")
        # while the writer holds its transaction open, readers still see the old version
        assert t.read(columns=["x"]).column("x").to_pylist() == [1, 2, 3]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)
    _assert_untouched_and_writable(t)


def test_writer_exiting_abruptly_mid_commit(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    t = _table(wh)
    proc = _spawn(catalog_spec, "commit.mid_insert=exit")
    proc.communicate(timeout=120)
    assert proc.returncode == 77
    _assert_untouched_and_writable(t)


def test_failure_inside_commit_rolls_back(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None]
) -> None:
    t = _table(wh)
    proc = _spawn(catalog_spec, "commit.before_end=raise")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "failpoint commit.before_end" in err
    _assert_untouched_and_writable(t)
    failed = [r for r in _runs(wh) if r["status"] == "failed"]
    assert len(failed) == 1 and "failpoint" in failed[0]["message"]


def _runs(wh: omnitable.Warehouse) -> list[dict]:  # type: ignore[type-arg]
    from sqlalchemy import text

    with wh.catalog.store.read() as conn:
        return [dict(r._mapping) for r in conn.execute(text("SELECT * FROM runs"))]
