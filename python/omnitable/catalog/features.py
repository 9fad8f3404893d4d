"""The ``features`` rows of a snapshot (docs/catalog.md, ``features``): registrations are
visible where their (branch, registered_version) lies inside one of the snapshot's segments."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.snapshot import Segment, within_clause


def feature_rows(
    conn: Connection, t: str, segments: list[Segment], name: str | None = None
) -> list[dict[str, Any]]:
    """The feature rows visible in ``segments`` (of one ``name``), oldest registration first in
    catalog (commit) order; ``definition`` still JSON text."""
    params: dict[str, Any] = {"t": t}
    where = f"table_id = :t AND {within_clause('registered_version', segments, params)}"
    if name is not None:
        where += " AND name = :n"
        params["n"] = name
    rows = conn.execute(
        text(f"SELECT * FROM features WHERE {where} ORDER BY registered_version, name, version"),
        params,
    )
    return [dict(r._mapping) for r in rows]
