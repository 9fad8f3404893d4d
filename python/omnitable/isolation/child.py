"""Code that runs in CHILD processes only: the zygote and the workers it forks.

Runs in: the zygote, a fresh interpreter that the parent starts with ``python -c`` and
:data:`ZYGOTE_BOOT` (it never imports the caller's ``__main__``), and the workers forked from
it. Nothing here runs in the parent process except reading :data:`ZYGOTE_BOOT` and
:func:`cloudpickle_module`. The parent side (the zygote handle, the supervisors, the protocol)
is :mod:`omnitable.isolation.supervisor`; this module must not import it.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import mmap
import os
import pickle
import signal
import socket
import sys
import warnings
from collections import OrderedDict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from omnitable.isolation.guard import CallFailure, guarded_call
from omnitable.isolation.records import PerRecord, RecordsOutcome, input_values, run_records

MAX_FUNCTIONS = 32
_PR_SET_PDEATHSIG = 1
_PRELOADED: OrderedDict[str, Callable[..., Any]] = OrderedDict()
"""In the zygote: functions unpickled once, so workers forked later inherit them (and the
modules they import) instead of each importing them again on its first call."""


def cloudpickle_module() -> Any:
    """``cloudpickle`` if installed, else the copy pyspark ships (a dependency)."""
    try:
        import cloudpickle
    except ImportError:
        from pyspark import cloudpickle  # the copy pyspark ships (a dependency)
    return cloudpickle


def child_main(conn: Connection, fault_fd: int, progress_fd: int) -> None:
    """Serve calls on ``conn`` until EOF or ``("exit",)`` (runs in a forked worker).

    ``fault_fd``: an unlinked file shared with the parent, where ``faulthandler`` writes the
    traceback of a fatal signal. ``progress_fd``: an unlinked 8-byte file shared with the
    parent, where a per-record function's loop writes the position of the record it runs.
    """
    os.ftruncate(fault_fd, 0)
    os.lseek(fault_fd, 0, os.SEEK_SET)
    faulthandler.enable(fault_fd)
    cursor = memoryview(mmap.mmap(progress_fd, 8)).cast("q")
    fns: OrderedDict[str, Callable[..., Any]] = OrderedDict(_PRELOADED)
    batch_id: int | None = None
    columns: list[Any] = []
    values: list[list[Any]] | None = None  # the batch as a per-record function's input lists
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "exit":
            return
        if msg[0] == "release":
            batch_id, columns, values = None, [], None
            continue
        _, key, payload, bid, cols, lo, hi, budget_s, memory_mb, names, limits, part = msg
        try:
            if payload is not None and key not in fns:
                sys.path[:] = payload[1]
                fns[key] = pickle.loads(payload[0])
                while len(fns) > MAX_FUNCTIONS:
                    fns.popitem(last=False)
            if cols is not None:
                batch_id, columns, values = bid, cols, None
            if batch_id != bid or key not in fns:
                raise RuntimeError("protocol error: batch or function not loaded")
        except Exception as exc:
            conn.send_bytes(pickle.dumps(("error", f"{type(exc).__name__}: {exc}"), protocol=5))
            continue
        fn = fns[key]
        if isinstance(fn, PerRecord):
            if values is None:
                values = input_values(columns)
            emit = (functools.partial(_send_part, conn, "part"), part) if part else None
            last = run_records(
                fn.fn, values, lo, hi, names, budget_s, memory_mb, limits, cursor, emit
            )
            _send_part(conn, "records", last)
            continue
        n_all = len(columns[0]) if columns else 0
        args = columns if (lo, hi) == (0, n_all) else [_rows(c, lo, hi) for c in columns]
        outcome = guarded_call(fn, args, hi - lo, names, budget_s, memory_mb, limits)
        try:
            reply = pickle.dumps(("fail" if isinstance(outcome, CallFailure) else "ok", outcome), 5)
        except Exception as exc:
            failure = CallFailure(
                "exception", type(exc).__name__, f"Cannot send the result to the parent: {exc}", ""
            )
            reply = pickle.dumps(("fail", failure), protocol=5)
        conn.send_bytes(reply)


def _send_part(conn: Connection, tag: str, part: RecordsOutcome) -> None:
    """Send (a part of) a per-record call's results; a part that cannot be pickled fails each
    of its records instead."""
    try:
        data = pickle.dumps((tag, part), protocol=5)
    except Exception as exc:
        why = CallFailure(
            "exception", type(exc).__name__, f"Cannot send the result to the parent: {exc}", ""
        )
        size = len(part.values[0])
        failed = RecordsOutcome(
            part.lo,
            [[None] * size for _ in part.values],
            [(part.lo + j, why) for j in range(size)],
        )
        data = pickle.dumps((tag, failed), protocol=5)
    conn.send_bytes(data)


def _rows(column: Any, lo: int, hi: int) -> Any:
    return column.iloc[lo:hi].reset_index(drop=True)


def zygote_main(fd: int) -> None:
    """Entry point of the zygote: fork one worker per request on the control socket ``fd``.

    Requests (one pickle per SEQPACKET message): ``("fork", sys_path)`` with the worker's
    socket, fault-log file and progress file as ancillary fds → the worker's pid; ``("wait", pid)`` → its exit code as
    ``os.waitstatus_to_exitcode`` gives it (negative: killed by that signal); ``("preload", key,
    sys_path)`` with a file holding a function's payload as ancillary fd → no reply: the function
    is unpickled here once (importing its modules), so later workers start with it. EOF (the
    parent died or closed us) ends the zygote; its workers then get SIGKILL (``PR_SET_PDEATHSIG``).
    """
    sock = socket.socket(fileno=fd)
    import pyarrow  # noqa: F401 - preloaded once, shared by every forked worker

    cloudpickle_module()  # what unpickling the user's function needs
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 16, 3)
        except OSError:
            return
        if not data:
            return
        req = pickle.loads(data)
        if req[0] == "fork":
            with warnings.catch_warnings():
                # 3.12+ warns when forking with threads: ours are library-owned (jemalloc's
                # background thread, OpenBLAS), which register fork handlers; the Python
                # interpreter itself is single-threaded here.
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
            if pid == 0:  # the worker
                code = 1
                try:
                    sock.close()
                    _die_with_parent()
                    sys.path[:] = req[1]
                    child_main(Connection(fds[0]), fds[1], fds[2])
                    code = 0
                finally:
                    os._exit(code)
            for fd_ in fds:
                os.close(fd_)
            sock.send(pickle.dumps(pid))
        elif req[0] == "preload":
            _preload(req[1], req[2], fds)
        elif req[0] == "wait":
            exit_code: int | None = None
            with contextlib.suppress(ChildProcessError):
                exit_code = os.waitstatus_to_exitcode(os.waitpid(req[1], 0)[1])
            sock.send(pickle.dumps(exit_code))


def _preload(key: str, sys_path: list[str], fds: list[int]) -> None:
    """Unpickle a function payload (read from the file ``fds[0]``) into :data:`_PRELOADED`.

    Any failure only means workers unpickle the function themselves, as without a preload, and
    report its error on their call."""
    try:
        with os.fdopen(fds[0], "rb") as f:
            payload = f.read()
        for fd_ in fds[1:]:
            os.close(fd_)
        sys.path[:] = sys_path
        _PRELOADED[key] = pickle.loads(payload)
        while len(_PRELOADED) > MAX_FUNCTIONS:
            _PRELOADED.popitem(last=False)
    except Exception:  # the worker unpickles it again and reports the error
        return


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent (the zygote) exits."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:
        os._exit(0)


ZYGOTE_BOOT = (
    "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); "
    "from omnitable.isolation.child import zygote_main; zygote_main(int(sys.argv[2]))"
)
"""The zygote's ``python -c`` program (run by the parent): ``argv[1]`` is the parent's
``sys.path`` as JSON, ``argv[2]`` the fd of the control socket that :func:`zygote_main` serves."""
