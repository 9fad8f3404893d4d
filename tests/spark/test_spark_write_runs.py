"""Runs of appends committed by the JVM (docs/spark.md, "Writing from Spark"): each records a
run in the catalog's ``runs`` as a Python append does (``Table.runs()``, the ``runs`` metadata
table), the commit names it, and a failed job or a refused commit records a failed run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark

FAILPOINT_CONF = "spark.omnitable.test.failpoint"


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Iterator[str]:
    name = f"omr_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    yield name
    spark.conf.unset(FAILPOINT_CONF)


def _append(spark: Any, catalog: str, sql: str, batch: str) -> None:
    spark.sql(sql).writeTo(f"{catalog}.web").option("append_name", batch).append()


def test_a_jvm_append_records_its_run(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("web", {"url": "string"})
    _append(spark, catalog, "SELECT concat('u', id) AS url FROM range(0, 5, 1, 2)", "b")
    (run,) = t.runs()
    head = t.history()[0]
    assert run["kind"] == "ingest" and run["status"] == "succeeded" and run["message"] is None
    assert run["plan"] == {
        "batch": "b",
        "engine": "spark-jvm",
        "partitions": 2,
        "spark_app_id": spark.sparkContext.applicationId,
    }
    assert run["metrics"] == {"rows": 5, "version": head.version}
    assert head.run_id == run["run_id"] and run["run_id"].startswith("ingest-")
    assert run["host"] and run["pid"] and run["finished_at"] >= run["started_at"]
    listed = spark.sql(f"SELECT run_id, kind, status FROM {catalog}.web.runs").collect()
    assert [tuple(r) for r in listed] == [(run["run_id"], "ingest", "succeeded")]


def test_a_ctas_records_its_run_in_its_create_transaction(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    spark.conf.set("spark.omnitable.write.appendName", "ctas")
    try:
        spark.sql(
            f"CREATE TABLE {catalog}.web USING omnitable "
            "AS SELECT concat('u', id) AS url FROM range(0, 5, 1, 2)"
        ).collect()
    finally:
        spark.conf.unset("spark.omnitable.write.appendName")
    t = wh.table("web")
    (run,) = t.runs()
    create, append = reversed(t.history())
    assert (create.op, append.op, append.version) == ("create", "append", 1)
    assert append.run_id == run["run_id"] and create.run_id is None
    assert run["kind"] == "ingest" and run["status"] == "succeeded" and run["message"] is None
    assert run["plan"] == {
        "batch": "ctas",
        "engine": "spark-jvm",
        "partitions": 2,
        "spark_app_id": spark.sparkContext.applicationId,
    }
    assert run["metrics"] == {"rows": 5, "version": 1}
    assert run["host"] and run["pid"] and run["started_at"] <= run["finished_at"]


def test_a_failed_job_records_a_failed_run(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("web", {"url": "string", "n": "int"})
    failing = (
        "SELECT concat('u', id) AS url, CAST(assert_true(id < 3) IS NULL AS INT) AS n "
        "FROM range(0, 8, 1, 2)"
    )
    with pytest.raises(Exception, match="id < 3"):
        _append(spark, catalog, failing, "boom")
    (run,) = t.runs()
    assert run["status"] == "failed" and run["plan"]["batch"] == "boom"
    assert "nothing was committed" in run["message"]
    assert len(t.history()) == 1  # the create only


def test_a_failed_commit_records_a_failed_run_with_its_error(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("web", {"url": "string"})
    _append(spark, catalog, "SELECT 'a' AS url", "b")
    with pytest.raises(Exception, match="OMNITABLE_BATCH_EXISTS"):
        _append(spark, catalog, "SELECT 'c' AS url", "b")
    spark.conf.set(FAILPOINT_CONF, "commit.mid_insert=raise")
    with pytest.raises(Exception, match="failpoint 'commit.mid_insert'"):
        _append(spark, catalog, "SELECT 'd' AS url", "d")
    killed, refused, ok = t.runs()  # newest first
    assert ok["status"] == "succeeded" and ok["plan"]["batch"] == "b"
    # the JVM refuses a taken name at its commit, after the tasks wrote (Python: before writing,
    # and before its run starts)
    assert refused["status"] == "failed" and refused["plan"]["batch"] == "b"
    assert "'b'" in refused["message"] and refused["metrics"] == {}
    assert killed["status"] == "failed" and killed["plan"]["batch"] == "d"
    assert "commit.mid_insert" in killed["message"]
    assert t.history()[0].run_id == ok["run_id"]
