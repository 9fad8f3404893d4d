"""Crash escalation: where a record that kills the Python worker gets its child process.

A segfault, ``os._exit`` or an OOM kill in a pandas feature kills the Spark Python worker that
runs it in-process. Two ways lead to the supervised child process (docs/isolation.md):

* ``task-retry``: Spark retries the task (``spark.task.maxFailures`` >= 2, ``local[N,F]`` with
  F >= 2); the retry sees ``attemptNumber() > 0`` and runs the partition in the child.
* ``driver``: local mode without task retries (``local``, ``local[N]``, ``local[*]``: one
  attempt). Tasks record their progress next to the table (:class:`TaskProgress`); when the job
  fails from a dead Python worker, the driver keeps the files of the fragments that completed
  and re-runs the rest with the features that were being computed when the worker died in the
  child process.

On a cluster that does not retry tasks (``spark.task.maxFailures=1``) neither works: the run
starts with a warning (``none``). The session is read through public configuration only, so
this works on Spark Connect.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow.fs as pafs

from omnitable.format.fs import Location, resolve_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Strategy = Literal["task-retry", "driver", "none"]
_LOCAL = re.compile(r"local(?:\[\s*([^,\]]+?)\s*(?:,\s*(\d+)\s*)?\])?")
WORKER_DIED = "Python worker exited unexpectedly"


@dataclass(frozen=True)
class Escalation:
    """How this session escalates crashing records; ``warning`` is set for ``none``.

    ``driver_fallback``: the driver also re-runs what a dead worker left (local masters). A
    session's ``spark.master`` setting can differ from its running context's (a later
    ``SparkSession.builder.master(...).getOrCreate()`` sets it on the existing session), so in
    local mode the driver path stays armed even when the setting promises task retries: when
    Spark does retry, the retry escalates and the driver has nothing to do.
    """

    strategy: Strategy
    warning: str | None = None
    driver_fallback: bool = False


def crash_escalation(session: SparkSession) -> Escalation:
    """The crash escalation this session allows, from ``spark.master`` and
    ``spark.task.maxFailures`` (public configuration)."""
    master = str(session.conf.get("spark.master", None) or "").strip()
    local = _LOCAL.fullmatch(master)
    if local is not None:
        attempts = int(local.group(2)) if local.group(2) else 1
        return Escalation("task-retry" if attempts >= 2 else "driver", driver_fallback=True)
    raw = session.conf.get("spark.task.maxFailures", None)
    attempts = int(raw) if raw not in (None, "") else 4
    if attempts >= 2:
        return Escalation("task-retry")
    return Escalation(
        "none",
        f"Spark does not retry tasks here (spark.task.maxFailures={attempts}, master "
        f"{master or 'unknown'}): a record that crashes the Python worker (segfault, os._exit, "
        "OOM kill) fails the run instead of being isolated; set spark.task.maxFailures >= 2 "
        "(default 4) or run the features with isolation='subprocess'",
    )


def worker_died(exc: BaseException) -> bool:
    """Whether a failed Spark job's exception says a Python worker died."""
    return WORKER_DIED in str(exc)


class TaskProgress:
    """TaskProgress of one chunk's tasks, in a directory next to the table.

    Tasks mark each batch they compute in-process (a file removed when the call returns, so
    one left behind means the worker died during it) and each file they completed (its
    descriptor). Used in local mode (:attr:`Escalation.driver_fallback`).
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._loc: Location | None = None

    @property
    def location(self) -> Location:
        if self._loc is None:
            self._loc = resolve_location(self.uri)
        return self._loc

    @contextlib.contextmanager
    def batch(self, feature: str, fragment: str, start: int) -> Iterator[None]:
        """Mark a batch of ``feature`` as being computed for the duration of the block."""
        path = self._write("running", {"feature": feature, "fragment": fragment, "start": start})
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                self.location.fs.delete_file(path)

    def completed(self, descriptor: str) -> None:
        """Record a task output (its JSON descriptor) as written."""
        self._write("done", json.loads(descriptor))

    def read(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(descriptors of completed outputs, batches that were running when a worker died)."""
        return self._read("done"), self._read("running")

    def clear(self) -> None:
        with contextlib.suppress(OSError):
            self.location.fs.delete_dir(self.location.path)

    def _write(self, kind: str, doc: dict[str, Any]) -> str:
        folder = self.location.join(kind)
        self.location.fs.create_dir(folder.path, recursive=True)
        path = folder.child_path(f"{uuid.uuid4().hex}.json")
        with self.location.fs.open_output_stream(path) as out:
            out.write(json.dumps(doc).encode())
        return path

    def _read(self, kind: str) -> list[dict[str, Any]]:
        fs = self.location.fs
        selector = pafs.FileSelector(self.location.join(kind).path, allow_not_found=True)
        docs = []
        for info in fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            with contextlib.suppress(OSError, ValueError), fs.open_input_stream(info.path) as f:
                docs.append(json.loads(f.read()))
        return docs
