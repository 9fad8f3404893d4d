"""Lineage queries: which input files produced each visible derived file (docs/catalog.md)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import text

from omnitable.catalog.snapshot import Snapshot, visible_clause
from omnitable.catalog.sql import in_list
from omnitable.catalog.store import CatalogStore


def read_sets(
    store: CatalogStore, table_id: str, snap: Snapshot
) -> dict[str, dict[str, str | None]]:
    """Read set of every derived file visible in ``snap``: file id -> input column -> input file."""
    params: dict[str, Any] = {"t": table_id}
    vis = visible_clause("fi", "files", snap.segments, params)
    out: dict[str, dict[str, str | None]] = {}
    with store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT l.file_id, l.inputs FROM lineage l JOIN files fi ON fi.table_id = "
                f"l.table_id AND fi.file_id = l.file_id WHERE l.table_id = :t AND {vis}"
            ),
            params,
        )
        for r in rows:
            if r.file_id not in out:  # every output column of a file has the same inputs
                out[r.file_id] = {i["column"]: i["file_id"] for i in json.loads(r.inputs)}
    return out


def column_lineage(
    store: CatalogStore, table_id: str, snap: Snapshot, column_id: int
) -> list[dict[str, Any]]:
    """Lineage rows of one column's files visible in ``snap`` (superseded files included):
    ``file_id``, ``fragment_id``, ``path``, ``added_version``, ``feature``, ``feature_version``,
    ``inputs`` (decoded), ``run_id``, ``engine``."""
    params: dict[str, Any] = {"t": table_id, "c": column_id}
    vis = visible_clause("fi", "files", snap.segments, params)
    with store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT l.*, fi.fragment_id, fi.path, fi.added_version FROM lineage l JOIN files "
                "fi ON fi.table_id = l.table_id AND fi.file_id = l.file_id WHERE l.table_id = :t "
                f"AND l.column_id = :c AND {vis}"
            ),
            params,
        ).fetchall()
    return [
        {
            "file_id": r.file_id,
            "fragment_id": r.fragment_id,
            "path": r.path,
            "added_version": int(r.added_version),
            "feature": r.feature,
            "feature_version": r.feature_version,
            "inputs": json.loads(r.inputs),
            "run_id": r.run_id,
            "engine": r.engine,
        }
        for r in rows
    ]


def rows_of(store: CatalogStore, table_id: str, file_ids: list[str]) -> list[dict[str, Any]]:
    """The lineage rows of these files: ``file_id``, ``column_id``, ``feature``,
    ``feature_version``, ``inputs`` (decoded), ``run_id``, ``engine``, ``error_count``."""
    out: list[dict[str, Any]] = []
    with store.read() as conn:
        for i in range(0, len(file_ids), 500):
            params: dict[str, Any] = {"t": table_id}
            marks = in_list("file_id", "f", file_ids[i : i + 500], params)
            for r in conn.execute(
                text(f"SELECT * FROM lineage WHERE table_id = :t AND {marks}"), params
            ):
                row = dict(r._mapping)
                row["inputs"] = json.loads(row["inputs"])
                out.append(row)
    return out
