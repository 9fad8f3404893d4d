"""The local Python worker: a child process computing backfill chunks without Spark.

Started by :class:`omnitable.exec.local_engine.LocalPythonWorker` for the ``python`` engine
(docs/features.md, "Engines"), it plays the part of Spark's Python worker: it receives a task's
spec and input rows, runs :func:`omnitable.exec.task.compute_partition` (which writes the
column files) and sends back the descriptors. It never touches the catalog.

Protocol, on duplicates of the child's original stdin and stdout (the feature code's own prints
go to stderr and its reads of stdin find nothing, so they cannot corrupt a frame): each frame is an 8-byte big-endian length
and that many bytes. A request is two frames, the task spec (JSON) and the input (an Arrow IPC
stream); the reply is one frame, ``{"descriptors": [...]}`` or ``{"error": class name,
"message": ..., "traceback": ...}`` for an exception the task raised. End of input ends it.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import time
import traceback
from typing import IO

_LENGTH = struct.Struct(">Q")


def read_frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's bytes; None at a clean end of input (EOFError: cut mid-frame)."""
    head = stream.read(_LENGTH.size)
    if not head:
        return None
    if len(head) < _LENGTH.size:
        raise EOFError("stream ended inside a frame's length")
    (size,) = _LENGTH.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError(f"stream ended inside a frame ({len(body)} of {size} bytes)")
    return bytes(body)


def write_frame(stream: IO[bytes], body: bytes | memoryview) -> None:
    stream.write(_LENGTH.pack(len(body)))
    stream.write(body)
    stream.flush()


def _serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    import pyarrow as pa

    from omnitable.exec.task import compute_partition

    while (spec := read_frame(requests)) is not None:
        body = read_frame(requests)
        if body is None:
            raise EOFError("stream ended between a request's spec and its input")
        try:
            table = pa.ipc.open_stream(body).read_all()
            batches = compute_partition(spec.decode(), table.to_batches())
            reply: dict[str, object] = {"descriptors": [b.column(0)[0].as_py() for b in batches]}
        except Exception as exc:
            reply = {
                "error": type(exc).__name__,
                "message": str(exc),
                "traceback": traceback.format_exc()[-4000:],
            }
        write_frame(replies, json.dumps(reply).encode())


def _exit_with_parent() -> None:
    """End this process soon after the process that started it is gone (killed, say): it
    would otherwise finish its current task for nobody."""
    parent = os.getppid()
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(1)


def main() -> None:
    threading.Thread(target=_exit_with_parent, name="parent-watch", daemon=True).start()
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    # feature code never touches the protocol: its prints go to stderr, its reads find nothing
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    _serve(requests, replies)


if __name__ == "__main__":
    main()
