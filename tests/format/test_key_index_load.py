"""Loading key index files: memory-mapped on the local filesystem, read elsewhere (an fsspec
filesystem over the same files); both give the same entries and probes, a mapped index outlives
its file being deleted or replaced, bad files are CorruptInputError on both paths, and the cache
bounds read and mapped indexes separately. Then through ``Table.lookup`` on SQLite and
PostgreSQL: a cold lookup (cache emptied) equals a warm one and a filtered read, and a damaged
index file of a table fails the lookup with CorruptInputError."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

import omnitable
from omnitable.exceptions import CorruptInputError
from omnitable.format import keyindex
from omnitable.format.fs import Location, resolve_location
from omnitable.format.keyindex import (
    FragmentSlot,
    index_path,
    load_key_index,
    probe_fragments,
    write_key_index,
)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self")


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    keyindex._CACHE.clear()
    yield
    keyindex._CACHE.clear()


def _hashes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct hashes, a quarter of them sharing their first half with another."""
    rng = np.random.default_rng(seed)
    h1 = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2)
    q = n // 4
    h1[:q] = h1[q : 2 * q]
    h2 = np.arange(n, dtype=np.uint64) * np.uint64(7919) + np.uint64(seed)
    return h1, h2


def _fsspec_view(location: Location) -> Location:
    """The same directory through a non-local (fsspec) filesystem: the read path."""
    fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem("file")))
    return Location(fs, location.path, location.uri.replace("file://", "fsspec-file://"))


def _queries(h1: np.ndarray, h2: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every stored hash, each with its second half changed (absent), and random ones."""
    rng = np.random.default_rng(seed)
    extra = rng.integers(0, 2**63, 50, dtype=np.uint64)
    return np.concatenate([h1, h1, extra]), np.concatenate([h2, h2 + np.uint64(1), extra])


def _mapped_files() -> list[str]:
    return [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()]


def _open_files() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the descriptor listdir itself used
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
    return out


def test_mapped_and_read_indexes_agree(tmp_path: Path) -> None:
    location = resolve_location(str(tmp_path))
    h1, h2 = _hashes(5_000, 3)
    write_key_index(location, "f0", h1, h2)
    mapped = load_key_index(location, "f0", len(h1))
    assert keyindex._CACHE.usage() == (1, 0, 1)
    read = load_key_index(_fsspec_view(location), "f0", len(h1))
    assert keyindex._CACHE.usage() == (2, len(h1), 1)
    for a, b in zip(
        (mapped.h1, mapped.h2, mapped.offset), (read.h1, read.h2, read.offset), strict=True
    ):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert not mapped.h1.flags.writeable and not mapped.h1.flags.owndata
    q1, q2 = _queries(h1, h2, 4)
    found = mapped.probe(q1, q2)
    assert np.array_equal(found, read.probe(q1, q2))
    n = len(h1)
    assert np.array_equal(found[:n], np.arange(n)) and (found[n:] == -1).all()
    assert load_key_index(location, "f0", n) is mapped  # cached


@pytest.mark.parametrize("seed", range(6))
def test_probes_equal_a_dict_of_the_entries(tmp_path: Path, seed: int) -> None:
    """First halves drawn from a few values (runs of equal ones, at both ends too), queries of
    stored, absent and out-of-range hashes: each probe answers what a dict of the entries does."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300)) if seed < 3 else int(rng.integers(5_000, 9_000))
    pairs = {(int(a), int(b)) for a, b in rng.integers(1, [9, 2**40], (n, 2))}
    h1 = np.array([a for a, _ in pairs], dtype=np.uint64)
    h2 = np.array([b for _, b in pairs], dtype=np.uint64)
    location = resolve_location(str(tmp_path))
    write_key_index(location, "f0", h1, h2)
    index = load_key_index(location, "f0", len(h1))
    model = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(h1, h2, strict=True))}
    q1 = np.concatenate([h1, h1, rng.integers(0, 11, 100, dtype=np.uint64)])
    q2 = np.concatenate([h2, h2 ^ np.uint64(1), rng.integers(0, 2**40, 100, dtype=np.uint64)])
    q2[-100:-50] = h2[rng.integers(0, len(h2), 50)]  # stored second halves, other first ones
    order = np.argsort(q1)  # probed as probe_fragments does: sorted by first half
    want = [model.get((int(a), int(b)), -1) for a, b in zip(q1, q2, strict=True)]
    for _ in range(2):  # the second probe of a large index goes through its directory
        got = np.empty(len(q1), dtype=np.int64)
        got[order] = index.probe(q1[order], q2[order])
        assert got.tolist() == want
    assert (index.directory is not None) == (len(h1) >= 4_096)
    assert index.probe(q1[:0], q2[:0]).tolist() == []


