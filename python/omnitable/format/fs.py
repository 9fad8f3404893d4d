"""Filesystems for warehouse roots: local paths, pyarrow URIs (s3, gs, hdfs, abfs) and any
other fsspec protocol, all seen through one ``pyarrow.fs.FileSystem``."""

from __future__ import annotations

import contextlib
import mmap
import os
import posixpath
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs

from omnitable.exceptions import ValidationError


@dataclass(frozen=True)
class Location:
    """A directory on some filesystem. ``path`` is in the filesystem's own notation."""

    fs: pafs.FileSystem
    path: str
    uri: str

    def join(self, *parts: str) -> Location:
        path = posixpath.join(self.path, *parts)
        uri = self.uri.rstrip("/") + "/" + "/".join(parts)
        return Location(self.fs, path, uri)

    def child_path(self, relative: str) -> str:
        return posixpath.join(self.path, relative)

    def child_uri(self, relative: str) -> str:
        return self.uri.rstrip("/") + "/" + relative


def resolve_location(uri: str) -> Location:
    """Location of a local path or URI.

    Raises:
        ValidationError: the URI names no filesystem pyarrow or fsspec can open.
    """
    if "://" not in uri:
        local = Path(uri).expanduser().resolve()
        return Location(pafs.LocalFileSystem(), str(local), local.as_uri())
    scheme = uri.split("://", 1)[0].lower()
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return Location(fs, path, uri)
    except (pa.ArrowInvalid, ValueError, OSError) as arrow_exc:
        try:
            import fsspec
        except ImportError:  # pragma: no cover - fsspec is a dependency
            raise ValidationError(f"Cannot open '{uri}': {arrow_exc}") from arrow_exc
        try:
            ffs, path = fsspec.core.url_to_fs(uri)
        except (ValueError, ImportError) as exc:
            raise ValidationError(
                f"Cannot open warehouse root '{uri}': no filesystem for scheme '{scheme}' "
                f"({exc}); use a local path or an s3://, gs://, hdfs://, abfs:// URI"
            ) from exc
        handler = pafs.FSSpecHandler(ffs)
        return Location(pafs.PyFileSystem(handler), path, uri)


def delete_quietly(fs: pafs.FileSystem, paths: list[str]) -> None:
    """Best-effort removal of files this process wrote but did not commit."""
    for p in paths:
        with contextlib.suppress(OSError):
            fs.delete_file(p)


_MAPS: OrderedDict[str, tuple[tuple[int, ...], pa.Buffer]] = OrderedDict()
_MAPS_LOCK = threading.Lock()
MAX_MAPPED_FILES = 128  # memory-mapped files the process keeps for point reads (a descriptor each)


def mapped_file(path: str) -> pa.BufferReader:
    """A reader of the local file ``path`` over a read-only memory map of it that the process
    keeps (its ``MAX_MAPPED_FILES`` most recently used files), so that repeated point reads of
    one file (lookups, selective reads) neither map it again nor fault in the pages they read
    before. Each call returns a reader of its own (safe to use while other threads read the
    same map); its buffers are views of the map: a read copies nothing, and unlike
    ``pa.memory_map``'s it asks the kernel for no read-ahead of the span it views (an
    ``madvise`` that costs ~0.1 ms per 8 MB viewed, whatever is then touched).

    A kept map is used only while the file is the one it mapped (same device, inode, size and
    modification time, by one ``stat``): a file replaced or rewritten since is mapped anew, so a
    read never sees stale bytes nor touches pages past a truncated file's end (SIGBUS). A kept
    map holds a file descriptor, and a deleted file's space, until it is evicted."""
    st = os.stat(path)
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _MAPS_LOCK:
        found = _MAPS.get(path)
        if found is not None and found[0] == stamp:
            _MAPS.move_to_end(path)
            return pa.BufferReader(found[1])
    if not st.st_size:
        return pa.BufferReader(b"")  # nothing to map (mmap refuses an empty file)
    with open(path, "rb") as f:
        buffer = pa.py_buffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    if buffer.size != st.st_size:  # changed between the stat and the map: not kept
        return pa.BufferReader(buffer)
    with _MAPS_LOCK:
        _MAPS[path] = (stamp, buffer)
        _MAPS.move_to_end(path)
        while len(_MAPS) > MAX_MAPPED_FILES:
            _MAPS.popitem(last=False)  # unmapped once no reader holds a view of it
    return pa.BufferReader(buffer)


def forget_mapped_files() -> None:
    """Drop the kept memory maps (tests; a process that deleted many files it read)."""
    with _MAPS_LOCK:
        _MAPS.clear()


def _new_maps_lock() -> None:
    """In a forked child the lock may be held by a thread that does not exist there."""
    global _MAPS_LOCK
    _MAPS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_maps_lock)
