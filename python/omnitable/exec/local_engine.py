"""The ``python`` engine: backfill steps of pandas features computed without Spark.

With ``engine="python"`` (``omnitable backfill --engine python``), a step whose features are
all pandas features on CPU runs in this process and one child process, the local Python worker
(:mod:`omnitable.exec.local_worker`), instead of a Spark job: this process reads each fragment's
inputs with the table's own reader (:class:`~omnitable.format.reader.FragmentReader`, live rows
in fragment order) and the child computes and writes the column files with the same task code
Spark's Python workers run (:func:`omnitable.exec.task.compute_partition`). The commit, the
error log, the isolation of bad records and the escalation of a record that kills the worker
are the Spark path's. No JVM starts unless a step needs Spark; the parallelism comes from queue
workers (``--workers N``), one process each.

A step stays on Spark, with the reason in its routes (``explain()``, ``runs()``), when
:func:`local_reason` names one: an SQL or GPU-preferring feature, records to retry from the
error log, or an input whose type the two paths could hand to pandas differently (timestamps,
nested types).

Unreadable input follows ``on_corrupt`` as on Spark (docs/errors.md, "Unreadable input"): a
fragment whose column file cannot be opened or decoded is read again :data:`CORRUPT_RETRIES`
times, then skipped whole and reported (``skip``) or fails the run (``fail``); a missing file or
a permission error always fails it. A fragment is read whole before any of its rows is computed,
so corruption anywhere in it is found before its rows reach the worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import IO, TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from omnitable import exceptions
from omnitable.exceptions import CorruptInputError, OmniTableError, ValidationError
from omnitable.exec.escalation import WORKER_DIED
from omnitable.exec.local_worker import read_frame, write_frame
from omnitable.exec.task import FRAGMENT, OFFSET
from omnitable.format.fs import delete_quietly
from omnitable.format.reader import FragmentReader
from omnitable.vocabulary.deletions import decode_vector
from omnitable.vocabulary.names import ROW_ID

if TYPE_CHECKING:
    from omnitable.catalog.records import ColumnRecord, FragmentRecord
    from omnitable.catalog.snapshot import Snapshot
    from omnitable.context import TableContext
    from omnitable.features.planner import Step

log = logging.getLogger("omnitable.backfill")
CORRUPT_RETRIES = 2  # reads again of an unreadable fragment (the Spark reader's default)


class LocalWorkerDied(OmniTableError):
    """The local Python worker exited while computing (a segfault, ``os._exit``, an OOM kill);
    its message holds :data:`~omnitable.exec.escalation.WORKER_DIED`, as Spark's does, so the
    driver's crash escalation treats both alike."""


class LocalTaskError(OmniTableError):
    """An exception the task code raised in the local Python worker (its class is not one of
    OmniTable's errors; the message names it and holds the worker's traceback)."""


def local_reason(step: Step, columns: Iterable[ColumnRecord]) -> str | None:
    """Why ``step`` cannot run on the ``python`` engine (None: it can), given the table's
    visible columns."""
    types = {c.name: c.arrow_type for c in columns}
    sql = [f.id for f in step.features if f.kind != "pandas"]
    if sql:
        return f"SQL feature(s) {', '.join(sql)}: the step runs in the JVM"
    gpu = [f.id for f in step.features if f.prefer == "gpu"]
    if gpu:
        return f"{', '.join(gpu)} prefer(s) GPU: Spark schedules the GPU stage"
    if step.retry:
        return "records to retry: their offsets are read from the error log with Spark"
    wanted = {c for f in step.features for c in f.inputs}
    for name in sorted(wanted):
        t = types.get(name)
        if t is None or not _same_without_spark(t):
            return (
                f"input '{name}' is {t}: only numbers, booleans, strings, binary, dates and "
                "decimals reach pandas the same without Spark"
            )
    return None


