"""Upgrading a version-1 catalog (no commit tokens, features without a registered version)
through version 2 (``file_columns``), version 3 (column sets, per-file stats), version 4
(deletion vectors), version 5 (removals of inherited rows, tag retention) and version 6
(namespaces) to version 7 (batch read positions), and a version-2 to 6 one to 7: the upgraded
catalog resolves, plans and reads exactly like before, every table in namespace ``default``,
on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from sqlalchemy import text

import omnitable
from omnitable.catalog.sets import decode_stats
from omnitable.catalog.store import CatalogStore
from omnitable.cli.main import main as cli_main
from omnitable.exceptions import CatalogVersionError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import metadata as bench  # noqa: E402

V2_FILE_COLUMNS = """CREATE TABLE file_columns (
    table_id        TEXT NOT NULL,
    file_id         TEXT NOT NULL,
    column_id       INTEGER NOT NULL,
    null_count      BIGINT,
    min_value       TEXT,
    max_value       TEXT,
    feature_version TEXT,
    PRIMARY KEY (table_id, file_id, column_id)
)"""


V3_COLUMNS = """CREATE TABLE columns (
    table_id        TEXT NOT NULL,
    column_id       INTEGER NOT NULL,
    name            TEXT NOT NULL,
    physical_name   TEXT NOT NULL,
    data_type       TEXT NOT NULL,
    nullable        INTEGER NOT NULL,
    position        INTEGER NOT NULL,
    state           TEXT NOT NULL,
    group_name      TEXT NOT NULL,
    feature         TEXT,
    branch          TEXT NOT NULL,
    added_version   BIGINT NOT NULL,
    removed_version BIGINT,
    PRIMARY KEY (table_id, column_id)
)"""


V4_FEATURES = """CREATE TABLE features (
    table_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    version         TEXT NOT NULL,
    kind            TEXT NOT NULL,
    definition      TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    registered_at   TEXT NOT NULL,
    registered_version BIGINT NOT NULL,
    PRIMARY KEY (table_id, name, version)
)"""
_FEATURE_COLUMNS = (
    "table_id, name, version, kind, definition, fingerprint, registered_at, registered_version"
)

V5_TABLES = """CREATE TABLE tables (
    table_id        TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    location        TEXT NOT NULL,
    next_row_id     BIGINT NOT NULL,
    next_column_id  INTEGER NOT NULL,
    properties      TEXT NOT NULL,
    created_at      TEXT NOT NULL
)"""
_TABLE_COLUMNS = "table_id, name, location, next_row_id, next_column_id, properties, created_at"


def _as_version_6(store: CatalogStore) -> None:
    """Rewrite a version-7 catalog into the version-6 layout: no read positions (a batch read in
    ``added_version`` order)."""
    with store.write() as conn:
        for table in ("batches", "fragments"):
            conn.execute(text(f"ALTER TABLE {table} DROP COLUMN position"))
        conn.execute(text("UPDATE omnitable_meta SET value = '6' WHERE key = 'schema_version'"))


def _as_version_5(store: CatalogStore) -> None:
    """Rewrite a version-7 catalog (every table in ``default``) into the version-5 layout."""
    _as_version_6(store)
    with store.write() as conn:
        others = conn.execute(text("SELECT COUNT(*) FROM tables WHERE namespace <> 'default'"))
        assert others.scalar() == 0
        conn.execute(text("DROP TABLE namespaces"))
        conn.execute(text("ALTER TABLE tables RENAME TO tables_v6"))
        if not store.is_sqlite:
            conn.execute(text("ALTER TABLE tables_v6 RENAME CONSTRAINT tables_pkey TO t6_pkey"))
            conn.execute(
                text("ALTER TABLE tables_v6 RENAME CONSTRAINT tables_namespace_name_key TO t6_key")
            )
        conn.execute(text(V5_TABLES))
        conn.execute(
            text(f"INSERT INTO tables ({_TABLE_COLUMNS}) SELECT {_TABLE_COLUMNS} FROM tables_v6")
        )
        conn.execute(text("DROP TABLE tables_v6"))
        conn.execute(text("UPDATE omnitable_meta SET value = '5' WHERE key = 'schema_version'"))


def _as_version_4(store: CatalogStore) -> None:
    """Rewrite a version-7 catalog (main only: no removals; one registration per feature
    version; every table in ``default``) into the version-4 layout."""
    _as_version_5(store)
    with store.write() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM removals")).scalar() == 0
        conn.execute(text("DROP INDEX removals_by_branch"))
        conn.execute(text("DROP TABLE removals"))
        conn.execute(text("ALTER TABLE refs DROP COLUMN max_age_s"))
        conn.execute(text("ALTER TABLE features RENAME TO features_v5"))
        if not store.is_sqlite:
            conn.execute(text("ALTER TABLE features_v5 RENAME CONSTRAINT features_pkey TO f5_pkey"))
        conn.execute(text(V4_FEATURES))
        conn.execute(
            text(
                f"INSERT INTO features ({_FEATURE_COLUMNS}) SELECT {_FEATURE_COLUMNS} "
                "FROM features_v5"
            )
        )
        conn.execute(text("DROP TABLE features_v5"))
        conn.execute(text("UPDATE omnitable_meta SET value = '4' WHERE key = 'schema_version'"))


def _as_version_3(store: CatalogStore) -> None:
    """Rewrite a version-5 catalog (without deletes or column changes) into the version-3
    layout."""
    _as_version_4(store)
    with store.write() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM deletion_vectors")).scalar() == 0
        conn.execute(text("DROP TABLE deletion_vectors"))
        conn.execute(text("ALTER TABLE columns RENAME TO columns_v4"))
        if not store.is_sqlite:
            conn.execute(text("ALTER TABLE columns_v4 RENAME CONSTRAINT columns_pkey TO c4_pkey"))
        conn.execute(text(V3_COLUMNS))
        conn.execute(text("INSERT INTO columns SELECT * FROM columns_v4"))
        conn.execute(text("DROP TABLE columns_v4"))
        conn.execute(text("UPDATE omnitable_meta SET value = '3' WHERE key = 'schema_version'"))


def _as_version_2(store: CatalogStore) -> int:
    """Rewrite a version-4 catalog into the version-2 layout (the inverse of the upgrades);
    returns the number of ``file_columns`` rows written."""
    _as_version_3(store)
    with store.write() as conn:
        rows = conn.execute(
            text(
                "SELECT fi.table_id, fi.file_id, fi.stats, cs.column_id, cs.position, "
                "cs.feature_version FROM files fi JOIN column_sets cs "
                "ON cs.table_id = fi.table_id AND cs.set_id = fi.set_id"
            )
        ).all()
        conn.execute(text(V2_FILE_COLUMNS))
        params = []
        for r in rows:
            st = decode_stats(r.stats, int(r.position))
            params.append(
                {"t": r.table_id, "f": r.file_id, "c": r.column_id, "n": st.null_count,
                 "lo": st.min_value, "hi": st.max_value, "fv": r.feature_version}
            )  # fmt: skip
        conn.execute(
            text(
                "INSERT INTO file_columns VALUES (:t, :f, :c, :n, :lo, :hi, :fv)",
            ),
            params,
        )
        conn.execute(text("DROP INDEX column_sets_by_column"))
        conn.execute(text("DROP TABLE column_sets"))
        conn.execute(text("DROP INDEX files_by_set"))  # version 2 had neither it nor set_id
        conn.execute(text("ALTER TABLE files DROP COLUMN set_id"))
        conn.execute(text("ALTER TABLE files DROP COLUMN stats"))
        conn.execute(text("ALTER TABLE batches DROP COLUMN row_count"))
        conn.execute(text("ALTER TABLE batches DROP COLUMN fragment_count"))
        conn.execute(text("UPDATE omnitable_meta SET value = '2' WHERE key = 'schema_version'"))
    return len(params)


def _as_version_1(store: CatalogStore) -> int:
    """Rewrite a version-7 catalog into the version-1 layout (``_as_version_2``, then no commit
    tokens, no run driver columns, no registered versions: version 1 wrote a registration's
    ``registered_at`` with its commit's ``committed_at``, as the synthetic rows must too)."""
    written = _as_version_2(store)
    with store.write() as conn:
        conn.execute(text("DROP INDEX commits_by_token"))
        conn.execute(text("ALTER TABLE commits DROP COLUMN commit_token"))
        for name in ("host", "pid", "heartbeat_at"):
            conn.execute(text(f"ALTER TABLE runs DROP COLUMN {name}"))
        conn.execute(text("ALTER TABLE features DROP COLUMN registered_version"))
        conn.execute(text("UPDATE omnitable_meta SET value = '1' WHERE key = 'schema_version'"))
    return written


def _features(wh: omnitable.Warehouse) -> list[tuple[str, str, int]]:
    """The features of ``docs`` (registered through commits, unlike the synthetic table's)."""
    with wh.catalog.store.read() as conn:
        rows = conn.execute(
            text("SELECT name, version, registered_version FROM features WHERE table_id = :t"),
            {"t": wh.table("docs").record.table_id},
        ).all()
    return sorted((r[0], r[1], int(r[2])) for r in rows)


def _check_namespaces_after_upgrade(wh: omnitable.Warehouse) -> None:
    """Every table is in ``default`` (by its name and as ``default.<name>``), and namespaces
    work in the upgraded catalog."""
    assert wh.namespaces() == ["default"]
    assert wh.tables(namespace="default") == wh.tables()
    for name in wh.tables():
        assert wh.table(f"default.{name}").record.table_id == wh.table(name).record.table_id
    wh.create_namespace("ns")
    t = wh.create_table("ns.docs", {"x": "bigint"})
    t.append(pa.table({"x": [7]}), "a")
    assert wh.table("ns.docs").read(["x"])["x"].to_pylist() == [7]
    assert wh.table("docs").count() != 1


def _state(wh: omnitable.Warehouse) -> dict[str, Any]:
    """Everything a reader sees: per table, the full snapshot's files (columns, stats, feature
    versions) and the rows read."""
    out: dict[str, Any] = {}
    for name in wh.tables():
        t = wh.table(name)
        snap = t.snapshot()
        files = {
            f.file_id: (
                f.fragment_id,
                f.group_name,
                f.path,
                sorted((c, fc.feature_version, f.stats(c)) for c, fc in f.columns.items()),
            )
            for fs in snap.files_by_fragment.values()
            for f in fs
        }
        data = t.read().sort_by(omnitable.ROW_ID) if name == "docs" else None
        out[name] = (snap.version, files, data, t.batches(), t.batches(version=1))
    return out


@pytest.fixture
def populated(catalog_spec: tuple[str, str | None]) -> tuple[str, str | None]:
    """A warehouse with real appends (ints with nulls, strings, doubles, a replaced batch,
    added columns) and a synthetic table with a registered feature's files."""
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as wh:
        t = wh.create_table("docs", {"x": "bigint", "s": "string"})
        for i, name in enumerate(["a", "b", "a"]):
            n = 12 + i
            t.append(
                pa.table(
                    {
                        "x": pa.array([k if k % 5 else None for k in range(n)], pa.int64()),
                        "s": [f"s{i}-{k}" for k in range(n)],
                    }
                ),
                name,
                mode="replace" if i == 2 else "error",
                target_fragment_rows=5,
            )
        ids = t.read([omnitable.ROW_ID])[omnitable.ROW_ID].to_pylist()[:7]
        t.add_columns(pa.table({omnitable.ROW_ID: ids, "y": [0.5, None, 2.0, 3, 4, 5, 6]}), "extra")
        t.append(pa.table({"x": [1, 2], "s": ["p", "q"], "y": [0.5, None]}), "c")
        size = bench.Size(6, 3, 9, 2)
        _, layout = bench.create_table(wh, size)
        head = layout.base_version + size.batches
        bench.bulk_insert(
            wh.catalog.store, bench.synthetic_rows(size, layout), layout.table_id, head
        )
    return uri, root


def test_upgrade_keeps_every_file_column_statistic_and_row(
    populated: tuple[str, str | None],
) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        before = _state(wh)
        written = _as_version_2(wh.catalog.store)
    assert written > 50
    with pytest.raises(
        CatalogVersionError, match="schema version 2.*needs version 7.*upgrade-catalog"
    ):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (2, 7)
    with omnitable.connect(uri, root=root) as wh:
        after = _state(wh)
        with wh.catalog.store.read() as conn:
            sets = conn.execute(text("SELECT COUNT(DISTINCT set_id) FROM column_sets")).scalar()
            files = conn.execute(text("SELECT COUNT(*) FROM files")).scalar()
    assert after == before
    assert 0 < sets < files  # files share their sets
    assert omnitable.upgrade_catalog(uri) == (7, 7)  # idempotent


def test_upgrade_from_version_3_adds_deletion_vectors(populated: tuple[str, str | None]) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        before = _state(wh)
        _as_version_3(wh.catalog.store)
    with pytest.raises(CatalogVersionError, match="schema version 3.*needs version 7"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (3, 7)
    with omnitable.connect(uri, root=root) as wh:
        assert _state(wh) == before
        docs = wh.table("docs")
        docs.delete(pc.field("x") == 3)  # the new tables take deletes and column changes
        assert 3 not in docs.read(["x"])["x"].to_pylist()
        docs.rename_column("s", "text")
        assert docs.read(["text"]).num_rows == docs.count()
        assert "s" in docs.snapshot(version=docs.version - 1).column_names()


def test_upgrade_from_version_4_takes_branches_and_tags(populated: tuple[str, str | None]) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        before = _state(wh)
        _as_version_4(wh.catalog.store)
    with pytest.raises(CatalogVersionError, match="schema version 4.*needs version 7"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (4, 7)
    with omnitable.connect(uri, root=root) as wh:
        assert _state(wh) == before
        docs = wh.table("docs")
        exp = docs.create_branch("exp")
        exp.delete(pc.field("x") == 3)  # removes an inherited vector or fragment row: removals
        assert 3 not in exp.read(["x"])["x"].to_pylist()
        assert 3 in docs.read(["x"])["x"].to_pylist()
        assert docs.create_tag("kept", max_age=60).max_age_s == 60


def test_cli_upgrades_and_refuses_an_unknown_version(
    populated: tuple[str, str | None], capsys: pytest.CaptureFixture[str]
) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        _as_version_2(wh.catalog.store)
    assert cli_main(["-w", uri, "--json", "upgrade-catalog"]) == 0
    assert '"from_version": 2' in capsys.readouterr().out
    with omnitable.connect(uri, root=root) as wh, wh.catalog.store.write() as conn:
        conn.execute(text("UPDATE omnitable_meta SET value = '0' WHERE key = 'schema_version'"))
    assert cli_main(["-w", uri, "upgrade-catalog"]) == 1
    assert "upgrades only versions 1 to 6 to" in " ".join(capsys.readouterr().err.split())


def test_upgrade_killed_mid_transaction_leaves_the_old_catalog(
    populated: tuple[str, str | None],
) -> None:
    """The process dies after every table was copied, before COMMIT: the catalog is still
    version 2, and a second upgrade gives the same result as an uninterrupted one."""
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        before = _state(wh)
        _as_version_2(wh.catalog.store)
    env = dict(os.environ, OMNITABLE_FAILPOINTS="upgrade.before_commit=exit")
    code = f"import omnitable; omnitable.upgrade_catalog({uri!r})"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode != 0, proc.stderr
    with pytest.raises(CatalogVersionError, match="schema version 2"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (2, 7)
    with omnitable.connect(uri, root=root) as wh:
        assert _state(wh) == before


def test_upgrade_from_version_1_goes_through_every_step(
    populated: tuple[str, str | None],
) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        wh.table("docs").register(_double_x())
        before, features = _state(wh), _features(wh)
        assert features
        _as_version_1(wh.catalog.store)
    with pytest.raises(CatalogVersionError, match="schema version 1.*needs version 7"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (1, 7)
    with omnitable.connect(uri, root=root) as wh:
        assert _state(wh) == before
        assert _features(wh) == features  # the registering commit's version, recovered
        docs = wh.table("docs")
        docs.append(pa.table({"x": [99], "s": ["z"], "y": [1.0]}), "after")  # a commit token
        assert 99 in docs.read(["x"])["x"].to_pylist()
        _check_namespaces_after_upgrade(wh)


def test_upgrade_from_version_5_puts_every_table_in_default(
    populated: tuple[str, str | None],
) -> None:
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        before = _state(wh)
        locations = {n: wh.table(n).record.location for n in wh.tables()}
        _as_version_5(wh.catalog.store)
    with pytest.raises(CatalogVersionError, match="schema version 5.*needs version 7"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (5, 7)
    with omnitable.connect(uri, root=root) as wh:
        assert _state(wh) == before
        assert {n: wh.table(n).record.location for n in wh.tables()} == locations
        _check_namespaces_after_upgrade(wh)
        with pytest.raises(omnitable.AlreadyExistsError):  # (namespace, name) stays unique
            wh.create_table("default.docs", {"x": "bigint"})


def _double_x() -> omnitable.Feature:
    return omnitable.sql_feature("x2", "x * 2", output_type="bigint", version="1")


def _order(t: omnitable.Table, **kw: Any) -> tuple[list[str], list[Any]]:
    """Batch names and the rows' ``x`` values, in read order."""
    return [b.name for b in t.batches(**kw)], t.read(["x"], **kw)["x"].to_pylist()


def test_upgrade_from_version_6_keeps_the_read_order_of_every_version(
    populated: tuple[str, str | None],
) -> None:
    """Version 6 read batches in ``added_version`` order: after the upgrade every version reads
    in that order (a batch a version-6 rollback restored stays last), and later rollbacks keep
    the order of their target."""
    uri, root = populated
    with omnitable.connect(uri, root=root) as wh:
        t = wh.create_table("order", {"x": "bigint"})
        for x, name in enumerate(["b0", "b1", "b2"]):
            t.append(pa.table({"x": [x]}), name)
        target = t.version
        t.append(pa.table({"x": [9]}), "b0", mode="replace")
        t.rollback(target)  # version 7: b0 is back in its place
        before = _state(wh)
        _as_version_6(wh.catalog.store)
    with pytest.raises(CatalogVersionError, match="schema version 6.*needs version 7"):
        omnitable.connect(uri, root=root)
    assert omnitable.upgrade_catalog(uri) == (6, 7)
    with omnitable.connect(uri, root=root) as wh:
        t = wh.table("order")
        with wh.catalog.store.read() as conn:
            for table in ("batches", "fragments"):
                differ = f"SELECT COUNT(*) FROM {table} WHERE position <> added_version"
                assert conn.execute(text(differ)).scalar() == 0
        # what version 6 showed: the batch its rollback restored is the newest
        assert _order(t) == (["b1", "b2", "b0"], [1, 2, 0])
        assert _order(t, version=target) == (["b0", "b1", "b2"], [0, 1, 2])
        assert {n: v for n, v in _state(wh).items() if n != "order"} == {
            n: v for n, v in before.items() if n != "order"
        }
        t.append(pa.table({"x": [5]}), "b1", mode="replace")
        t.rollback(t.version - 1)  # a version-7 rollback keeps the upgraded order
        assert _order(t) == (["b1", "b2", "b0"], [1, 2, 0])
        t.append(pa.table({"x": [7]}), "b3")  # and a new append goes last
        assert _order(t)[0] == ["b1", "b2", "b0", "b3"]
