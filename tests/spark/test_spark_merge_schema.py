"""Spark appends with ``mergeSchema``: new columns are added by the append's own commit."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark

FAILPOINT_CONF = "spark.omnitable.test.failpoint"
MERGE_CONF = "spark.omnitable.write.mergeSchema"


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    name = f"oms_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    yield name
    spark.conf.unset(FAILPOINT_CONF)
    spark.conf.unset(MERGE_CONF)


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("web", {"url": "string", "n": "int"})
    t.append(pa.table({"url": ["old"], "n": pa.array([1], pa.int32())}), "first")
    return wh.table("web")


def _data_files(t: omnitable.Table) -> set[str]:
    return {str(p) for p in Path(t.location.path).rglob("*.parquet")}


def _groups(t: omnitable.Table) -> dict[str, str]:
    return {c.name: c.group_name for c in t.snapshot().columns}


NEW = "SELECT 'new' AS url, 2 AS n, 'x' AS tag, 1.5D AS w"


def test_new_columns_land_with_the_batch(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    _table(wh)
    spark.sql(NEW).writeTo(f"{catalog}.web").option("append_name", "b").option(
        "mergeSchema", "true"
    ).option("group", "extra").append()
    t = wh.table("web")
    assert t.schema.names[-2:] == ["tag", "w"]
    assert _groups(t)["tag"] == _groups(t)["w"] == "extra"
    history = t.history()  # one commit adds the columns and the batch
    assert [c.op for c in history] == ["append", "append", "create"]
    assert history[0].summary["columns"] == ["tag", "w"]
    py = {r["url"]: (r["tag"], r["w"]) for r in t.read().to_pylist()}
    assert py == {"old": (None, None), "new": ("x", 1.5)}
    rows = spark.table(f"{catalog}.web").select("url", "tag", "w").collect()
    assert {r["url"]: (r["tag"], r["w"]) for r in rows} == py


def test_default_group_and_format_writer(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    """format("omnitable").mode("append") takes the option too; the group defaults as ALTER's."""
    _table(wh)
    spark.sql(NEW).write.format("omnitable").option("warehouse", wh.uri).option(
        "table", "web"
    ).option("append_name", "b").option("mergeSchema", "true").mode("append").save()
    t = wh.table("web")
    groups = _groups(t)
    assert groups["tag"] == groups["w"] == "tag" != groups["url"]
    assert sorted(r["url"] for r in t.read().to_pylist()) == ["new", "old"]


def test_insert_into_with_the_session_setting(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _table(wh)
    spark.conf.set("spark.omnitable.write.appendName", "ins")
    try:
        spark.sql(NEW).createOrReplaceTempView("src_merge")
        with pytest.raises(Exception, match="unknown column"):
            spark.sql(f"INSERT INTO {catalog}.web BY NAME SELECT * FROM src_merge").collect()
        spark.conf.set(MERGE_CONF, "true")
        spark.sql(f"INSERT INTO {catalog}.web BY NAME SELECT * FROM src_merge").collect()
    finally:
        spark.conf.unset("spark.omnitable.write.appendName")
    assert sorted(r["url"] for r in wh.table("web").read().to_pylist()) == ["new", "old"]
    assert "tag" in wh.table("web").schema.names


def test_without_the_option_or_with_a_type_change_nothing_is_written(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    before, files = len(t.history()), _data_files(t)
    with pytest.raises(Exception, match="unknown column"):
        spark.sql(NEW).writeTo(f"{catalog}.web").option("append_name", "b").append()
    with pytest.raises(Exception, match="type STRING, the table has INT"):
        spark.sql("SELECT 'u' AS url, 'two' AS n, 'x' AS tag").writeTo(f"{catalog}.web").option(
            "append_name", "b"
        ).option("mergeSchema", "true").append()
    t = wh.table("web")
    assert len(t.history()) == before and "tag" not in t.schema.names
    assert _data_files(t) == files
    assert [b.name for b in t.batches()] == ["first"]


@pytest.mark.parametrize(
    "point", ["commit.before_insert", "commit.mid_insert", "commit.before_end"]
)
def test_killed_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, point: str
) -> None:
    t = _table(wh)
    before, files = len(t.history()), _data_files(t)
    spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
    with pytest.raises(Exception, match=f"failpoint '{point}'"):
        spark.sql(NEW).writeTo(f"{catalog}.web").option("append_name", "b").option(
            "mergeSchema", "true"
        ).append()
    spark.conf.unset(FAILPOINT_CONF)
    t = wh.table("web")
    assert len(t.history()) == before and "tag" not in t.schema.names
    assert _data_files(t) == files


def _paused_spark_append(spark: Any, catalog: str, gate: Path, out: dict[str, Any]) -> Any:
    spark.conf.set(FAILPOINT_CONF, f"append.before_commit=pause:{gate}")

    def run() -> None:
        try:
            spark.sql(NEW).writeTo(f"{catalog}.web").option("append_name", "b").option(
                "mergeSchema", "true"
            ).append()
        except Exception as exc:  # raised through py4j
            out["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    while not (gate / "append.before_commit.reached").exists():
        assert thread.is_alive(), out
        thread.join(0.05)
    return thread


def test_a_concurrent_add_of_the_same_column_conflicts(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh)
    files = _data_files(t)
    out: dict[str, Any] = {}
    thread = _paused_spark_append(spark, catalog, tmp_path, out)
    spark_files = _data_files(t) - files
    assert spark_files  # written by the tasks, not committed yet
    ids = [r[omnitable.ROW_ID] for r in t.read().to_pylist()]
    t.add_columns(pa.table({omnitable.ROW_ID: ids, "tag": ["py"]}))
    python_files = _data_files(t) - files - spark_files
    (tmp_path / "append.before_commit.go").touch()
    thread.join(120)
    spark.conf.unset(FAILPOINT_CONF)
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert "column 'tag' was added by a concurrent commit" in str(out["error"])
    t = wh.table("web")
    assert [b.name for b in t.batches()] == ["first"] and "w" not in t.schema.names
    assert [r["tag"] for r in t.read().to_pylist()] == ["py"]
    assert _data_files(t) == files | python_files  # the refused append's files are deleted


def test_a_concurrent_append_of_other_data_both_land(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh)
    out: dict[str, Any] = {}
    thread = _paused_spark_append(spark, catalog, tmp_path, out)
    t.append(pa.table({"url": ["py"], "n": pa.array([3], pa.int32())}), "py")
    (tmp_path / "append.before_commit.go").touch()
    thread.join(120)
    spark.conf.unset(FAILPOINT_CONF)
    assert "error" not in out, out
    rows = {r["url"]: r["tag"] for r in wh.table("web").read().to_pylist()}
    assert rows == {"old": None, "py": None, "new": "x"}


def test_new_columns_in_an_existing_group(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """The base group's old files lack the new column: its old rows read NULL."""
    _table(wh)
    spark.sql(NEW).writeTo(f"{catalog}.web").option("append_name", "b").option(
        "mergeSchema", "true"
    ).option("group", "base").append()
    t = wh.table("web")
    assert _groups(t)["tag"] == _groups(t)["url"] == "base"
    py = {r["url"]: (r["n"], r["tag"]) for r in t.read().to_pylist()}
    assert py == {"old": (1, None), "new": (2, "x")}
    rows = spark.table(f"{catalog}.web").select("url", "n", "tag").collect()
    assert {r["url"]: (r["n"], r["tag"]) for r in rows} == py
