"""Named fault-injection points for crash tests (test instrumentation, inert by default).

``OMNITABLE_FAILPOINTS="commit.mid_insert=exit"`` makes the process exit abruptly (``os._exit``)
when it reaches that point; ``=sleep:30`` pauses there (so a test can SIGKILL it); ``=raise``
raises ``RuntimeError``; ``=disconnect`` raises the error SQLAlchemy raises when the database
connection is lost (``OperationalError`` with ``connection_invalidated``); ``=pause:DIR`` makes
the FIRST thread reaching the point create ``DIR/<point>.reached`` and wait until
``DIR/<point>.go`` exists, while later arrivals pass (so a test can interleave two writers). A
pause nobody releases within 120 s raises ``FailpointTimeout`` in the paused thread (and says so
on stderr): a test that waits on the paused writer (e.g. for a lock it holds) fails loudly
instead of stalling two minutes.
Several entries are separated by commas. Unset, every point is a no-op.

In-process tests can also run a callback once at a point (:func:`hooked`): a deterministic way to
make a second writer commit between one operation's snapshot and its commit.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PAUSE_TIMEOUT_S = 120.0
_pause_lock = threading.Lock()


class FailpointTimeout(RuntimeError):
    """A ``pause:`` failpoint was not released (``<point>.go`` never appeared) in time."""


_hooks: dict[str, Callable[[], None]] = {}
_hooks_lock = threading.Lock()


@contextmanager
def hooked(name: str, fn: Callable[[], None]) -> Iterator[None]:
    """Run ``fn`` the first time any thread reaches failpoint ``name`` inside the block (once:
    ``fn`` may itself pass the same point)."""
    with _hooks_lock:
        _hooks[name] = fn
    try:
        yield
    finally:
        with _hooks_lock:
            _hooks.pop(name, None)


def failpoint(name: str) -> None:
    if _hooks:
        with _hooks_lock:
            fn = _hooks.pop(name, None)
        if fn is not None:
            fn()
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
    """Wait until ``folder/<name>.go`` exists; raise :class:`FailpointTimeout` after
    ``PAUSE_TIMEOUT_S`` (first arrival only; later ones pass at once)."""
    reached, go = folder / f"{name}.reached", folder / f"{name}.go"
    with _pause_lock:
        if reached.exists():
            return
        reached.touch()
    deadline = time.monotonic() + PAUSE_TIMEOUT_S
    while not go.exists():
        if time.monotonic() >= deadline:
            message = (
                f"failpoint {name}: paused {PAUSE_TIMEOUT_S:.0f} s and {go} never appeared "
                "(does the test wait on something the paused thread holds, e.g. a lock?)"
            )
            sys.stderr.write(message + "\n")
            sys.stderr.flush()
            raise FailpointTimeout(message)
        time.sleep(0.02)
