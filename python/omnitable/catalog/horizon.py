"""The expiry horizons of a table: which old versions an ``expire`` commit made unreadable.

An expire commit (governance/expire.py, docs/governance.md "Expiring versions") deletes catalog
rows that no retained snapshot sees. The versions it gave up are recorded here, in the existing
``omnitable_meta`` table under the key ``expiry:<table_id>`` (the catalog schema is not changed
for it): a JSON object ``{"horizons": {branch: version}, "kept": [versions], "version": v}``.
A version ``x`` committed on branch ``b`` is **expired** when ``x < horizons[b]`` and ``x`` is
not in ``kept`` (the versions below a horizon that a tag, a branch's fork point or a head still
pins). Resolving an expired version (time travel, a ref or rollback to it) fails with
:class:`~omnitable.exceptions.NotFoundError` naming the horizon, instead of reading the partial
state the purge left behind. The key's table id is unique, so a dropped table's record is inert.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection, text

from omnitable.catalog.records import TableRecord
from omnitable.exceptions import NotFoundError


@dataclass(frozen=True)
class ExpiryRecord:
    """``horizons``: per branch, its oldest readable version of its own commits; ``kept``:
    pinned versions below a horizon (still readable); ``version``: the latest expire commit."""

    horizons: dict[str, int]
    kept: frozenset[int]
    version: int

    def expired(self, branch: str, version: int) -> bool:
        h = self.horizons.get(branch)
        return h is not None and version < h and version not in self.kept

    def to_json(self) -> str:
        doc = {"horizons": self.horizons, "kept": sorted(self.kept), "version": self.version}
        return json.dumps(doc, sort_keys=True)


def meta_key(table_id: str) -> str:
    return f"expiry:{table_id}"


def read_record(conn: Connection, table_id: str) -> ExpiryRecord | None:
    raw = conn.execute(
        text("SELECT value FROM omnitable_meta WHERE key = :k"), {"k": meta_key(table_id)}
    ).scalar()
    if raw is None:
        return None
    doc = json.loads(raw)
    horizons = {str(b): int(v) for b, v in doc["horizons"].items()}
    return ExpiryRecord(horizons, frozenset(int(v) for v in doc["kept"]), int(doc["version"]))


def write_record(conn: Connection, table_id: str, record: ExpiryRecord) -> None:
    key = meta_key(table_id)
    conn.execute(text("DELETE FROM omnitable_meta WHERE key = :k"), {"k": key})
    conn.execute(
        text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
        {"k": key, "v": record.to_json()},
    )


def check_not_expired(conn: Connection, table: TableRecord, branch: str, version: int) -> None:
    """Raise when ``version`` (committed on ``branch``) was expired.

    Raises:
        NotFoundError: naming the branch's horizon and the expire commit.
    """
    record = read_record(conn, table.table_id)
    if record is None or not record.expired(branch, version):
        return
    raise NotFoundError(
        f"Cannot resolve version {version} of table '{table.name}': it was expired (the expire "
        f"commit at version {record.version} removed the versions of branch '{branch}' older "
        f"than its horizon, version {record.horizons[branch]}); read version "
        f"{record.horizons[branch]} or later, or a tag"
    )
