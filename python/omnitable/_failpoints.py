"""Named fault-injection points for crash tests (test instrumentation, inert by default).

``OMNITABLE_FAILPOINTS="commit.mid_insert=exit"`` makes the process exit abruptly (``os._exit``)
when it reaches that point; ``=sleep:30`` pauses there (so a test can SIGKILL it); ``=raise``
raises ``RuntimeError``. Several entries are separated by commas. Unset, every point is a no-op.
"""

from __future__ import annotations

import os
import sys
import time


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
        elif action == "raise":
            raise RuntimeError(f"failpoint {name}")
