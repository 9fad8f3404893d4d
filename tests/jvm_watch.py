"""The test session's Spark JVM: its output kept in a file, and its death reported.

The shared session (tests/conftest.py ``spark``) lives in one JVM per test process. If that JVM
exits (the kernel's OOM killer, a heap ``OutOfMemoryError``, which local mode turns into
``System.exit(52)``, a native crash, or EOF on its stdin, which pyspark's gateway takes as
"the Python driver died"), every later Spark call of the process fails with py4j's
``ConnectionRefusedError``, which says nothing of why. This module keeps the JVM's stdout and
stderr in a file from its start, and turns its death into one clear failure: the test during
which it exited, its exit status and the end of its output, repeated by every later test that
uses Spark in that process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TAIL_BYTES = 6000


@contextlib.contextmanager
def output_to(path: Path) -> Iterator[None]:
    """File descriptors 1 and 2 of this process write to ``path`` inside the block, so that a
    process started in it (the session's JVM) keeps writing there after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    with path.open("ab") as log:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


def _status(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    known = {0: " (EOF on its stdin: pyspark's gateway exits so)", 52: " (Spark: OutOfMemoryError)"}
    return f"exit code {code}{known.get(code, '')}"


class JvmWatch:
    """Watches one JVM process (``Popen``) whose output goes to ``log``."""

    def __init__(self, proc: Any, log: Path, error_files: Path) -> None:
        self.proc, self.log, self.error_files = proc, log, error_files
        self.died: str | None = None

    def check(self, test: str) -> None:
        """Raise (``pytest.fail``) when the JVM has exited: first during ``test``, then again
        for every later check."""
        if self.died is None:
            code = self.proc.poll()
            if code is None:
                return
            self.died = (
                f"the test session's Spark JVM (pid {self.proc.pid}) {_status(code)}; "
                f"first seen after {test}.\n{self._evidence()}"
            )
        pytest.fail(self.died, pytrace=False)

    def _evidence(self) -> str:
        """The end of the JVM's output and the start of any fatal error log it wrote."""
        parts = []
        with contextlib.suppress(OSError), self.log.open("rb") as f:
            f.seek(max(0, self.log.stat().st_size - _TAIL_BYTES))
            parts.append(f"--- end of {self.log}:\n{f.read().decode('utf-8', 'replace')}")
        for path in sorted(self.error_files.glob("hs_err_*.log")):
            with contextlib.suppress(OSError), path.open("rb") as f:
                parts.append(f"--- {path}:\n{f.read(_TAIL_BYTES).decode('utf-8', 'replace')}")
        return "\n".join(parts)
