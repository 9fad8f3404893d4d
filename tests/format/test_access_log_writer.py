"""The access log is written off the read path (format/access.py): by one background thread per
process, a burst of scans in one file, every entry recorded before a read of the log in the same
process seen by it, and the entries still waiting written when the process (or a forked
DataLoader worker) exits."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from forking import start_forked, wait_forked
from omnitable.format import access
from omnitable.format.access import ACCESS_DIR, read_access, record_access
from omnitable.format.fs import Location, resolve_location

PYTHON_SRC = str(Path(__file__).resolve().parents[2] / "python")


def _record(loc: Location, n: int, table_id: str = "t") -> None:
    for i in range(n):
        assert record_access(loc, table_id=table_id, branch="main", version=i,
                             columns=[(1, "a"), (i % 3 + 2, f"c{i % 3}")])  # fmt: skip


def _files(loc: Location) -> list[Path]:
    return sorted((Path(loc.path) / ACCESS_DIR).glob("*.json"))


def test_a_read_of_the_log_sees_every_scan_recorded_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer lingers and each write is slow: a read of the log still waits for them."""
    loc = resolve_location(str(tmp_path))
    real = access._write

    def slow(*args: Any) -> None:
        time.sleep(0.2)
        real(*args)

    monkeypatch.setattr(access, "_write", slow)
    threads = [threading.Thread(target=_record, args=(loc, 25)) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    entries = read_access(loc)
    assert len(entries) == 100
    assert sorted(e.version for e in entries) == sorted(list(range(25)) * 4)
    assert {e.columns for e in entries} == {("a", "c0"), ("a", "c1"), ("a", "c2")}


def test_a_burst_of_scans_makes_one_file_per_table(tmp_path: Path) -> None:
    one, two = resolve_location(str(tmp_path / "one")), resolve_location(str(tmp_path / "two"))
    _record(one, 40, "one")
    _record(two, 3, "two")
    assert access.flush()
    assert len(_files(one)) == 1 and len(_files(two)) == 1  # within one linger
    assert len(read_access(one)) == 40 and {e.table_id for e in read_access(two)} == {"two"}
    lines = _files(one)[0].read_text().splitlines()
    assert len(lines) == 40


def test_recording_returns_before_the_entry_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loc = resolve_location(str(tmp_path))
    release = threading.Event()
    real = access._write

    def held(*args: Any) -> None:
        release.wait(30)
        real(*args)

    monkeypatch.setattr(access, "_write", held)
    _record(loc, 1)  # returns while the write is held (had it waited, the file would exist)
    assert not access.flush(timeout=0.3) and _files(loc) == []
    release.set()
    assert access.flush() and len(read_access(loc)) == 1


def test_the_entries_waiting_at_exit_are_written(tmp_path: Path) -> None:
    script = (
        f"import sys; sys.path.insert(0, {PYTHON_SRC!r})\n"
        "from omnitable.format.access import record_access\n"
        "from omnitable.format.fs import resolve_location\n"
        f"loc = resolve_location({str(tmp_path)!r})\n"
        "for i in range(3):\n"
        "    record_access(loc, table_id='t', branch='main', version=i, columns=[(1, 'a')])\n"
    )  # exits at once: the writer is still lingering
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    assert sorted(e.version for e in read_access(resolve_location(str(tmp_path)))) == [0, 1, 2]


def _record_in_child(path: str) -> None:
    _record(resolve_location(path), 2, "child")


def test_a_forked_worker_writes_its_own_entries_and_not_the_parents(tmp_path: Path) -> None:
    """A multiprocessing child ends by os._exit (no atexit): its finalizer writes its entries;
    the parent's entries waiting at the fork are written once, by the parent."""
    loc = resolve_location(str(tmp_path))
    _record(loc, 1, "parent")  # waiting (lingering) when the child is forked
    wait_forked(start_forked(_record_in_child, str(tmp_path)))
    tables = sorted(e.table_id for e in read_access(loc))
    assert tables == ["child", "child", "parent"]