@pytest.mark.parametrize("n", [0, 1, 200, 4_096, 70_000])
@pytest.mark.parametrize("shape", ["uniform", "one bucket", "few values", "extremes"])
def test_the_directory_finds_what_a_binary_search_finds(n: int, shape: str) -> None:
    """An index of a few thousand entries or more probes through its directory of hash
    prefixes from its second probe on; the first entry at or above each query is the one a
    binary search of the whole index finds, however the hashes spread: uniform, all in one
    bucket, a few values repeated, at the ends of the range."""
    rng = np.random.default_rng(n)
    top = np.iinfo(np.uint64).max
    if shape == "uniform":
        h1 = rng.integers(0, top, n, dtype=np.uint64, endpoint=True)
    elif shape == "one bucket":
        h1 = np.uint64(2**40) + rng.integers(0, 1_000, n).astype(np.uint64)
    elif shape == "few values":
        h1 = rng.choice(rng.integers(0, top, 5, dtype=np.uint64, endpoint=True), n)
    else:
        h1 = rng.choice(np.array([0, 1, top - 1, top], np.uint64), n)
    h1 = np.sort(h1)
    index = keyindex.KeyIndex(h1, np.zeros(n, np.uint64), np.arange(n, dtype=np.int64))
    q = np.concatenate([h1, h1 - np.uint64(1), h1 + np.uint64(1),
                        np.array([0, 1, top - 1, top], np.uint64),
                        rng.integers(0, top, 500, dtype=np.uint64, endpoint=True)])  # fmt: skip
    q = np.sort(q)
    want = np.searchsorted(h1, q, side="left").tolist()
    for probe in range(3):
        assert index.first_at_least(q).tolist() == want
        assert (index.directory is not None) == (n >= 4_096 and probe >= 1)


def test_probing_fragments_mapped_or_read_in_parallel_agrees(tmp_path: Path) -> None:
    """Three fragments (the second with deleted rows): probed through mapped files, then
    through the fsspec view (not cached: read in parallel), the same hits."""
    location = resolve_location(str(tmp_path))
    hashes = [_hashes(400, 20 + i) for i in range(3)]
    for i, (h1, h2) in enumerate(hashes):
        write_key_index(location, f"f{i}", h1, h2)
    deleted = np.zeros(400, dtype=bool)
    deleted[::3] = True
    slots = [FragmentSlot(f"f{i}", 400, deleted if i == 1 else None) for i in range(3)]
    q1 = np.concatenate([h for h, _ in hashes] + [np.array([5], dtype=np.uint64)])
    q2 = np.concatenate([h for _, h in hashes] + [np.array([5], dtype=np.uint64)])
    where, offsets = probe_fragments(location, slots, q1, q2)
    live = np.concatenate([np.ones(400, bool), ~deleted, np.ones(400, bool), [False]])
    assert (
        where.tolist() == np.where(live, np.repeat([0, 1, 2, -1], [400, 400, 400, 1]), -1).tolist()
    )
    assert offsets.tolist() == np.where(live, np.r_[np.tile(np.arange(400), 3), 0], -1).tolist()
    assert keyindex._CACHE.usage() == (3, 0, 3)
    read = probe_fragments(_fsspec_view(location), slots, q1, q2)
    assert read[0].tolist() == where.tolist() and read[1].tolist() == offsets.tolist()
    assert keyindex._CACHE.usage() == (6, 1200, 3)


@linux_only
def test_a_mapped_index_holds_no_descriptor_and_outlives_its_file(tmp_path: Path) -> None:
    location = resolve_location(str(tmp_path))
    old1, old2 = _hashes(2_000, 5)
    new1, new2 = _hashes(2_000, 6)
    write_key_index(location, "f0", old1, old2)
    write_key_index(location, "f1", new1, new2)
    path = location.child_path(index_path("f0"))
    cached = load_key_index(location, "f0", len(old1))
    assert path in _mapped_files() and path not in _open_files()
    os.replace(location.child_path(index_path("f1")), path)  # replaced by a rename
    assert np.array_equal(load_key_index(location, "f0", len(old1)).probe(old1, old2),
                          np.arange(len(old1)))  # fmt: skip
    os.remove(path)  # then deleted
    assert np.array_equal(cached.probe(old1, old2), np.arange(len(old1)))
    keyindex._CACHE.clear()
    with pytest.raises(CorruptInputError, match="Cannot read key index"):
        load_key_index(location, "f0", len(old1))
    del cached
    assert path not in " ".join(_mapped_files())  # unmapped once nothing holds its arrays


