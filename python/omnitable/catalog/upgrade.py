"""In-place upgrade of an older catalog schema to the one this release ships (docs/catalog.md,
"Upgrading a catalog").

Version 1 -> 2: commits get their ``commit_token`` (NULL for old commits), runs their driver
``host``, ``pid`` and ``heartbeat_at`` (NULL), and features their ``registered_version``: the
version of the commit that registered them (version 1 wrote a registration's ``registered_at``
with its commit's ``committed_at``, so it is the table's latest commit at that instant).
Version 2 -> 3: ``file_columns`` (one row per file and column) becomes column sets shared by the
files (``column_sets``) plus one ``stats`` value per file; batches get their row and fragment
counts. Version 3 -> 4: the ``deletion_vectors`` table (empty: no older release deletes rows),
and ``columns`` keyed by (table, column, added_version) so a column can have a row per rename,
retire and restore. Version 4 -> 5: the ``removals`` table (empty: no older release commits on a
branch other than main), the tags' retention ``refs.max_age_s``, and ``features`` rows per
registration and branch (keyed by (table, name, version, registered_version); every old row is
main's). Version 5 -> 6: the ``namespaces`` table with ``default``, and ``tables`` keyed by
(namespace, name) (a table rebuild); every existing table is in ``default`` and keeps its
location. Version 6 -> 7: batches and fragments get their read ``position``, the batch's
``added_version`` for every existing row (the order readers used until version 7, exactly).
An older catalog goes through every step from its version. Everything runs in one write transaction: a crash or
an error leaves the older catalog as it was.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Connection, text

from omnitable._failpoints import failpoint
from omnitable.catalog import namespaces
from omnitable.catalog.address import CatalogAddress
from omnitable.catalog.sets import ColumnSet, encode_stats, insert_missing_sets
from omnitable.catalog.store import CatalogStore, schema_statements, schema_version
from omnitable.exceptions import CatalogVersionError
from omnitable.vocabulary.names import DEFAULT_NAMESPACE
from omnitable.vocabulary.stats import ColumnStats

_FILE_COLUMNS = (
    "table_id, file_id, fragment_id, group_name, path, row_count, size_bytes, branch, "
    "added_version, removed_version, run_id"
)


def upgrade_catalog(address: CatalogAddress) -> tuple[int, int]:
    """Upgrade the catalog at ``address`` to this release's schema; returns (from, to).

    A catalog already at this version is left alone. Readers and writers of the older release
    refuse the upgraded catalog (their schema check), so upgrade every client together.

    Raises:
        CatalogVersionError: a version this release cannot upgrade (newer, or unknown).
    """
    store = CatalogStore(address)
    try:
        with store.write() as conn:
            found = conn.execute(
                text("SELECT value FROM omnitable_meta WHERE key = 'schema_version'")
            ).scalar()
            target = schema_version()
            if str(found) == str(target):
                return target, target
            if str(found) not in ("1", "2", "3", "4", "5", "6") or target != 7:
                raise CatalogVersionError(
                    f"Cannot upgrade catalog {address.redacted()}: it has schema version "
                    f"{found}, and this omnitable upgrades only versions 1 to 6 to {target}; use "
                    "the omnitable release that matches it"
                )
            _upgrade_steps(conn, int(str(found)), store.is_sqlite)
            conn.execute(
                text("UPDATE omnitable_meta SET value = :v WHERE key = 'schema_version'"),
                {"v": str(target)},
            )
            failpoint("upgrade.before_commit")
            return int(str(found)), target
    finally:
        store.close()


def _upgrade_steps(conn: Connection, found: int, is_sqlite: bool) -> None:
    """Every step from version ``found`` to the current one, in order."""
    steps = (
        _upgrade_1_to_2,
        _upgrade_2_to_3,
        _upgrade_3_to_4,
        _upgrade_4_to_5,
        _upgrade_5_to_6,
        _upgrade_6_to_7,
    )
    for step in steps[found - 1 :]:
        step(conn, is_sqlite)


def _upgrade_1_to_2(conn: Connection, is_sqlite: bool) -> None:
    """Add the commit token, the runs' driver columns and the features' registered version."""
    conn.execute(text("ALTER TABLE commits ADD COLUMN commit_token TEXT"))
    conn.execute(text("CREATE INDEX commits_by_token ON commits (table_id, commit_token)"))
    for name, kind in (("host", "TEXT"), ("pid", "BIGINT"), ("heartbeat_at", "TEXT")):
        conn.execute(text(f"ALTER TABLE runs ADD COLUMN {name} {kind}"))
    conn.execute(
        text("ALTER TABLE features ADD COLUMN registered_version BIGINT NOT NULL DEFAULT 0")
    )
    conn.execute(
        text(
            "UPDATE features SET registered_version = (SELECT COALESCE(MAX(c.version), 0) "
            "FROM commits c WHERE c.table_id = features.table_id "
            "AND c.committed_at <= features.registered_at)"
        )
    )


def _upgrade_2_to_3(conn: Connection, is_sqlite: bool) -> None:
    """Count each batch's rows and fragments onto its row; move ``files`` aside, create the
    version-3 tables, and copy every file with its set and statistics built from its
    ``file_columns`` rows."""
    for index in ("files_by_fragment", "files_by_version"):
        conn.execute(text(f"DROP INDEX IF EXISTS {index}"))
    if not is_sqlite:  # the new table's key takes the usual name
        conn.execute(text("ALTER TABLE files RENAME CONSTRAINT files_pkey TO files_v2_pkey"))
    conn.execute(text("ALTER TABLE files RENAME TO files_v2"))
    for stmt in schema_statements():  # IF NOT EXISTS: creates files, column_sets and indexes
        conn.execute(text(stmt))
    for name in ("row_count", "fragment_count"):
        conn.execute(text(f"ALTER TABLE batches ADD COLUMN {name} BIGINT NOT NULL DEFAULT 0"))
    conn.execute(
        text(
            "UPDATE batches SET row_count = (SELECT COALESCE(SUM(f.row_count), 0) FROM fragments f "
            "WHERE f.table_id = batches.table_id AND f.batch_id = batches.batch_id), "
            "fragment_count = (SELECT COUNT(*) FROM fragments f "
            "WHERE f.table_id = batches.table_id AND f.batch_id = batches.batch_id)"
        )
    )
    table_ids = [r[0] for r in conn.execute(text("SELECT DISTINCT table_id FROM files_v2"))]
    for table_id in table_ids:
        _copy_table_files(conn, table_id)
    conn.execute(text("DROP TABLE file_columns"))
    conn.execute(text("DROP TABLE files_v2"))


_COLUMNS = (
    "table_id, column_id, name, physical_name, data_type, nullable, position, state, group_name, "
    "feature, branch, added_version, removed_version"
)


def _upgrade_3_to_4(conn: Connection, is_sqlite: bool) -> None:
    """Re-key ``columns`` by (table, column, added_version) (a table rebuild: SQLite cannot
    change a key in place) and create ``deletion_vectors``."""
    if not is_sqlite:  # the new table's key takes the usual name
        conn.execute(text("ALTER TABLE columns RENAME CONSTRAINT columns_pkey TO columns_v3_pkey"))
    conn.execute(text("ALTER TABLE columns RENAME TO columns_v3"))
    for stmt in schema_statements():  # IF NOT EXISTS: creates columns and deletion_vectors
        conn.execute(text(stmt))
    conn.execute(text(f"INSERT INTO columns ({_COLUMNS}) SELECT {_COLUMNS} FROM columns_v3"))
    conn.execute(text("DROP TABLE columns_v3"))


_FEATURES = (
    "table_id, name, version, kind, definition, fingerprint, registered_at, registered_version"
)


def _upgrade_4_to_5(conn: Connection, is_sqlite: bool) -> None:
    """Create ``removals``, give ``refs`` the tags' retention column, re-key ``features`` with
    a branch (a table rebuild: SQLite cannot change a key in place)."""
    if not is_sqlite:  # the new table's key takes the usual name
        conn.execute(
            text("ALTER TABLE features RENAME CONSTRAINT features_pkey TO features_v4_pkey")
        )
    conn.execute(text("ALTER TABLE features RENAME TO features_v4"))
    for stmt in schema_statements():  # IF NOT EXISTS: creates removals, its index, features
        conn.execute(text(stmt))
    conn.execute(text("ALTER TABLE refs ADD COLUMN max_age_s BIGINT"))
    conn.execute(
        text(
            f"INSERT INTO features ({_FEATURES}, branch) SELECT {_FEATURES}, 'main' "
            "FROM features_v4"
        )
    )
    conn.execute(text("DROP TABLE features_v4"))


def _copy_table_files(conn: Connection, table_id: str) -> None:
    """Copy one table's files (a table at a time bounds the memory to its statistics)."""
    members: dict[str, dict[int, str | None]] = defaultdict(dict)
    stats: dict[str, dict[int, ColumnStats]] = defaultdict(dict)
    for r in conn.execute(
        text(
            "SELECT file_id, column_id, null_count, min_value, max_value, feature_version "
            "FROM file_columns WHERE table_id = :t"
        ),
        {"t": table_id},
    ):
        cid = int(r.column_id)
        members[r.file_id][cid] = r.feature_version
        nc = 0 if r.null_count is None else int(r.null_count)
        stats[r.file_id][cid] = ColumnStats(nc, r.min_value, r.max_value)
    rows: list[dict[str, Any]] = []
    sets: dict[str, ColumnSet] = {}
    for r in conn.execute(
        text(f"SELECT {_FILE_COLUMNS} FROM files_v2 WHERE table_id = :t"), {"t": table_id}
    ):
        column_set = ColumnSet.of(members.get(r.file_id, {}))
        sets[column_set.set_id] = column_set
        row = dict(r._mapping)
        row["set_id"] = column_set.set_id
        row["stats"] = encode_stats(column_set, stats.get(r.file_id, {}))
        rows.append(row)
    insert_missing_sets(conn, table_id, sets.values())
    if rows:
        names = _FILE_COLUMNS + ", set_id, stats"
        marks = ", ".join(":" + n.strip() for n in names.split(","))
        conn.execute(text(f"INSERT INTO files ({names}) VALUES ({marks})"), rows)


