"""A test's work in a forked child process, as a DataLoader worker runs (multiprocessing's
``fork`` context), with a hang or a failure of the child failing the test."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from typing import Any

FORK = multiprocessing.get_context("fork")
"""The context of the children (and of any queue they report through)."""


def start_forked(target: Callable[..., None], *args: Any) -> BaseProcess:
    """``target(*args)`` started in a forked daemon child."""
    child = FORK.Process(target=target, args=args, daemon=True)
    child.start()
    return child


def wait_forked(child: BaseProcess, timeout_s: float = 120) -> None:
    """Wait for ``child``; kill it and fail if it runs past ``timeout_s``, fail if it exited
    non-zero."""
    child.join(timeout_s)
    hung = child.is_alive()
    if hung:
        child.kill()
        child.join()
    assert not hung, f"the forked child hung (killed after {timeout_s} s)"
    assert child.exitcode == 0, f"the forked child failed (exit code {child.exitcode})"
