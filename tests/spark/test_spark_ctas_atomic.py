"""Atomic CTAS (docs/spark.md, "Creating and altering tables from Spark"): ``CREATE TABLE … AS
SELECT`` creates the table and commits its first batch in ONE catalog transaction. Nothing of the
table is visible while the query runs (not in SHOW TABLES, not in ``Warehouse.tables()``); a
failed query, a commit killed inside its transaction and a concurrent CREATE of the same name
leave no table, no catalog rows and no files."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark

APPEND_NAME_CONF = "spark.omnitable.write.appendName"
FAILPOINT_CONF = "spark.omnitable.test.failpoint"
CTAS = "AS SELECT concat('u', id) AS url, id * 0.5D AS score FROM range(0, 6, 1, 3)"
CATALOG_TABLES = (
    "tables", "columns", "commits", "refs", "batches", "fragments", "files", "column_sets", "runs",
)  # fmt: skip


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    """A catalog name bound to this test's warehouse; session write settings reset after."""
    name = f"omc_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    spark.conf.set(APPEND_NAME_CONF, "first")
    yield name
    spark.conf.unset(APPEND_NAME_CONF)
    spark.conf.unset(FAILPOINT_CONF)


def _catalog_rows(wh: omnitable.Warehouse) -> dict[str, int]:
    """How many rows each catalog table holds."""
    with wh.catalog.store.read() as conn:
        return {
            t: conn.execute(text(f"SELECT COUNT(*) FROM {t}")).scalar_one() for t in CATALOG_TABLES
        }


def _paths(wh: omnitable.Warehouse) -> set[str]:
    """Every file and directory under the warehouse's data root."""
    return {str(p) for p in Path(wh.root.path).rglob("*")}


def _show_tables(spark: Any, catalog: str) -> list[str]:
    return sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}").collect())


def _start(spark: Any, sql: str) -> tuple[threading.Thread, list[BaseException]]:
    """Runs ``sql`` in a thread; the error it raised, if any, lands in the list."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            spark.sql(sql).collect()
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    return thread, errors


def _await(reached: Path, thread: threading.Thread) -> None:
    """Waits until the statement reached its pause point (it plans and runs its tasks first)."""
    while not reached.exists():
        assert thread.is_alive(), "the statement ended before its pause point"
        time.sleep(0.05)


def _paused_ctas(
    spark: Any, catalog: str, tmp_path: Path
) -> tuple[threading.Thread, list[BaseException]]:
    """A CTAS of table ``web`` held after its tasks wrote their files, before its commit."""
    spark.conf.set(FAILPOINT_CONF, f"append.before_commit=pause:{tmp_path}")
    thread, errors = _start(spark, f"CREATE TABLE {catalog}.web USING omnitable {CTAS}")
    _await(tmp_path / "append.before_commit.reached", thread)
    return thread, errors


def test_a_ctas_is_invisible_until_it_commits_create_and_batch_at_once(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    wh.create_table("keep", {"a": "int"})
    rows_before = _catalog_rows(wh)
    thread, errors = _paused_ctas(spark, catalog, tmp_path)
    try:
        # the query ran and its files are written; the catalog holds nothing of the table
        assert wh.tables() == ["keep"]
        assert _show_tables(spark, catalog) == ["keep"]
        assert _catalog_rows(wh) == rows_before
    finally:
        (tmp_path / "append.before_commit.go").touch()
        thread.join()
    assert not errors, errors
    table = wh.table("web")
    assert [(c.version, c.op) for c in reversed(table.history())] == [(0, "create"), (1, "append")]
    assert [b.name for b in table.batches()] == ["first"]
    assert sorted(table.read()["url"].to_pylist()) == [f"u{i}" for i in range(6)]
    # the ids the CTAS generated are reserved: a later append gets others
    table.append(pa.table({"url": ["p"], "score": [1.0]}), "py")
    ids = wh.table("web").read(columns=["_ai_unique_id_"])["_ai_unique_id_"].to_pylist()
    assert len(set(ids)) == 7
    assert _show_tables(spark, catalog) == ["keep", "web"]


def test_a_concurrent_create_of_the_name_fails_the_ctas_leaving_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    paths_before = _paths(wh)
    thread, errors = _paused_ctas(spark, catalog, tmp_path)
    try:
        wh.create_table("web", {"x": "string"})  # Python's create, while the query runs
        rows_after_create = _catalog_rows(wh)
    finally:
        (tmp_path / "append.before_commit.go").touch()
        thread.join()
    assert len(errors) == 1
    assert "TABLE_OR_VIEW_ALREADY_EXISTS" in str(errors[0])
    # the table is Python's, untouched; nothing of the CTAS is left
    table = wh.table("web")
    assert table.read().column_names == ["_ai_unique_id_", "_ai_append_name_", "x"]
    assert [c.op for c in table.history()] == ["create"]
    assert _catalog_rows(wh) == rows_after_create
    assert _paths(wh) == paths_before
    assert _show_tables(spark, catalog) == ["web"]


@pytest.mark.parametrize(
    "point", ["create.before_insert", "create.before_end", "commit.mid_insert", "commit.before_end"]
)
def test_a_ctas_killed_in_its_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, point: str
) -> None:
    wh.create_table("keep", {"a": "int"})
    rows_before, paths_before = _catalog_rows(wh), _paths(wh)
    spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
    with pytest.raises(Exception, match=point.replace(".", r"\.")):
        spark.sql(f"CREATE TABLE {catalog}.web USING omnitable {CTAS}").collect()
    assert wh.tables() == ["keep"]
    assert _show_tables(spark, catalog) == ["keep"]
    assert _catalog_rows(wh) == rows_before
    assert _paths(wh) == paths_before
    # the same statement then commits
    spark.conf.unset(FAILPOINT_CONF)
    spark.sql(f"CREATE TABLE {catalog}.web USING omnitable {CTAS}").collect()
    assert [c.op for c in reversed(wh.table("web").history())] == ["create", "append"]


def test_a_failed_ctas_query_leaves_no_rows_and_no_directories(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_table("keep", {"a": "int"})
    rows_before, paths_before = _catalog_rows(wh), _paths(wh)
    with pytest.raises(Exception, match="DIVIDE_BY_ZERO"):
        spark.sql(
            f"CREATE TABLE {catalog}.bad USING omnitable AS "
            "SELECT id, CAST(10 / (id - 7) AS INT) AS q FROM range(0, 10, 1, 2)"
        ).collect()
    assert wh.tables() == ["keep"]
    assert _catalog_rows(wh) == rows_before
    assert _paths(wh) == paths_before
