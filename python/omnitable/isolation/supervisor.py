"""PARENT side of the supervised child process that contains hard crashes of isolated functions.

Runs in: the calling process (a Spark Python worker, the driver, a plain script): function
shipping, the handle on the zygote, one :class:`ChildSupervisor` per worker, and the pool of
idle supervisors. The code that runs in the child processes is :mod:`omnitable.isolation.child`.

A *zygote* — a fresh interpreter (``python -c``, never a fork of the caller, which may have
threads, and never a re-import of the caller's ``__main__``) that has imported pandas, pyarrow,
cloudpickle and :mod:`omnitable.isolation.child` — forks one *worker* per supervisor on request. Workers are started
lazily, kept for later batches (a pool of idle supervisors per process, so a Spark Python
worker reuses its child across batches and tasks) and respawned after they die: a respawn is a
fork of the zygote (milliseconds), the zygote's own start an interpreter start (about 0.6 s,
once per process). When the caller exits the zygote sees EOF and exits, and its workers get
SIGKILL (``PR_SET_PDEATHSIG``).

Protocol with a worker (pickle protocol 5 over a socket, ``multiprocessing.connection``
framing): the parent sends ``("call", fn_key, (fn_payload, sys_path)|None, batch_id, columns|None, lo, hi,
budget_s, memory_mb, output_names, limits, part)``; the worker caches functions by key and the latest
batch by id, runs :func:`~omnitable.isolation.guard.guarded_call` on rows ``[lo, hi)``
and answers ``("ok", columns)`` or ``("fail", CallFailure)``; for a per-record function
(:mod:`omnitable.isolation.records`) it runs :func:`~omnitable.isolation.records.run_records`,
writing each record's position to a file mapped by both sides, sends ``("part",
RecordsOutcome)`` every ``part`` records and answers ``("records", RecordsOutcome)`` with the
last part. The parent waits ``budget_s + kill_grace_s`` at most (per-record: that long
without the worker starting another record), then kills the worker (kind ``timeout``). A worker that
dies is classified by its exit status: SIGKILL not sent by the parent → ``memory`` (the kernel
OOM killer's signal); any other signal or exit code → ``crash``, with whatever
``faulthandler`` wrote as the traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import mmap
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from omnitable.exceptions import OmniTableError, ValidationError
from omnitable.isolation.child import ZYGOTE_BOOT, cloudpickle_module
from omnitable.isolation.guard import CallFailure, Outcome
from omnitable.isolation.policy import IsolationPolicy, bounded_tail
from omnitable.isolation.records import PerRecord, RecordsOutcome

_MAX_FUNCTIONS = 32
_WATCH_STEP_S = 0.05
"""How often the parent looks at a per-record worker's position while it waits."""
_MAX_IDLE = 2


@dataclass(frozen=True)
class ShippedFunction:
    """A function pickled once (cloudpickle) for the child, keyed by its payload's hash."""

    fn: Callable[..., Any]
    key: str
    payload: bytes


_SHIPPED: OrderedDict[int, ShippedFunction] = OrderedDict()
_SHIPPED_LOCK = threading.Lock()


def ship(fn: Callable[..., Any]) -> ShippedFunction:
    """Pickle ``fn`` by value where needed (cached per function object).

    Raises:
        ValidationError: the function cannot be pickled.
    """
    with _SHIPPED_LOCK:
        hit = _SHIPPED.get(id(fn))
        if hit is not None and hit.fn is fn:
            _SHIPPED.move_to_end(id(fn))
            return hit
    try:
        payload = cloudpickle_module().dumps(fn, protocol=5)
    except Exception as exc:
        raise ValidationError(
            f"Cannot run {getattr(fn, '__name__', fn)!r} in a child process: the function "
            f"cannot be pickled ({type(exc).__name__}: {exc})"
        ) from exc
    shipped = ShippedFunction(fn, hashlib.sha256(payload).hexdigest()[:24], payload)
    with _SHIPPED_LOCK:
        _SHIPPED[id(fn)] = shipped
        while len(_SHIPPED) > _MAX_FUNCTIONS:
            _SHIPPED.popitem(last=False)
    return shipped


PRELOAD_MAX_BYTES = 8 << 20
"""Larger function payloads (closures carrying data) are not preloaded into the zygote, which
would otherwise hold one more copy of them for the life of the process."""


