"""Named fault-injection points for crash tests (test instrumentation, inert by default).

``OMNITABLE_FAILPOINTS="commit.mid_insert=exit"`` makes the process exit abruptly (``os._exit``)
when it reaches that point; ``=sleep:30`` pauses there (so a test can SIGKILL it); ``=raise``
raises ``RuntimeError``; ``=disconnect`` raises the error SQLAlchemy raises when the database
connection is lost (``OperationalError`` with ``connection_invalidated``); ``=pause:DIR`` makes
the FIRST thread reaching the point create ``DIR/<point>.reached`` and wait (up to 120 s) until
``DIR/<point>.go`` exists, while later arrivals pass (so a test can interleave two writers).
Several entries are separated by commas. Unset, every point is a no-op.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

_pause_lock = threading.Lock()


def failpoint(name: str) -> None:
    spec = os.environ.get("OMNITABLE_FAILPOINTS")
    if not spec:
        return
    for entry in spec.split(","):
        point, _, action = entry.strip().partition("=")
        if point != name:
            continue
        if action == "exit":
            sys.stderr.write(f"failpoint {name}: exiting\n")
            sys.stderr.flush()
            os._exit(77)
        if action.startswith("sleep:"):
            sys.stderr.write(f"failpoint {name}: sleeping\n")
            sys.stderr.flush()
            time.sleep(float(action.split(":", 1)[1]))
        elif action.startswith("pause:"):
            _pause(name, Path(action.split(":", 1)[1]))
        elif action == "raise":
            raise RuntimeError(f"failpoint {name}")
        elif action == "disconnect":
            from sqlalchemy.exc import OperationalError

            raise OperationalError(
                "COMMIT",
                None,
                ConnectionResetError(f"failpoint {name}: server closed the connection"),
                connection_invalidated=True,
            )


def _pause(name: str, folder: Path) -> None:
    reached, go = folder / f"{name}.reached", folder / f"{name}.go"
    with _pause_lock:
        if reached.exists():
            return
        reached.touch()
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
