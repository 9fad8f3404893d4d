"""Spark appends that supply their own ``_ai_unique_id_`` values (docs/spark.md, "Writing from
Spark"): the JVM checks them as Python does (python/omnitable/ingest/ids.py): unique within the
append, new to the table, exactly (not by statistics) against concurrent commits, non-null
BIGINT; the commit moves the table's next free id past them, and a refused or killed write leaves
nothing visible."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_tables import APPEND_NAME_CONF, FAILPOINT_CONF, paused_at
from spark_tables import data_files as _data_files

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import CommitConflict
from omnitable.spark.session import CATALOG_CLASS

F = pytest.importorskip("pyspark.sql.functions")

pytestmark = pytest.mark.spark


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    return wh.create_table("web", {"url": "string", "score": "double"})


def _ids(wh: omnitable.Warehouse) -> dict[str, int]:
    return {r["url"]: r[ROW_ID] for r in wh.table("web").read().to_pylist()}


def _next_id(wh: omnitable.Warehouse) -> int:
    return int(wh.table("web").record.next_row_id)


def _supplied(spark: Any, ids: list[int | None], prefix: str = "s") -> Any:
    rows = [(i, f"{prefix}{n}") for n, i in enumerate(ids)]
    return spark.createDataFrame(rows, f"{ROW_ID} BIGINT, url STRING").coalesce(1)


def test_supplied_ids_land_from_every_write_path(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    t.append(pa.table({"url": ["p0"]}), "py")
    _supplied(spark, [100, 300, 200], "w").writeTo(f"{catalog}.web").option(
        "append_name", "w"
    ).append()
    spark.conf.set(APPEND_NAME_CONF, "sql")
    spark.sql(f"INSERT INTO {catalog}.web ({ROW_ID}, url) VALUES (400, 'q0')").collect()
    _supplied(spark, [500], "f").write.format("omnitable").option("warehouse", wh.uri).option(
        "table", "web"
    ).option("append_name", "fmt").mode("append").save()
    ids = _ids(wh)
    assert {k: v for k, v in ids.items() if k != "p0"} == {
        "w0": 100, "w1": 300, "w2": 200, "q0": 400, "f0": 500
    }  # fmt: skip
    assert _next_id(wh) == 501  # moved past the supplied ids, as a Python append moves it
    wh.table("web").append(pa.table({"url": ["p1"]}), "py2")
    assert _ids(wh)["p1"] >= 501  # a later generated id never repeats a supplied one
    spark_ids = {r.url: r[ROW_ID] for r in spark.table(f"{catalog}.web").collect()}
    assert spark_ids == _ids(wh)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        ([7, 8, 7], r"duplicate _ai_unique_id_ values in the DataFrame, e.g. \[7\]"),
        ([9, None], "null _ai_unique_id_"),
        ([1000, 0], r"1 supplied _ai_unique_id_ value\(s\) already exist, e.g. \[0\]"),
    ],
)
def test_bad_supplied_ids_write_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, ids: list[int | None], message: str
) -> None:
    t = _table(wh)
    t.append(pa.table({"url": ["a", "b"]}), "base")  # ids 0 and 1
    files, before, next_id = _data_files(t), len(t.history()), _next_id(wh)
    with pytest.raises(Exception, match=message) as err:
        _supplied(spark, ids).writeTo(f"{catalog}.web").option("append_name", "bad").append()
    assert "OMNITABLE_INVALID_ROW_IDS" in str(err.value)
    t = wh.table("web")
    assert len(t.history()) == before and [b.name for b in t.batches()] == ["base"]
    assert _data_files(t) == files and _next_id(wh) == next_id


def test_ids_of_a_replaced_batch_may_be_supplied_again(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _table(wh)
    _supplied(spark, [5, 6]).writeTo(f"{catalog}.web").option("append_name", "b").append()
    _supplied(spark, [6, 7], "r").writeTo(f"{catalog}.web").option("append_name", "b").overwrite(
        F.lit(True)
    )
    assert _ids(wh) == {"r0": 6, "r1": 7}


@pytest.mark.parametrize("select", ["CAST(1 AS DECIMAL(20, 0))", "'1'", "1.5D"])
def test_supplied_ids_must_be_bigint(
    spark: Any, wh: omnitable.Warehouse, catalog: str, select: str
) -> None:
    t = _table(wh)
    with pytest.raises(Exception, match="must be non-null BIGINT") as err:
        spark.sql(f"SELECT {select} AS {ROW_ID}, 'x' AS url").writeTo(f"{catalog}.web").option(
            "append_name", "bad"
        ).append()
    assert "OMNITABLE_SCHEMA_MISMATCH" in str(err.value)
    assert len(wh.table("web").history()) == len(t.history()) and _data_files(t) == set()


@pytest.mark.parametrize("point", ["commit.mid_insert", "commit.before_end"])
def test_supplied_id_commit_killed_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, point: str
) -> None:
    t = _table(wh)
    before, next_id = len(t.history()), _next_id(wh)
    spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
    with pytest.raises(Exception, match=f"failpoint '{point}'"):
        _supplied(spark, [40, 41]).writeTo(f"{catalog}.web").option("append_name", "b").append()
    spark.conf.unset(FAILPOINT_CONF)
    t = wh.table("web")
    assert len(t.history()) == before and t.batches() == [] and _data_files(t) == set()
    assert _next_id(wh) == next_id
    _supplied(spark, [40, 41]).writeTo(f"{catalog}.web").option("append_name", "b").append()
    assert _ids(wh) == {"s0": 40, "s1": 41}


def test_spark_supplied_ids_race_a_python_generated_append(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any, tmp_path: Path
) -> None:
    """Whichever commits second conflicts, naming the ids; the first one's rows stay."""
    _table(wh)
    # Spark (supplied, the next free id) paused before its commit; Python generates that id
    n = _next_id(wh)

    def spark_supplies_it() -> None:
        _supplied(spark, [n + 1], "j").writeTo(f"{catalog}.web").option("append_name", "j").append()

    with paused_at(spark, "append.before_commit", tmp_path, spark_supplies_it) as out:
        wh.table("web").append(pa.table({"url": ["p0", "p1"]}), "p")
    error = str(out["error"])
    assert "OMNITABLE_COMMIT_CONFLICT" in error
    assert "1 of its _ai_unique_id_ value(s) were added by a concurrent commit" in error
    assert f"e.g. [{n + 1}]" in error
    assert _ids(wh) == {"p0": n, "p1": n + 1}

    # Python (generated) paused after reserving its ids; Spark supplies one of them first
    def spark_takes_one_of_them() -> None:
        taken = _next_id(wh) - 1  # the last id Python reserved
        _supplied(spark, [taken], "k").writeTo(f"{catalog}.web").option("append_name", "k").append()

    result = race(
        "append.before_commit",
        lambda: wh.table("web").append(pa.table({"url": ["q0", "q1"]}), "q"),
        spark_takes_one_of_them,
    )
    assert isinstance(result.get("error"), CommitConflict), result
    assert "were added by a concurrent commit" in str(result["error"])
    assert sorted(b.name for b in wh.table("web").batches()) == ["k", "p"]