class _Zygote:
    """Parent side of the zygote: a fresh interpreter (``python -c``) that has imported
    pandas, pyarrow and cloudpickle and forks workers on request. Started on first use,
    restarted if it died. Shared by every supervisor of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._preloaded: set[str] = set()

    def fork(self, worker: socket.socket, fault_fd: int, progress_fd: int) -> int:
        """Fork a worker serving ``worker`` (a socket end), writing faults to ``fault_fd`` and
        the position of the record it runs to ``progress_fd`` (per-record functions)."""
        with self._lock:
            for attempt in (1, 2):
                sock = self._ensure()
                try:
                    msg = pickle.dumps(("fork", list(sys.path)))
                    socket.send_fds(sock, [msg], [worker.fileno(), fault_fd, progress_fd])
                    return int(pickle.loads(self._recv(sock)))
                except (OSError, EOFError, pickle.UnpicklingError):
                    self._reset()
                    if attempt == 2:
                        raise
        raise AssertionError("unreachable")

    def preload(self, key: str, payload: bytes) -> None:
        """Have the zygote unpickle a function once (no reply awaited), so every worker forked
        afterwards starts with it and its modules imported: a respawned worker's first call
        then costs milliseconds, not an import of the function's modules. Best effort."""
        if len(payload) > PRELOAD_MAX_BYTES:
            return
        with self._lock:
            try:
                sock = self._ensure()
                if key in self._preloaded:
                    return
                self._preloaded.add(key)  # tried once per zygote, whatever the outcome
                with tempfile.TemporaryFile() as f:
                    f.write(payload)
                    f.flush()
                    f.seek(0)
                    msg = pickle.dumps(("preload", key, list(sys.path)))
                    socket.send_fds(sock, [msg], [f.fileno()])
            except OSError:
                self._reset()

    def wait(self, pid: int) -> int | None:
        with self._lock:
            sock = self._sock
            if sock is None:
                return None
            try:
                sock.send(pickle.dumps(("wait", pid)))
                code = pickle.loads(self._recv(sock))
            except (OSError, EOFError, pickle.UnpicklingError):
                self._reset()
                return None
            return None if code is None else int(code)

    def close(self) -> None:
        with self._lock:
            self._reset()

    def forget(self) -> None:
        """After ``os.fork``: the zygote belongs to the parent process; drop it here."""
        self._lock = threading.Lock()
        self._proc, self._sock = None, None
        self._preloaded = set()

    @staticmethod
    def _recv(sock: socket.socket) -> bytes:
        data = sock.recv(1 << 16)
        if not data:
            raise EOFError("the isolation zygote closed its socket")
        return data

    def _ensure(self) -> socket.socket:
        if self._sock is not None and self._proc is not None and self._proc.poll() is None:
            return self._sock
        self._reset()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", ZYGOTE_BOOT, json.dumps(sys.path), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
        self._sock = mine
        return mine

    def _reset(self) -> None:
        sock, proc = self._sock, self._proc
        self._sock, self._proc = None, None
        self._preloaded = set()
        if sock is not None:
            sock.close()  # the zygote sees EOF and exits; its workers get SIGKILL
        if proc is not None:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


ZYGOTE = _Zygote()


@dataclass(frozen=True)
class ChildBatch:
    """One batch as its calls in a worker share it: the shipped function, the input columns
    (sent once per batch, identified by ``batch_id``), the output names and the policy's
    bounds (memory, failure text limits, kill grace). Each call adds a row range and a budget."""

    fn: ShippedFunction
    batch_id: int
    columns: Sequence[Any]
    names: Sequence[str]
    policy: IsolationPolicy