def _same_without_spark(t: pa.DataType) -> bool:
    """Whether Spark's Arrow batches and the table's reader give pandas the same values of
    ``t`` (timestamps carry the session's time zone through Spark; nested types are left out)."""
    checks = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean,
              pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
              pa.types.is_large_binary, pa.types.is_date32, pa.types.is_decimal)  # fmt: skip
    return any(check(t) for check in checks)


def compute_locally(
    worker: LocalPythonWorker,
    ctx: TableContext,
    snap: Snapshot,
    step: Step,
    frag_ids: list[str],
    spec: str,
    on_corrupt: str,
    marked: bool,
) -> tuple[list[str], dict[str, Any]]:
    """Compute ``frag_ids`` of ``step`` (the work in ``spec``) in ``worker``, one fragment per
    request: (descriptors, scan metrics as the Spark path reports them: bytes read, scans,
    skipped unreadable fragments). A reply reporting a fatal error (a model that cannot load)
    ends it: no other fragment is sent.

    Raises:
        LocalWorkerDied: the worker exited. With ``marked`` (the chunk's progress marks, the
            crash escalation) the files it completed stay, for the driver to keep; else they
            are deleted, as on any other failure.
        CorruptInputError: an unreadable fragment with ``on_corrupt="fail"``.
        LocalTaskError, OmniTableError: what the task raised.
    """
    reader = FragmentReader(ctx.location, snap, strict_types=True)
    by_id = {f.fragment_id: f for f in snap.fragments}
    cols = [ROW_ID, *step.pandas_inputs]
    descriptors: list[str] = []
    corrupt: list[dict[str, Any]] = []
    try:
        for fid in frag_ids:
            rows = _read_fragment(reader, by_id[fid], cols, on_corrupt, corrupt)
            if rows is None:
                continue
            replies = worker.compute(spec, _task_input(snap, by_id[fid], rows, cols))
            descriptors += replies
            if any("fatal" in json.loads(d) for d in replies):
                break
    except BaseException as exc:
        if not (marked and isinstance(exc, LocalWorkerDied)):
            paths = [json.loads(d).get("file", {}).get("path") for d in descriptors]
            delete_quietly(ctx.location.fs, [ctx.location.child_path(p) for p in paths if p])
        raise
    scan = {"omnitableBytesRead": reader.bytes_read, "omnitableScans": 1}
    return descriptors, {**scan, "corruptFragments": corrupt}


def _task_input(snap: Snapshot, frag: FragmentRecord, rows: pa.Table, cols: list[str]) -> pa.Table:
    """A task's input for the fragment's live ``rows``: with the fragment id and each row's
    offset in the fragment, as the Spark path sends them."""
    fid = frag.fragment_id
    offsets = np.arange(frag.row_count, dtype=np.int64)
    dv = snap.deletion(fid)
    if dv is not None:
        deleted = decode_vector(dv.vector, frag.row_count, where=f"the vector of {fid}")
        offsets = offsets[~deleted]
    if len(offsets) != rows.num_rows:
        raise ValidationError(
            f"Cannot backfill fragment {fid}: read {rows.num_rows} live rows, its deletion "
            f"vector leaves {len(offsets)}"
        )
    ids = pa.array(np.full(rows.num_rows, fid, dtype=object), pa.string())
    return pa.table([ids, pa.array(offsets), *rows.columns], names=[FRAGMENT, OFFSET, *cols])


def _read_fragment(
    reader: FragmentReader,
    frag: FragmentRecord,
    cols: list[str],
    on_corrupt: str,
    corrupt: list[dict[str, Any]],
) -> pa.Table | None:
    """The fragment's live rows. A read failing from corruption or a transient I/O error
    (:func:`read_failure`) is tried again up to :data:`CORRUPT_RETRIES` times, 50 ms x the
    attempt apart; then a corrupt fragment is None with ``on_corrupt="skip"`` (reported in
    ``corrupt`` as Spark's reader reports it), and any other failure is raised."""
    for attempt in range(CORRUPT_RETRIES + 1):
        try:
            return reader.read_fragment(frag, cols)
        except (CorruptInputError, pa.ArrowInvalid, OSError) as exc:
            failure = read_failure(exc)
            if failure == "environment":
                raise
            if attempt < CORRUPT_RETRIES:
                time.sleep(0.05 * (attempt + 1))
                continue
            if failure == "transient" or on_corrupt != "skip":
                raise
            error = f"{type(exc).__name__}: {exc}"
            path = exc.path if isinstance(exc, CorruptInputError) else None
            corrupt.append({"fragment": frag.fragment_id, "file": path, "rowGroup": None,
                            "error": error})  # fmt: skip
    return None


_ENVIRONMENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_DECODER_WORDS = ("thrift", "parquet", "magic", "corrupt", "malformed", "compress",
                  "end of stream", "page", "snappy", "zstd", "lz4", "gzip", "brotli",
                  "encoding", "levels", "dictionary")  # fmt: skip


def read_failure(exc: BaseException) -> str:
    """How a failed read is handled, as Spark's reader classifies it: ``environment`` (a
    missing file, a permission, a directory: fail at once, since skipping would leave every
    fragment missing), ``corrupt`` (the file's bytes: a bad footer, magic, page or codec
    stream, a wrong row count; skippable) or ``transient`` (any other I/O error, a network
    error of an object store say: retried, then fails)."""
    if isinstance(exc, CorruptInputError):
        if exc.path is None:  # not a data file's content (a deletion vector, say)
            return "environment"
        cause = exc.__cause__
        return "corrupt" if cause is None else read_failure(cause)
    if isinstance(exc, _ENVIRONMENT):
        return "environment"
    if isinstance(exc, pa.ArrowInvalid):
        return "corrupt"
    if isinstance(exc, OSError) and exc.errno is None:
        text = str(exc).lower()
        if any(word in text for word in _DECODER_WORDS):
            return "corrupt"
    return "transient"


class LocalPythonWorker:
    """The local Python worker process of one run: started on first use (its imports are paid
    once, models load once), started again after it died, ended by :meth:`close`."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def compute(self, spec: str, table: pa.Table) -> list[str]:
        """The descriptors of the files the task of ``spec`` wrote for ``table``'s rows."""
        with self._lock:
            proc = self._started()
            assert proc.stdin is not None and proc.stdout is not None
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            try:
                write_frame(proc.stdin, spec.encode())
                write_frame(proc.stdin, memoryview(sink.getvalue()))
                reply = read_frame(proc.stdout)
            except (OSError, EOFError):
                reply = None
            if reply is None:
                code = self._reap()
                raise LocalWorkerDied(
                    f"{WORKER_DIED}: the local Python worker exited with code {code} while "
                    "computing a backfill task"
                )
        doc = json.loads(reply)
        if "error" in doc:
            raise _task_error(doc)
        return list(doc["descriptors"])

    def close(self, abort: bool = False) -> None:
        """End the worker: at once with ``abort`` (the run failed or was interrupted: its
        current request is of no use), else after its current request (killed after 30 s)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        _close_quietly(proc.stdin)
        if abort:
            proc.kill()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _close_quietly(proc.stdout)

    def _started(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._reap()
            env = dict(os.environ)
            # the modules this process imports (features by reference, --path) import there too
            env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "omnitable.exec.local_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,  # Ctrl-C reaches this process only, which ends it
            )
        return self._proc

    def _reap(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        _close_quietly(proc.stdin)
        _close_quietly(proc.stdout)
        try:
            return proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        with contextlib.suppress(OSError):
            stream.close()


def _task_error(doc: dict[str, str]) -> Exception:
    """The driver-side exception of an error the task raised in the worker: OmniTable's own
    class when it is one (the same message), else :class:`LocalTaskError`."""
    cls = getattr(exceptions, doc["error"], None)
    if isinstance(cls, type) and issubclass(cls, OmniTableError):
        try:
            return cls(doc["message"])
        except TypeError:  # a class with more arguments
            pass
    return LocalTaskError(
        f"Cannot compute backfill task: {doc['error']}: {doc['message']}\n"
        f"in the local Python worker:\n{doc.get('traceback', '')}"
    )
