from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import text

import omnitable
from omnitable.catalog.store import schema_script, schema_statements, schema_version
from omnitable.exceptions import CatalogError, CatalogVersionError, ValidationError


def test_schema_file_declares_its_version_and_every_design_table() -> None:
    assert re.search(r"omnitable-schema-version:\s*7\b", schema_script())
    created = {
        re.search(r"CREATE TABLE IF NOT EXISTS (\w+)", s).group(1)  # type: ignore[union-attr]
        for s in schema_statements()
        if s.startswith("CREATE TABLE")
    }
    assert {
        "omnitable_meta",
        "tables",
        "columns",
        "batches",
        "fragments",
        "files",
        "column_sets",
        "refs",
        "commits",
        "features",
        "runs",
        "lineage",
        "error_tables",
        "deletion_vectors",
        "removals",
        "namespaces",
    } <= created
    assert schema_version() == 7


def test_creation_is_idempotent(catalog_spec: tuple[str, str | None]) -> None:
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as wh:
        wh.create_table("t", {"a": "int"})
    with omnitable.connect(uri, root=root) as wh:
        assert wh.tables() == ["t"]


def test_other_schema_version_fails_clearly(catalog_spec: tuple[str, str | None]) -> None:
    uri, root = catalog_spec
    with omnitable.connect(uri, root=root) as wh, wh.catalog.store.write() as conn:
        conn.execute(text("UPDATE omnitable_meta SET value = '999' WHERE key = 'schema_version'"))
    with pytest.raises(CatalogVersionError, match="schema version 999.*needs version 7"):
        omnitable.connect(uri, root=root)


def test_sqlite_catalog_runs_in_wal_mode(tmp_path: Path) -> None:
    with omnitable.connect(tmp_path) as wh, wh.catalog.store.read() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"


def test_postgres_needs_a_root_first_time(pg_databases) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="needs a data root"):
        omnitable.connect(pg_databases.create())


def test_root_is_stored_and_checked(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/cat.db"
    with omnitable.connect(uri, root=str(tmp_path / "data")) as wh:
        assert wh.root.path == str(tmp_path / "data")
    with omnitable.connect(uri) as wh:  # root comes from the catalog
        assert wh.root.path == str(tmp_path / "data")
    with pytest.raises(ValidationError, match="data root is"):
        omnitable.connect(uri, root=str(tmp_path / "elsewhere"))


def test_default_sqlite_root_is_relative_so_the_warehouse_can_move(tmp_path: Path) -> None:
    with omnitable.connect(tmp_path / "a") as wh:
        wh.create_table("t", {"x": "int"}).append(_table(), "b1")
    (tmp_path / "a").rename(tmp_path / "b")
    with omnitable.connect(tmp_path / "b") as wh:
        assert wh.table("t").read(columns=["x"]).column("x").to_pylist() == [1, 2]


def _table():  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.table({"x": pa.array([1, 2], pa.int32())})


def test_unreachable_postgres_is_a_catalog_error() -> None:
    with pytest.raises(CatalogError, match="Cannot"):
        omnitable.connect("postgresql://nobody:pw@127.0.0.1:1/none", root="/tmp/x")