def test_spark_supplied_ids_race_a_spark_generated_append(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Two Spark sessions: one generates ids, the other supplies one of them; the later commit
    conflicts, in both orders."""
    _table(wh)
    other = spark.newSession()
    other.conf.set(f"spark.sql.catalog.{catalog}", CATALOG_CLASS)
    other.conf.set(f"spark.sql.catalog.{catalog}.warehouse", wh.uri)
    try:
        _race_both_orders(spark, other, wh, catalog, tmp_path)
    finally:
        # createDataFrame made `other` the process's active session (pyspark): give the shared
        # session back that role, or later tests of this worker read `other`'s conf
        spark.createDataFrame([(1,)], "x int")


def _race_both_orders(
    spark: Any, other: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:

    def generated(name: str) -> None:
        spark.sql("SELECT 'g' AS url").writeTo(f"{catalog}.web").option(
            "append_name", name
        ).append()

    # the generated append reserved from n and waits; the other session supplies n
    n = _next_id(wh)
    gate1 = tmp_path / "g1"
    gate1.mkdir()
    with paused_at(spark, "append.before_commit", gate1, lambda: generated("g1")) as out:
        _supplied(other, [n]).writeTo(f"{catalog}.web").option("append_name", "s1").append()
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert f"e.g. [{n}]" in str(out["error"])
    assert sorted(b.name for b in wh.table("web").batches()) == ["s1"]

    # the supplied append waits; the generated one commits the id it supplies
    m = _next_id(wh)
    gate2 = tmp_path / "g2"
    gate2.mkdir()

    def other_supplies_it() -> None:
        _supplied(other, [m], "t").writeTo(f"{catalog}.web").option("append_name", "s2").append()

    with paused_at(other, "append.before_commit", gate2, other_supplies_it) as out:
        generated("g2")
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert sorted(b.name for b in wh.table("web").batches()) == ["g2", "s1"]
    assert _ids(wh)["g"] == m


def test_generated_append_checks_concurrent_ids_exactly(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """A concurrent append's supplied ids whose statistics span a generated append's reserved
    range, without any id in it: the ids are read, no clash, both land (statistics only
    pre-filter)."""
    t = _table(wh)
    t.append(pa.table({ROW_ID: pa.array([1_000_000], pa.int64()), "url": ["p"]}), "p")
    n = _next_id(wh)

    def generated() -> None:
        spark.sql("SELECT 'g' AS url").writeTo(f"{catalog}.web").option("append_name", "g").append()

    with paused_at(spark, "append.before_commit", tmp_path, generated) as out:
        around = pa.array([5, n + (1 << 40)], pa.int64())
        wh.table("web").append(pa.table({ROW_ID: around, "url": ["lo", "hi"]}), "s")
    assert "error" not in out, out
    ids = _ids(wh)
    assert sorted(b.name for b in wh.table("web").batches()) == ["g", "p", "s"]
    assert ids["g"] == n and ids["lo"] == 5
