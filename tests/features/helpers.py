"""Test helper: commit a feature's outputs for some fragments the way a backfill would
(real files, real commits), without Spark, to set up done/stale/missing states."""

from __future__ import annotations

import pyarrow as pa

import omnitable
from omnitable.catalog.commit import CommitRequest, LineageEntry
from omnitable.features.definition import Feature
from omnitable.format.writer import write_column_file


def commit_outputs(
    table: omnitable.Table,
    f: Feature,
    fragment_ids: list[str],
    version: str | None = None,
    read_set: dict[str, str | None] | None = None,
) -> int:
    """Commit NULL outputs of ``f``; ``read_set`` (input column -> file id) is recorded as the
    files' lineage inputs."""
    snap = table.snapshot()
    by_id = {fr.fragment_id: fr for fr in snap.fragments}
    types = f.output_types()
    by_name = {c.name: c for c in snap.columns}
    out_ids = {by_name[o].column_id for o in f.outputs}
    files, removed = [], []
    for fid in fragment_ids:
        frag = by_id[fid]
        data = pa.table({o: pa.nulls(frag.row_count, t) for o, t in types.items()})
        files.append(
            write_column_file(
                table.location,
                fid,
                frag.path,
                f.name,
                data,
                {},
                table.warehouse.write_options,
                {o: version or f.version for o in f.outputs},
            )
        )
        removed += [
            x.file_id
            for x in snap.files_by_fragment.get(fid, [])
            if x.group_name == f.name and set(x.columns) <= out_ids
        ]
    lineage = [
        LineageEntry(
            d.file_id,
            o,
            f.name,
            version or f.version,
            [{"column": c, "file_id": i, "version": None} for c, i in read_set.items()],
            f.kind,
        )
        for d in files
        for o in f.outputs
        if read_set is not None
    ]
    req = CommitRequest(
        "backfill", snap.version, new_files=files, removed_files=removed, lineage=lineage
    )
    return table.warehouse.catalog.commit(table.record, req)
