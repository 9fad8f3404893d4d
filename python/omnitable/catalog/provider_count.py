"""How many files provide some columns of a whole snapshot, counted by the database.

A plan of a full scan reports how many files its read would open (:meth:`Snapshot.count_providers`:
per fragment, the files :meth:`Snapshot.resolve` picks). Loading a record per file to count
them costs more than the rest of the plan (600 K files at 300 K fragments: ~1.5 of ~2.7 s), so
this counts them in SQL instead, for a snapshot loaded without its files:

1. the column sets holding a wanted column (one small statement);
2. the visible files of those sets (``COUNT(*)``, from the ``files_by_set`` index alone);
3. the fragments where two files carry one wanted column (an update's overlay over its base
   file, a column written twice): for each list of sets that carry a wanted column, the
   fragments with more than one file of those sets (``GROUP BY ... HAVING``);
4. the fragments of 3, and those of the snapshot left out of the count (e.g. deleted through),
   have their files loaded and are counted in Python: the count of 2 less their files, plus
   what :meth:`Snapshot.count_providers` says of the fragments of 3 that are counted.

Every visible file belongs to a visible fragment of a visible batch (a commit that removes a
batch removes its fragments, and a removed fragment's files go with it: ``commit.py``
``_apply_removals``), so the files of 2 are those of the snapshot's fragments. When too many
column-set lists or special fragments would make the statements unwieldy, every file of the
wanted sets is loaded and counted as :meth:`Snapshot.count_providers` would: same answer, the
cost of a plan that loads files.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.horizon import check_not_expired
from omnitable.catalog.snapshot import Snapshot, load_files, visible_clause
from omnitable.catalog.sql import in_list
from omnitable.exceptions import NotFoundError

MAX_CARRIER_LISTS = 64
"""At most this many distinct lists of sets carrying a wanted column are checked for overlays
in SQL (one ``SUM`` each); more: the files are loaded."""

PG_SETTINGS = ("work_mem = '64MB'", "jit = off")
"""PostgreSQL settings of a count's read transaction: the grouping of 600,000 files by fragment
spilled to disk in the default 4 MB (0.55 -> 0.48 s at the issue-19 size), and compiling the two
statements took 20-50 ms each."""

MAX_SPECIAL_FRAGMENTS = 20_000
"""At most this many fragments with overlays or left out are loaded by name; more: every file
of the wanted sets is loaded."""


def count_providers_in_catalog(
    conn: Connection, snap: Snapshot, fragment_ids: Collection[str], column_ids: list[int]
) -> int:
    """:meth:`Snapshot.count_providers` of ``fragment_ids`` (fragments of ``snap``, which was
    loaded with every batch, with or without files), answered by the catalog's statements.

    Raises:
        ValueError: ``snap`` was loaded for some batches only (its other fragments' files would
            be counted).
        ValidationError: a column outside the snapshot's loaded scope.
        NotFoundError: the snapshot's version was expired since it was loaded (the rows it
            shows may be gone; the count would be wrong).
    """
    if snap.scope.batches is not None:
        raise ValueError("count_providers_in_catalog needs a snapshot of every batch")
    snap.count_providers((), column_ids)  # the column-scope check
    if not column_ids or not fragment_ids:
        return 0
    if conn.dialect.name == "postgresql":  # this transaction only
        for setting in PG_SETTINGS:
            conn.execute(text(f"SET LOCAL {setting}"))
    count = _count(conn, snap, fragment_ids, column_ids)
    _check_still_readable(conn, snap)  # checked after: an expiry seen by a count is seen here
    return count


def _count(
    conn: Connection, snap: Snapshot, fragment_ids: Collection[str], column_ids: list[int]
) -> int:
    carriers = _carrier_lists(conn, snap, column_ids)
    if not carriers:
        return 0
    if len(carriers) > MAX_CARRIER_LISTS:
        return _count_loaded(conn, snap, fragment_ids, column_ids, None)
    wanted_sets = sorted({s for sets in carriers for s in sets})
    total, overlaid = _count_in_sql(conn, snap, wanted_sets, carriers)
    counted = set(fragment_ids)
    left_out = [f.fragment_id for f in snap.fragments if f.fragment_id not in counted]
    special = sorted({*overlaid, *left_out})
    if len(special) > MAX_SPECIAL_FRAGMENTS:
        return _count_loaded(conn, snap, fragment_ids, column_ids, None)
    if not special:
        return total
    files = load_files(conn, snap.table, snap.segments, None, special, column_ids, False)
    listed = sum(len(fs) for fs in files.values())
    return total - listed + _count_loaded(conn, snap, counted.intersection(overlaid),
                                          column_ids, files)  # fmt: skip


def _check_still_readable(conn: Connection, snap: Snapshot) -> None:
    """Raises NotFoundError when the snapshot's version was expired (its load checked it, but
    this count runs in a later transaction)."""
    row = conn.execute(
        text("SELECT branch FROM commits WHERE table_id = :t AND version = :v"),
        {"t": snap.table.table_id, "v": snap.version},
    ).first()
    if row is None:
        raise NotFoundError(
            f"Cannot count the files of version {snap.version} of table '{snap.table.name}': "
            "its commit is gone (the table was dropped?); plan again"
        )
    check_not_expired(conn, snap.table, row.branch, snap.version)


def _carrier_lists(
    conn: Connection, snap: Snapshot, column_ids: list[int]
) -> list[tuple[str, ...]]:
    """The distinct lists of column sets carrying a wanted column (one list per column,
    duplicates merged), each sorted."""
    params: dict[str, Any] = {"t": snap.table.table_id}
    of_columns = in_list("cs.column_id", "cid", sorted(set(column_ids)), params)
    by_column: dict[int, list[str]] = defaultdict(list)
    statement = "SELECT cs.set_id, cs.column_id FROM column_sets cs WHERE cs.table_id = :t AND "
    for set_id, column_id in conn.execute(text(statement + of_columns), params).all():
        by_column[int(column_id)].append(set_id)
    return sorted({tuple(sorted(sets)) for sets in by_column.values()})


def _count_in_sql(
    conn: Connection, snap: Snapshot, wanted_sets: list[str], carriers: list[tuple[str, ...]]
) -> tuple[int, list[str]]:
    """The visible files of ``wanted_sets``, and the fragments where more than one file is of
    one carrier list (two files carry one wanted column)."""
    params: dict[str, Any] = {"t": snap.table.table_id}
    where = visible_clause("fi", "files", snap.segments, params)
    where += " AND " + in_list("fi.set_id", "ws", wanted_sets, params)
    files = "FROM files fi WHERE fi.table_id = :t AND " + where
    total = int(conn.execute(text("SELECT COUNT(*) " + files), params).scalar_one())
    index = {s: i for i, s in enumerate(wanted_sets)}
    sums = [
        "SUM(CASE WHEN fi.set_id IN ("
        + ", ".join(f":ws{index[s]}" for s in sets)
        + ") THEN 1 ELSE 0 END) > 1"
        for sets in carriers
    ]
    # SQLite groups by `|| ''`: by the bare id it walks files_by_fragment over every file of
    # the table (all groups', each looked up in the table) instead of the wanted sets' files;
    # PostgreSQL hashes the wanted files either way, and the expression costs it 0.1 s
    sqlite = conn.dialect.name == "sqlite"
    fragment = "(fi.fragment_id || '')" if sqlite else "fi.fragment_id"
    overlaid = conn.execute(
        text(f"SELECT {fragment} {files} GROUP BY {fragment} HAVING " + " OR ".join(sums)),
        params,
    ).all()
    return total, [fid for (fid,) in overlaid]


def _count_loaded(
    conn: Connection,
    snap: Snapshot,
    fragment_ids: Collection[str],
    column_ids: list[int],
    files: dict[str, Any] | None,
) -> int:
    """:meth:`Snapshot.count_providers` of ``fragment_ids`` over ``files`` (None: every file
    of the wanted columns, loaded now)."""
    if files is None:
        files = load_files(conn, snap.table, snap.segments, None, None, column_ids, False)
    return replace(snap, files_by_fragment=files).count_providers(fragment_ids, column_ids)
