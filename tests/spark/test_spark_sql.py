"""Spark SQL over the omnitable catalog plugin: SHOW TABLES, DESCRIBE, SELECT, time travel."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse (catalogs can be added to a live session)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def test_sql_catalog(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("docs", {"title": "string", "score": "double"}, groups={"meta": ["score"]})
    v1 = t.append(pa.table({"title": ["a", "b", "c"], "score": [0.5, 0.7, 0.9]}), "b1")
    t.add_columns(pa.table({ROW_ID: pa.array([0, 2], pa.int64()), "lang": ["en", "de"]}))
    wh.create_table("other", {"x": "bigint"})

    tables = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}").collect())
    assert tables == ["docs", "other"]
    described = [
        (r.col_name, r.data_type) for r in spark.sql(f"DESCRIBE TABLE {catalog}.docs").collect()
    ]
    assert described[:5] == [
        (ROW_ID, "bigint"),
        ("_ai_append_name_", "string"),
        ("title", "string"),
        ("score", "double"),
        ("lang", "string"),
    ]
    rows = spark.sql(
        f"SELECT title, lang FROM {catalog}.docs WHERE score > 0.6 ORDER BY title"
    ).collect()
    assert [(r.title, r.lang) for r in rows] == [("b", None), ("c", "de")]
    old = spark.sql(f"SELECT * FROM {catalog}.docs VERSION AS OF {v1}")
    assert "lang" not in old.columns and old.count() == 3
    assert spark.sql(f"SELECT count(*) FROM {catalog}.docs VERSION AS OF 'main'").first()[0] == 3


def test_explain_shows_the_plan(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("ex", {"a": "double", "b": "string"}, groups={"ga": ["a"]})
    for i in range(3):
        t.append(pa.table({"a": [float(i * 10 + j) for j in range(10)], "b": ["x"] * 10}), f"p{i}")
    plan = spark.sql(f"EXPLAIN SELECT a FROM {catalog}.ex WHERE a >= 25").first()[0]
    assert "OmniTable ex @ branch main" in plan
    assert "groups=[ga]" in plan
    assert "fragments=1/3 (pruned: stats 2)" in plan
    assert "pushed=[" in plan


def test_catalog_refuses_statements_it_does_not_take(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """RENAME has no SQL form here (CREATE TABLE does: tests/spark/test_spark_ddl.py): it fails
    saying the catalog is read-only for it, and changes nothing."""
    wh.create_table("kept", {"x": "bigint"})
    with pytest.raises(Exception, match="read-only"):
        spark.sql(f"ALTER TABLE {catalog}.kept RENAME TO {catalog}.renamed").collect()
    assert "kept" in wh.tables() and "renamed" not in wh.tables()
