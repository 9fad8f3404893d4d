"""Optimistic concurrency at (fragment, column) grain, between real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.catalog.commit import CommitRequest
from omnitable.format.writer import write_column_file

HELPER = str(Path(__file__).with_name("rewrite_column.py"))


def _make_table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table(
        "web", {"a": "double", "b": "double", "c": "double"}, groups={"ga": ["a"], "gb": ["b"]}
    )
    t.append(
        pa.table({"a": [1.0] * 10, "b": [2.0] * 10, "c": [3.0] * 10}), "b1", target_fragment_rows=4
    )
    return t


def _race(catalog_spec: tuple[str, str | None], tmp_path: Path, columns: list[str]) -> list[str]:
    uri, root = catalog_spec
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    procs = [
        subprocess.Popen(
            [sys.executable, HELPER, uri, root or "", "web", col, str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for col in columns
    ]
    deadline = time.monotonic() + 120
    while len(list(barrier.glob("ready-*"))) < len(columns):
        assert time.monotonic() < deadline, "writers did not reach the barrier"
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.02)
    (barrier / "go").touch()
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def test_disjoint_columns_from_two_processes_both_commit(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], tmp_path: Path
) -> None:
    t = _make_table(wh)
    base = t.version
    outs = _race(catalog_spec, tmp_path, ["a", "b"])
    assert all(o.startswith("committed") for o in outs), outs
    assert t.version == base + 2
    got = t.read(columns=["a", "b", "c"])
    assert got.column("a").to_pylist() == [1.5] * 10
    assert got.column("b").to_pylist() == [1.5] * 10
    assert got.column("c").to_pylist() == [3.0] * 10


def test_same_column_from_two_processes_one_conflict(
    wh: omnitable.Warehouse, catalog_spec: tuple[str, str | None], tmp_path: Path
) -> None:
    t = _make_table(wh)
    base = t.version
    outs = _race(catalog_spec, tmp_path, ["a", "a"])
    assert sorted(o.split()[0] for o in outs) == ["committed", "conflict"], outs
    conflict = next(o for o in outs if o.startswith("conflict"))
    assert "wrote column(s) a" in conflict and "nothing was committed" in conflict
    assert t.version == base + 1


def test_conflict_lists_cells_and_applies_nothing(wh: omnitable.Warehouse) -> None:
    t = _make_table(wh)
    snap = t.snapshot()

    def files_for(column: str) -> list:  # type: ignore[type-arg]
        return [
            write_column_file(
                t.location,
                f.fragment_id,
                f.path,
                f"{column}-x",
                pa.table({column: [9.0] * f.row_count}),
                {},
                wh.write_options,
            )
            for f in snap.fragments
        ]

    first = files_for("a")
    second = files_for("a") + files_for("c")
    wh.catalog.commit(t.record, CommitRequest("rewrite", snap.version, new_files=first))
    version = t.version
    with pytest.raises(omnitable.CommitConflict) as info:
        wh.catalog.commit(t.record, CommitRequest("rewrite", snap.version, new_files=second))
    assert {c for _, c in info.value.conflicts} == {"a"}
    assert {f for f, _ in info.value.conflicts} == {f.fragment_id for f in snap.fragments}
    assert t.version == version
    assert t.read(columns=["c"]).column("c").to_pylist() == [3.0] * 10  # "c" part not applied


def test_concurrent_appends_of_the_same_batch_name_conflict(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("t", {"x": "int"})
    snap = t.snapshot()
    t.append(pa.table({"x": pa.array([1], pa.int32())}), "b1")
    from omnitable.format.writer import new_id

    req = CommitRequest("append", snap.version, new_batches=[(new_id(), "b1")])
    with pytest.raises(omnitable.CommitConflict, match="concurrent commit created it first"):
        wh.catalog.commit(t.record, req)


def test_fragments_come_only_with_a_new_batch(wh: omnitable.Warehouse) -> None:
    """A batch's fragments are added with it (its stored counts stay true): a fragment for an
    existing batch is refused and nothing is committed."""
    from omnitable.vocabulary.descriptors import FragmentDescriptor

    t = _make_table(wh)
    snap = t.snapshot()
    existing = snap.fragments[0].batch_id
    stray = FragmentDescriptor("fr-stray", existing, 1, "f/stray")
    with pytest.raises(omnitable.ValidationError, match="does not create"):
        wh.catalog.commit(t.record, CommitRequest("append", snap.version, new_fragments=[stray]))
    assert t.version == snap.version
    assert [(b.rows, b.fragments) for b in t.batches()] == [(10, len(snap.fragments))]