def _damage(path: str, how: str) -> None:
    data = Path(path).read_bytes()
    if how == "truncated":
        Path(path).write_bytes(data[: len(data) // 2])
    elif how == "tail cut":
        Path(path).write_bytes(data[:-9])
    elif how == "garbage":
        Path(path).write_bytes(bytes(range(256)) * 40)
    elif how == "empty":
        Path(path).write_bytes(b"")
    elif how == "missing":
        os.remove(path)


@pytest.mark.parametrize("read", [False, True], ids=["mapped", "read"])
@pytest.mark.parametrize("how", ["truncated", "tail cut", "garbage", "empty", "missing"])
def test_unreadable_index_files_are_corrupt_input(tmp_path: Path, how: str, read: bool) -> None:
    location = resolve_location(str(tmp_path))
    h1, h2 = _hashes(3_000, 7)
    write_key_index(location, "f0", h1, h2)
    _damage(location.child_path(index_path("f0")), how)
    view = _fsspec_view(location) if read else location
    with pytest.raises(CorruptInputError, match="Cannot read key index .*_key_index.arrow"):
        load_key_index(view, "f0", len(h1))
    assert keyindex._CACHE.usage() == (0, 0, 0)


def _write_table(location: Location, fragment: str, table: pa.Table) -> None:
    path = location.child_path(index_path(fragment))
    location.fs.create_dir(location.child_path(fragment), recursive=True)
    with location.fs.open_output_stream(path) as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)


@pytest.mark.parametrize("read", [False, True], ids=["mapped", "read"])
def test_index_files_of_another_layout_are_corrupt_input(tmp_path: Path, read: bool) -> None:
    location = resolve_location(str(tmp_path))
    view = _fsspec_view(location) if read else location
    h1, h2 = _hashes(100, 8)
    write_key_index(location, "f0", h1, h2)
    with pytest.raises(CorruptInputError, match="it has 100 rows .* the fragment has 101 rows"):
        load_key_index(view, "f0", 101)
    scheme = {b"omnitable.key_hash": b"other-hash"}
    order = np.lexsort((h2, h1))
    good = {"h1": pa.array(h1[order]), "h2": pa.array(h2[order]), "offset": pa.array(order)}
    bad = {
        "other scheme": pa.table(good, metadata=scheme),
        "no scheme": pa.table(good),
        "signed hashes": pa.table(
            {**good, "h1": pa.array(h1.astype(np.int64))}, metadata=keyindex._SCHEMA.metadata
        ),
        "null offsets": pa.table(
            {**good, "offset": pa.array([None] * 100, pa.int64())},
            metadata=keyindex._SCHEMA.metadata,
        ),
    }
    not_null = pa.schema(
        [f.with_nullable(False) for f in keyindex._SCHEMA], keyindex._SCHEMA.metadata
    )
    _write_table(location, "not-null", pa.table(good, schema=not_null))
    assert load_key_index(view, "not-null", 100).probe(h1, h2).tolist() == list(range(100))
    for name, table in bad.items():
        _write_table(location, name.replace(" ", "-"), table)
        with pytest.raises(CorruptInputError, match="Cannot use key index"):
            load_key_index(view, name.replace(" ", "-"), 100)
    assert keyindex._CACHE.usage()[0] == 1  # the not-null one


def test_the_cache_bounds_read_rows_and_mapped_files_apart(tmp_path: Path) -> None:
    location = resolve_location(str(tmp_path))
    remote = _fsspec_view(location)
    for i in range(4):
        write_key_index(location, f"f{i}", *_hashes(10, i))
    cache = keyindex._Cache(max_rows=25, max_maps=2)
    indexes = {(i, r): load_key_index(remote if r else location, f"f{i}", 10)
               for i in range(4) for r in (False, True)}  # fmt: skip
    for (i, r), index in indexes.items():
        cache.put(f"{i}-{r}", index, mapped=not r)
    assert cache.usage() == (4, 20, 2)  # two of each kind: the two oldest of each evicted
    assert cache.get("0-False") is None and cache.get("1-True") is None
    assert cache.get("3-False") is indexes[3, False] and cache.get("2-True") is indexes[2, True]
    cache.put("3-False", indexes[3, False], mapped=True)  # already there: counted once
    assert cache.usage() == (4, 20, 2)
    cache.clear()
    assert cache.usage() == (0, 0, 0)


def _keyed(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    """Keyed by url u0..u89 in three batches of fragments of 10 rows; u5 and u50 deleted."""
    t = wh.create_table(name, {"url": "string", "x": "bigint"}, key="url",
                        properties={"write.target_fragment_rows": 10})  # fmt: skip
    for start in (0, 30, 60):
        xs = list(range(start, start + 30))
        t.upsert(pa.table({"url": [f"u{i}" for i in xs], "x": xs}))
    t.delete(pc.field("url").isin(["u5", "u50"]))
    return t


def test_cold_lookups_equal_warm_ones_and_a_filtered_read(wh: omnitable.Warehouse) -> None:
    t = _keyed(wh, "cold")
    keys = [f"u{i}" for i in (88, 5, 3, 61, 95, 50, 30, 0, 59)]
    expected = t.read(where=pc.field("url").isin(keys)).to_pylist()
    by_url = {r["url"]: r for r in expected}
    keyindex._CACHE.clear()
    cold = t.lookup(keys)
    assert cold.to_pylist() == [by_url[k] for k in keys if k in by_url]
    assert keyindex._CACHE.usage() == (9, 0, 9)  # every live fragment's file, mapped
    assert t.lookup(keys).equals(cold)


def test_a_damaged_index_file_fails_the_lookup(wh: omnitable.Warehouse) -> None:
    t = _keyed(wh, "damaged")
    frag = t.snapshot().fragments[4]
    path = t.location.child_path(index_path(frag.path))
    assert t.lookup(["u1"]).num_rows == 1
    _damage(path, "tail cut")
    assert t.lookup(["u1"]).num_rows == 1  # the loaded index is kept: files never change
    keyindex._CACHE.clear()
    with pytest.raises(CorruptInputError, match="Cannot read key index"):
        t.lookup(["u1"])
