"""Namespaces in Spark SQL and DataFrame reads (docs/spark.md, "Namespaces"): CREATE / SHOW /
DROP NAMESPACE, SHOW TABLES IN omnitable.<ns>, omnitable.<ns>.<table> (and its branches), the
default namespace, and the ``table`` read option ``ns.web``; on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark
FAILPOINT_CONF = "spark.omnitable.test.failpoint"


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse (catalogs can be added to a live session)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def _xs(df: Any) -> list[int]:
    return sorted(r.x for r in df.select("x").collect())


def _error(spark: Any, sql: str) -> str:
    with pytest.raises(Exception) as info:
        spark.sql(sql).collect()
    return str(info.value)


def test_namespaces_in_spark_sql(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    spark.sql(f"CREATE NAMESPACE {catalog}.ns COMMENT 'crawl'")
    assert wh.namespaces() == ["default", "ns"]
    assert wh.catalog.namespace_properties("ns").get("comment") == "crawl"
    shown = sorted(r[0] for r in spark.sql(f"SHOW NAMESPACES IN {catalog}").collect())
    assert shown == ["default", "ns"]
    wh.create_table("ns.web", {"x": "bigint"}).append(pa.table({"x": [1, 2, 3]}), "a")
    wh.create_table("web", {"x": "bigint"}).append(pa.table({"x": [10]}), "a")
    in_ns = [r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}.ns").collect()]
    assert in_ns == ["web"]
    assert _xs(spark.sql(f"SELECT * FROM {catalog}.ns.web")) == [1, 2, 3]
    assert _xs(spark.sql(f"SELECT * FROM {catalog}.default.web")) == [10]
    assert _xs(spark.table(f"{catalog}.web")) == [10]
    spark.sql(f"USE {catalog}.ns")
    try:
        assert _xs(spark.sql("SELECT * FROM web")) == [1, 2, 3]
    finally:
        spark.sql("USE spark_catalog.default")
    missing = _error(spark, f"SELECT * FROM {catalog}.nope.web")
    assert (
        "Cannot find table 'nope.web'" in missing and "Namespace 'nope' does not exist" in missing
    )
    assert "SCHEMA_NOT_EMPTY" in _error(spark, f"DROP NAMESPACE {catalog}.ns")
    assert wh.table("ns.web").count() == 3
    wh.drop_table("ns.web")
    spark.sql(f"DROP NAMESPACE {catalog}.ns")
    assert wh.namespaces() == ["default"]
    assert "SCHEMA_ALREADY_EXISTS" in _error(spark, f"CREATE NAMESPACE {catalog}.default")


def test_branch_of_a_namespaced_table_and_dataframe_reads(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_namespace("ns")
    t = wh.create_table("ns.web", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2]}), "a")
    exp = t.create_branch("exp")
    exp.append(pa.table({"x": [7]}), "b")
    assert _xs(spark.table(f"{catalog}.ns.web.branch_exp")) == [1, 2, 7]
    assert _xs(spark.table(f"{catalog}.ns.web.branch_main")) == [1, 2]
    assert _xs(spark.sql(f"SELECT * FROM {catalog}.ns.web VERSION AS OF 'exp'")) == [1, 2, 7]
    wh.create_table("web", {"x": "bigint"}).append(pa.table({"x": [5]}), "a")
    wh.table("web").create_branch("dev")
    assert _xs(spark.table(f"{catalog}.web.branch_dev")) == [5]  # no table web.branch_dev
    assert _xs(spark.table(f"{catalog}.default.web.branch_dev")) == [5]
    read = spark.read.format("omnitable").option("warehouse", wh.uri)
    assert _xs(read.option("table", "ns.web").load()) == [1, 2]
    assert _xs(read.option("branch", "exp").load("ns.web")) == [1, 2, 7]
    assert _xs(t.to_spark(spark)) == [1, 2] and _xs(exp.to_spark(spark)) == [1, 2, 7]
    assert _xs(wh.table("default.web").to_spark(spark)) == [5]


def test_drop_namespace_cascade_drops_every_table_in_it(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_namespace("ns")
    web = wh.create_table("ns.web", {"x": "bigint"})
    web.append(pa.table({"x": [1, 2]}), "a")
    web.create_branch("dev").append(pa.table({"x": [3]}), "b")
    logs = wh.create_table("ns.logs", {"x": "bigint"})
    logs.append(pa.table({"x": [4]}), "a")
    kept = wh.create_table("web", {"x": "bigint"})  # default.web: same name, other namespace
    kept.append(pa.table({"x": [5]}), "a")
    dirs = [Path(t.location.path) for t in (web, logs)]
    assert all(d.exists() for d in dirs)
    spark.sql(f"DROP NAMESPACE {catalog}.ns CASCADE").collect()
    assert wh.namespaces() == ["default"]
    assert wh.tables() == ["web"]
    assert not any(d.exists() for d in dirs)
    assert _xs(spark.table(f"{catalog}.web")) == [5] and Path(kept.location.path).exists()
    assert "SCHEMA_NOT_FOUND" in _error(spark, f"DROP NAMESPACE {catalog}.ns CASCADE")
    spark.sql(f"DROP NAMESPACE IF EXISTS {catalog}.ns CASCADE").collect()
    refused = _error(spark, f"DROP NAMESPACE {catalog}.default CASCADE")
    assert "Cannot drop namespace 'default'" in refused
    assert wh.tables() == ["web"]
    wh.create_namespace("ns")  # the name is free again, and empty
    assert wh.tables("ns") == []


def test_drop_namespace_cascade_failing_mid_commit_drops_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_namespace("ns")
    for name in ("a", "b"):
        wh.create_table(f"ns.{name}", {"x": "bigint"}).append(pa.table({"x": [1]}), "a")
    dirs = [Path(wh.table(f"ns.{n}").location.path) for n in ("a", "b")]
    spark.conf.set(FAILPOINT_CONF, "drop.before_delete=raise")
    try:
        assert "failpoint 'drop.before_delete'" in _error(
            spark, f"DROP NAMESPACE {catalog}.ns CASCADE"
        )
    finally:
        spark.conf.unset(FAILPOINT_CONF)
    assert wh.namespaces() == ["default", "ns"]
    assert wh.tables("ns") == ["ns.a", "ns.b"]
    assert all(d.exists() for d in dirs)
    assert wh.table("ns.b").count() == 1
