"""Shared fixtures of the governance tests: a table name unique per test, a decayed table (the
shape compaction and folding both rewrite) and the files under a table's directory."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pytest

import omnitable


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A table name unique to the test (its node id hashed), so tests may share a warehouse."""
    return "t_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]


def decayed_table(wh: omnitable.Warehouse, name: str, *, deletes: bool = True) -> omnitable.Table:
    """Batch b0: 12 rows in 4 fragments and, with ``deletes``, 2 of them deleted (a batch both
    compact and fold rewrite)."""
    t = wh.create_table(name, {"x": "bigint"})
    t.append(pa.table({"x": list(range(12))}), "b0", target_fragment_rows=3)
    if deletes:
        t.delete(pc.field("x") < 2)
    return t


def table_files(t: omnitable.Table) -> set[str]:
    """Every file under the table's directory."""
    sel = pafs.FileSelector(t.location.path, recursive=True, allow_not_found=True)
    return {i.path for i in t.location.fs.get_file_info(sel) if i.type == pafs.FileType.File}
