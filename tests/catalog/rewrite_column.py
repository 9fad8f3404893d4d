"""Test helper run as a separate process: rewrite one existing column of every fragment of a
table (as a backfill would) and commit, optionally waiting at a barrier so two processes commit
from the same base version. Prints 'committed <version>' or 'conflict <message>'."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa

import omnitable
from omnitable.catalog.commit import CommitRequest
from omnitable.format.writer import write_column_file


def rewrite(uri: str, root: str, table_name: str, column: str, barrier: str | None) -> str:
    wh = omnitable.connect(uri, root=root or None)
    table = wh.table(table_name)
    snap = table.snapshot()
    col = snap.column(column)
    files = []
    for frag in snap.fragments:
        data = pa.table({column: pa.array([1.5] * frag.row_count, col.arrow_type)})
        files.append(
            write_column_file(
                table.location,
                frag.fragment_id,
                frag.path,
                f"{column}-v2",
                data,
                {},
                wh.write_options,
            )
        )
    if barrier:
        Path(barrier, f"ready-{column}-{time.monotonic_ns()}").touch()
        while not Path(barrier, "go").exists():
            time.sleep(0.01)
    req = CommitRequest(op="rewrite", base_version=snap.version, new_files=files)
    try:
        version = wh.catalog.commit(table.record, req)
    except omnitable.CommitConflict as exc:
        return f"conflict {exc}"
    return f"committed {version}"


if __name__ == "__main__":
    uri, root, name, column = sys.argv[1:5]
    barrier = sys.argv[5] if len(sys.argv) > 5 else None
    print(rewrite(uri, root, name, column, barrier), flush=True)
