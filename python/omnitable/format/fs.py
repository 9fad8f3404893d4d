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


_MAPS = threading.local()
MAX_MAPPED_FILES = 64  # memory-mapped files each thread keeps open for point reads


def mapped_file(path: str) -> pa.BufferReader:
    """A reader of the local file ``path`` over a read-only memory map of it, kept open by the
    calling thread (its ``MAX_MAPPED_FILES`` most recently used ones) so that repeated point
    reads of one file (lookups, selective reads) neither map it again nor fault in the pages
    they read before. The reader's buffers are views of the map: a read copies nothing, and
    unlike ``pa.memory_map``'s it asks the kernel for no read-ahead of the span it views (an
    ``madvise`` that costs ~0.1 ms per 8 MB viewed, whatever is then touched).

    A kept map is used only while the file is the one it mapped (same inode, size and
    modification time, by one ``stat``): a file replaced or rewritten since is mapped anew, so a
    read never sees stale bytes nor touches pages past a truncated file's end (SIGBUS). A reader
    is the thread's own, position included: do not hand it to another thread, and do not close
    it (eviction drops it; buffers read from it keep the map alive)."""
    maps: OrderedDict[str, tuple[tuple[int, ...], pa.BufferReader]] | None = getattr(
        _MAPS, "files", None
    )
    if maps is None:
        maps = _MAPS.files = OrderedDict()
    st = os.stat(path)
    stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    found = maps.get(path)
    if found is not None and found[0] == stamp and not found[1].closed:
        maps.move_to_end(path)
        found[1].seek(0)
        return found[1]
    if not st.st_size:
        return pa.BufferReader(b"")  # nothing to map (mmap refuses an empty file)
    with open(path, "rb") as f:
        view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    handle = pa.BufferReader(pa.py_buffer(view))
    if handle.size() != st.st_size:  # changed between the stat and the map: not kept
        return handle
    maps[path] = (stamp, handle)
    while len(maps) > MAX_MAPPED_FILES:
        maps.popitem(last=False)
    return handle


def forget_mapped_files() -> None:
    """Drop the calling thread's kept memory maps (tests; a process that deleted many files)."""
    _MAPS.files = OrderedDict()