class ChildSupervisor:
    """Parent side of one supervised worker: start lazily, call, classify deaths, respawn."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._conn: Connection | None = None
        self._fn_keys: set[str] = set()
        self._batch: int | None = None
        self.starts = 0
        fd, path = tempfile.mkstemp(prefix="omnitable-isolation-", suffix=".fault")
        os.unlink(path)  # nothing to clean up, whatever way this process ends
        self._fault_fd = fd
        self._progress_fd, self._progress = _shared_cursor()
        self._failed_at = -1

    @property
    def pid(self) -> int | None:
        return self._pid

    def failed_record(self) -> int:
        """After a per-record call failed: the position of the record its worker was running
        when it died or was killed (-1: none, e.g. it was loading the batch or sending
        results)."""
        return self._failed_at

    def _position(self) -> int:
        """The record the worker's per-record loop is running (-1: none)."""
        return int(self._progress[0])

    def call(self, batch: ChildBatch, lo: int, hi: int, budget_s: float | None) -> Outcome:
        """Run rows ``[lo, hi)`` of ``batch`` in the worker within ``budget_s`` seconds; a dead
        worker becomes a failure."""
        out = self._call(batch, lo, hi, budget_s, 0, None)
        if isinstance(out, RecordsOutcome):
            raise OmniTableError("Cannot run the function: it is per-record (use call_records)")
        return out

    def call_records(
        self,
        batch: ChildBatch,
        lo: int,
        hi: int,
        budget_s: float | None,
        part: int,
        on_part: Callable[[RecordsOutcome], None],
    ) -> RecordsOutcome | CallFailure:
        """Run the per-record function of ``batch`` on rows ``[lo, hi)`` in the worker, each
        record within ``budget_s`` seconds. Results come back in parts of ``part`` records:
        each but the last is handed to ``on_part`` as it arrives, the last is returned. A dead
        worker becomes a failure, and :meth:`failed_record` then says which record it was
        running."""
        out = self._call(batch, lo, hi, budget_s, part, on_part)
        if isinstance(out, list):
            raise OmniTableError("Cannot run the function record by record: it is vectorized")
        return out

    def _call(
        self,
        batch: ChildBatch,
        lo: int,
        hi: int,
        budget_s: float | None,
        part: int,
        on_part: Callable[[RecordsOutcome], None] | None,
    ) -> Outcome | RecordsOutcome:
        per_record = isinstance(batch.fn.fn, PerRecord)
        blamed = 1 if per_record else hi - lo  # a per-record call's failure is one record's
        limits = batch.policy.limits
        if self._conn is None:
            self._start()
        self._progress[0] = -1
        conn = self._conn
        assert conn is not None
        if not self._send(conn, batch, lo, hi, budget_s, part):
            self._failed_at = -1
            return self._died(blamed, limits[0])
        grace = batch.policy.kill_grace_s
        wait = None if budget_s is None else budget_s + grace
        call_budget = batch.policy.budget_s(hi - lo)
        load_wait = None if call_budget is None else call_budget + grace
        try:
            while True:
                if not self._await(conn, wait, per_record, load_wait):
                    self._stop(kill=True)
                    if per_record and self._failed_at < 0:
                        return _killed_loading(load_wait)
                    return _killed(budget_s, wait, None if per_record else hi - lo)
                tag, body = pickle.loads(conn.recv_bytes())
                if tag != "part" or on_part is None:
                    break
                on_part(RecordsOutcome(*body))
        except (EOFError, OSError):
            self._failed_at = self._position()
            return self._died(blamed, limits[0])
        except BaseException:  # e.g. KeyboardInterrupt while waiting: a reply may be pending
            self._stop(kill=True)
            raise
        if tag == "ok":
            return list(body)
        if tag == "records":
            return RecordsOutcome(*body)
        if tag == "fail":
            return CallFailure(*body)
        raise OmniTableError(f"Cannot run the function in the isolation child process: {body}")

    def _send(
        self,
        conn: Connection,
        batch: ChildBatch,
        lo: int,
        hi: int,
        budget_s: float | None,
        part: int,
    ) -> bool:
        """Send one call to the worker (with the function and the batch when it lacks them);
        False when the worker is gone."""
        fn, batch_id = batch.fn, batch.batch_id
        # with a new function, the caller's sys.path: it may have grown since the fork (Spark's
        # addPyFile), and unpickling the function imports its modules
        payload = None if fn.key in self._fn_keys else (fn.payload, list(sys.path))
        cols = None if self._batch == batch_id else list(batch.columns)
        msg = ("call", fn.key, payload, batch_id, cols, lo, hi, budget_s, batch.policy.memory_mb,
               list(batch.names), batch.policy.limits, part)  # fmt: skip
        try:
            data = pickle.dumps(msg, protocol=5)
        except Exception as exc:
            raise ValidationError(
                f"Cannot send the batch to the isolation child process: {exc}"
            ) from exc
        try:
            conn.send_bytes(data)
        except OSError:
            return False
        except BaseException:  # interrupted mid-message: the protocol state is unknown
            self._stop(kill=True)
            raise
        if payload is not None:
            ZYGOTE.preload(fn.key, fn.payload)  # later respawns start with it imported
        self._fn_keys.add(fn.key)
        self._batch = batch_id
        return True

    def _await(
        self, conn: Connection, wait: float | None, per_record: bool, load_wait: float | None
    ) -> bool:
        """Wait for the worker's reply: False when ``wait`` seconds passed without one. For a
        per-record function: False when one record ran ``wait`` seconds, or the worker ran no
        record for ``load_wait`` seconds (loading the batch, sending results); the position
        it was stuck at is then :meth:`failed_record`."""
        if wait is None or not per_record:
            return conn.poll(wait)
        step = min(_WATCH_STEP_S, wait / 8)
        seen, since = self._position(), time.monotonic()
        while not conn.poll(step):
            pos, now = self._position(), time.monotonic()
            if pos != seen:
                seen, since = pos, now
                continue
            limit = wait if pos >= 0 else load_wait
            if limit is not None and now - since >= limit:
                self._failed_at = pos
                return False
        return True

    def release_batch(self) -> None:
        """Let the worker drop its copy of the current batch (no reply awaited)."""
        if self._conn is not None and self._batch is not None:
            try:
                self._conn.send_bytes(pickle.dumps(("release",)))
            except OSError:
                self._stop(kill=True)
        self._batch = None

    def close(self) -> None:
        """Stop the worker (politely, then by force) and close the fault log."""
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.send_bytes(pickle.dumps(("exit",)))
        self._stop(kill=False)
        with contextlib.suppress(OSError):
            os.close(self._fault_fd)
        with contextlib.suppress(ValueError, BufferError):
            self._progress.release()
        with contextlib.suppress(OSError):
            os.close(self._progress_fd)

    def _start(self) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            pid = ZYGOTE.fork(theirs, self._fault_fd, self._progress_fd)
        self._pid, self._conn = pid, Connection(mine.detach())
        self._fn_keys, self._batch = set(), None
        self.starts += 1

    def _stop(self, *, kill: bool) -> int | None:
        pid, conn = self._pid, self._conn
        self._pid, self._conn = None, None
        self._fn_keys, self._batch = set(), None
        if pid is None or conn is None:
            return None
        if not kill and not conn.poll(5):  # wait for EOF: the worker is exiting
            kill = True
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        conn.close()
        return ZYGOTE.wait(pid)

    def _died(self, n: int, tb_limit: int) -> CallFailure:
        code = self._stop(kill=False)
        try:
            size = os.fstat(self._fault_fd).st_size
            raw = os.pread(self._fault_fd, tb_limit, max(0, size - tb_limit))
        except OSError:
            raw = b""
        fault = bounded_tail(raw.decode("utf-8", "replace"), tb_limit)
        what = _what(n)
        if code is not None and code < 0:
            name = _signal_name(-code)
            if -code == signal.SIGKILL:
                return CallFailure(
                    "memory",
                    name,
                    f"the child process was killed by SIGKILL (the kernel OOM killer's signal) "
                    f"during {what}",
                    fault,
                )
            return CallFailure(
                "crash", name, f"the child process died of {name} during {what}", fault
            )
        if code is None:
            return CallFailure("crash", "unknown", f"the child process died during {what}", fault)
        return CallFailure(
            "crash",
            f"exit({code})",
            f"the child process exited with code {code} during {what}",
            fault,
        )


