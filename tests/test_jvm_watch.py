"""tests/jvm_watch.py: a process started in ``output_to`` writes to the file; a watched process
that died fails every later check with its exit status and the end of its output."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jvm_watch import JvmWatch, output_to


def _start(log: Path, code: str) -> subprocess.Popen[bytes]:
    with output_to(log):
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)


def test_a_process_started_in_the_block_keeps_writing_to_the_file(tmp_path: Path) -> None:
    log = tmp_path / "jvm.log"
    proc = _start(
        log, "import sys, time; sys.stdin.read(); print('out'); print('err', file=sys.stderr)"
    )
    print("after the block")  # this process's own output is its own again
    proc.communicate(b"")
    assert sorted(log.read_text().split()) == ["err", "out"]


def test_a_dead_process_fails_every_check_with_its_status_and_output(tmp_path: Path) -> None:
    log = tmp_path / "jvm.log"
    (tmp_path / "hs_err_1.log").write_text("# A fatal error has been detected")
    proc = _start(log, "import os, sys; print('last words', flush=True); sys.stdin.read()")
    watch = JvmWatch(proc, log, tmp_path)
    deadline = time.monotonic() + 60
    while "last words" not in log.read_text():
        assert time.monotonic() < deadline, "the child never wrote"
        time.sleep(0.01)
    watch.check("t::alive")  # running: nothing to say
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()
    for test in ("t::first", "t::later"):
        with pytest.raises(pytest.fail.Exception) as failed:
            watch.check(test)
        text = str(failed.value)
        assert "killed by SIGKILL; first seen after t::first" in text
        assert "last words" in text and "A fatal error has been detected" in text


def test_an_exit_on_eof_is_named(tmp_path: Path) -> None:
    proc = _start(tmp_path / "jvm.log", "import sys; sys.stdin.read()")
    proc.communicate(b"")
    with pytest.raises(pytest.fail.Exception, match="exit code 0 \\(EOF on its stdin"):
        JvmWatch(proc, tmp_path / "jvm.log", tmp_path).check("t::x")
