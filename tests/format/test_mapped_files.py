"""The memory maps the process keeps for point reads (``format.fs.mapped_file``): one map per
file, shared by every thread's readers and reused while the file is unchanged; a file replaced,
rewritten or truncated in place since is mapped anew (no stale bytes, no SIGBUS past a
truncated end); a missing file raises; an empty one reads as empty; the kept maps (and their
descriptors) are bounded."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest

from omnitable.format import fs
from omnitable.format.fs import MAX_MAPPED_FILES, forget_mapped_files, mapped_file


@pytest.fixture(autouse=True)
def fresh_maps() -> None:
    forget_mapped_files()


def _bytes(handle: pa.NativeFile, lo: int, hi: int) -> bytes:
    handle.seek(lo)
    return handle.read_buffer(hi - lo).to_pybytes()


def _address(handle: pa.NativeFile) -> int:
    handle.seek(0)
    return handle.read_buffer(1).address


def test_a_file_is_mapped_once_while_unchanged(tmp_path: Path) -> None:
    """Each call gets a reader of its own (its own position) over the one kept map, in any
    thread."""
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 400)
    first, second = mapped_file(str(path)), mapped_file(str(path))
    assert first is not second and _address(first) == _address(second)
    first.seek(300)
    assert _bytes(second, 256, 260) == bytes([0, 1, 2, 3]) and first.tell() == 300
    other: list[pa.NativeFile] = []
    worker = threading.Thread(target=lambda: other.append(mapped_file(str(path))))
    worker.start()
    worker.join()
    assert _address(other[0]) == _address(first) and _bytes(other[0], 0, 2) == bytes([0, 1])


@pytest.mark.parametrize("how", ["replaced", "truncated in place", "grown in place"])
def test_a_changed_file_is_mapped_anew(tmp_path: Path, how: str) -> None:
    """Reading the end of a kept map of a file truncated in place would raise SIGBUS (and kill
    the process): the stat before each reuse sees the change and maps the file again."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 200_000)
    old = mapped_file(str(path))
    assert _bytes(old, 199_990, 200_000) == b"a" * 10
    if how == "replaced":
        (tmp_path / "g.bin").write_bytes(b"b" * 200_000)
        os.replace(tmp_path / "g.bin", path)  # another inode, same size
    else:
        with open(path, "r+b") as f:
            f.truncate(0)
            f.write(b"c" * (1_000 if how == "truncated in place" else 300_000))
        os.utime(path, ns=(10**18, 10**18))  # an mtime a quick rewrite could share otherwise
    new = mapped_file(str(path))
    assert _address(new) != _address(old)
    size = path.stat().st_size
    fill = b"b" if how == "replaced" else b"c"
    assert new.size() == size and _bytes(new, size - 10, size) == fill * 10


def test_missing_empty_and_many_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        mapped_file(str(tmp_path / "nope.bin"))
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert mapped_file(str(empty)).size() == 0
    paths = []
    for i in range(MAX_MAPPED_FILES + 5):
        paths.append(tmp_path / f"{i}.bin")
        paths[-1].write_bytes(bytes([i % 256]) * 10)
        assert _bytes(mapped_file(str(paths[-1])), 0, 1) == bytes([i % 256])
    assert len(fs._MAPS) == MAX_MAPPED_FILES
    assert str(paths[0]) not in fs._MAPS and str(paths[-1]) in fs._MAPS
