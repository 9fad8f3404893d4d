"""Filesystems for warehouse roots: local paths, pyarrow URIs (s3, gs, hdfs, abfs) and any
other fsspec protocol, all seen through one ``pyarrow.fs.FileSystem``."""

from __future__ import annotations

import contextlib
import posixpath
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