def _shared_cursor() -> tuple[int, memoryview]:
    """An unlinked 8-byte file and a view of it as one int64, shared with the workers (they
    map the same file): the running record's position, read after a worker died."""
    fd, path = tempfile.mkstemp(prefix="omnitable-isolation-", suffix=".progress")
    os.unlink(path)
    os.ftruncate(fd, 8)
    view = memoryview(mmap.mmap(fd, 8)).cast("q")
    view[0] = -1
    return fd, view


def _killed(budget_s: float | None, wait: float | None, n: int | None) -> CallFailure:
    """The failure of a call (of ``n`` records; None: a per-record call's record) whose worker
    was killed for ignoring its alarm."""
    what, after = ("the record", " without progress") if n is None else (_what(n), "")
    return CallFailure(
        "timeout",
        "TimeoutError",
        f"{what} exceeded its time budget of {budget_s:.6g} s and did not stop at its alarm; "
        f"the child process was killed after {wait:.6g} s{after}",
        "",
    )


def _killed_loading(wait: float | None) -> CallFailure:
    """The failure of a per-record call whose worker ran no record for ``wait`` seconds."""
    return CallFailure(
        "timeout",
        "TimeoutError",
        f"the child process ran no record for {wait:.6g} s (loading the function or the "
        "batch, or sending results) and was killed",
        "",
    )


def _what(n: int) -> str:
    return "the record" if n == 1 else f"a call of {n} records"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class _Pool:
    """Idle supervisors of this process, reused across batches and tasks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[ChildSupervisor] = []

    def acquire(self) -> ChildSupervisor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return ChildSupervisor()

    def release(self, sup: ChildSupervisor) -> None:
        sup.release_batch()
        with self._lock:
            if len(self._idle) < _MAX_IDLE:
                self._idle.append(sup)
                return
        sup.close()

    def close_all(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sup in idle:
            sup.close()

    def forget(self) -> None:
        """After ``os.fork``: the children belong to the parent process; drop them here."""
        self._lock = threading.Lock()
        self._idle = []
        ZYGOTE.forget()


POOL = _Pool()
atexit.register(ZYGOTE.close)
atexit.register(POOL.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.forget)
