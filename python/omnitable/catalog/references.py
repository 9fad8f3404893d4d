"""Every path under a table's location that a catalog row can reference (orphan cleanup,
docs/governance.md "Removing orphan files").

A path is **referenced** when any ``files`` row of the table (every branch, deleted branches,
every version, removed rows included) names it; when it is the key index
(``<fragment path>/_key_index.arrow``, format/keyindex.py) of any ``fragments`` row; when a
``features`` row's definition names it as its pickled payload (``payload.path``,
features/payload.py); or when it lies under the table's error table (``error_tables.location``,
a Delta table that manages its own files) or under ``errors/`` (where exec/errors.py puts it) or ``views/`` (the Delta tables of hot
column-group views, catalog/views.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

KEY_INDEX_FILE = "_key_index.arrow"  # format/keyindex.py INDEX_FILE (catalog sits below format)
ERRORS_DIR = "errors"  # exec/errors.py error_location
VIEWS_DIR = "views"
"""Where catalog/views.py puts the Delta tables of hot column-group views."""


@dataclass(frozen=True)
class References:
    """``paths``: referenced files (relative to the table location); ``prefixes``: directories
    whose whole content is kept (relative, ending in ``/``)."""

    paths: frozenset[str]
    prefixes: tuple[str, ...]

    def covers(self, rel: str) -> bool:
        return rel in self.paths or rel.startswith(self.prefixes)


def references(conn: Connection, table_id: str, location_uri: str) -> References:
    """What the catalog rows of ``table_id`` reference under the table location (whose URI is
    ``location_uri``, to make an error table's location relative)."""
    p = {"t": table_id}
    paths = {str(r[0]) for r in conn.execute(text("SELECT path FROM files WHERE table_id = :t"), p)}
    frags = conn.execute(text("SELECT DISTINCT path FROM fragments WHERE table_id = :t"), p)
    paths.update(f"{r[0]}/{KEY_INDEX_FILE}" for r in frags)
    defs = conn.execute(text("SELECT definition FROM features WHERE table_id = :t"), p)
    paths.update(_payload_paths(r[0] for r in defs))
    prefixes = [ERRORS_DIR + "/", VIEWS_DIR + "/"]
    errs = conn.execute(text("SELECT location FROM error_tables WHERE table_id = :t"), p)
    base = location_uri.rstrip("/") + "/"
    for (loc,) in errs:
        loc = str(loc).rstrip("/") + "/"
        if loc.startswith(base):
            prefixes.append(loc[len(base) :])
    return References(frozenset(paths), tuple(prefixes))


def still_referenced(conn: Connection, table_id: str, rels: Iterable[str]) -> set[str]:
    """Which of ``rels`` a ``files`` row, a fragment's key index or a feature payload names now."""
    wanted = set(rels)
    refs = references(conn, table_id, "")
    return {r for r in wanted if r in refs.paths}


def _payload_paths(definitions: Iterable[Any]) -> set[str]:
    out = set()
    for raw in definitions:
        try:
            doc = json.loads(raw)
        except (TypeError, ValueError):
            continue
        payload = doc.get("payload") if isinstance(doc, dict) else None
        if isinstance(payload, dict) and isinstance(payload.get("path"), str):
            out.add(payload["path"])
    return out