_TABLES = "table_id, name, location, next_row_id, next_column_id, properties, created_at"


def _upgrade_5_to_6(conn: Connection, is_sqlite: bool) -> None:
    """Create ``namespaces`` with ``default``; re-key ``tables`` by (namespace, name) (a table
    rebuild: SQLite cannot change a constraint in place), every table in ``default``."""
    if not is_sqlite:  # the new table's constraints take the usual names
        for old in ("tables_pkey", "tables_name_key"):
            conn.execute(
                text(f"ALTER TABLE tables RENAME CONSTRAINT {old} TO {old.replace('_', '_v5_', 1)}")
            )
    conn.execute(text("ALTER TABLE tables RENAME TO tables_v5"))
    for stmt in schema_statements():  # IF NOT EXISTS: creates namespaces and tables
        conn.execute(text(stmt))
    namespaces.ensure_default(conn)
    conn.execute(
        text(f"INSERT INTO tables ({_TABLES}, namespace) SELECT {_TABLES}, :ns FROM tables_v5"),
        {"ns": DEFAULT_NAMESPACE},
    )
    conn.execute(text("DROP TABLE tables_v5"))


def _upgrade_6_to_7(conn: Connection, is_sqlite: bool) -> None:
    """Give batches and fragments their read position: a batch's ``added_version`` (today's
    order exactly), a fragment's that of its batch (its own: fragments are added with their
    batch). The column is added with a default (SQLite adds a NOT NULL column only with one);
    PostgreSQL drops it again, so both catalogs refuse a writer that forgets the position."""
    for table in ("batches", "fragments"):
        conn.execute(text(f"ALTER TABLE {table} ADD COLUMN position BIGINT NOT NULL DEFAULT 0"))
        conn.execute(text(f"UPDATE {table} SET position = added_version"))
        if not is_sqlite:
            conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN position DROP DEFAULT"))
