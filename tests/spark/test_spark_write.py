"""Appends from Spark committed by the JVM (docs/spark.md, "Writing from Spark"): writeTo,
INSERT INTO, DataFrameWriter; what they write reads the same through Python and Spark; bad
input, failed jobs and conflicts leave nothing visible."""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_tables import APPEND_NAME_CONF, FAILPOINT_CONF, paused_at
from spark_tables import data_files as _data_files

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import CommitConflict

F = pytest.importorskip("pyspark.sql.functions")

pytestmark = pytest.mark.spark


def _table(wh: omnitable.Warehouse, name: str = "web") -> omnitable.Table:
    return wh.create_table(
        name,
        {
            "url": "string",
            "score": "double",
            "n": "int",
            "at": "timestamp",
            "day": "date",
            "price": "decimal(10,2)",
        },
        groups={"meta": ["score", "n"]},
    )


def _by_url(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["url"]: r for r in rows}


def test_appends_read_the_same_in_python_and_spark(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    t.append(
        pa.table(
            {
                "url": ["p1"],
                "score": [0.5],
                "n": pa.array([1], pa.int32()),
                "at": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)]),
                "day": [dt.date(2026, 1, 2)],
                "price": pa.array([Decimal("1.50")], pa.decimal128(10, 2)),
            }
        ),
        "py",
    )
    df = spark.sql(
        "SELECT concat('w', id) AS url, id * 0.25D AS score, CAST(id AS INT) AS n, "
        "TIMESTAMP'2026-02-03 04:05:06 UTC' AS at, DATE'2026-02-03' AS day, "
        "CAST(id AS DECIMAL(10,2)) AS price FROM range(0, 10, 1, 3)"
    )
    df.writeTo(f"{catalog}.web").option("append_name", "w1").append()
    spark.conf.set(APPEND_NAME_CONF, "sql1")
    spark.sql(
        f"INSERT INTO {catalog}.web VALUES ('v1', 9.5, 7, TIMESTAMP'2026-03-04 05:06:07 UTC', "
        "DATE'2026-03-04', 2.25)"
    ).collect()
    spark.conf.set(APPEND_NAME_CONF, "sql2")
    spark.sql(f"INSERT INTO {catalog}.web (url, n) SELECT 'v2', 3").collect()
    spark.range(2).selectExpr("concat('f', id) AS url").write.format("omnitable").option(
        "warehouse", wh.uri
    ).option("table", "web").option("append_name", "fmt").mode("append").save()

    t = wh.table("web")
    assert [b.name for b in t.batches()] == ["py", "w1", "sql1", "sql2", "fmt"]
    history = t.history()
    assert [c.op for c in history[:4]] == ["append"] * 4
    assert history[0].summary["engine"] == "spark-jvm"
    py_rows = t.read().to_pylist()
    assert len(py_rows) == 1 + 10 + 1 + 1 + 2
    ids = [r[ROW_ID] for r in py_rows]
    assert len(set(ids)) == len(ids)
    # Spark returns timestamps as local naive datetimes: compare them as epoch microseconds
    spark_rows = [
        r.asDict()
        for r in spark.table(f"{catalog}.web").withColumn("at", F.unix_micros("at")).collect()
    ]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    py_micros = [
        {**r, "at": None if r["at"] is None else (r["at"] - epoch) // dt.timedelta(microseconds=1)}
        for r in py_rows
    ]
    assert _by_url(spark_rows) == _by_url(py_micros)
    got = _by_url(py_rows)
    assert got["w3"]["score"] == 0.75 and got["w3"]["n"] == 3
    assert got["w3"]["price"] == Decimal("3.00") and got["w3"]["day"] == dt.date(2026, 2, 3)
    assert got["w3"]["at"] == dt.datetime(2026, 2, 3, 4, 5, 6, tzinfo=dt.timezone.utc)
    assert got["w3"]["_ai_append_name_"] == "w1"
    assert got["v1"]["price"] == Decimal("2.25") and got["v1"]["n"] == 7
    assert got["v2"]["score"] is None and got["v2"]["n"] == 3
    assert got["f1"]["score"] is None
    # statistics in the catalog prune like Python-written ones, in both readers
    assert t.read(where=pc.field("score") > 2.0).num_rows == 2
    assert spark.table(f"{catalog}.web").where("n >= 7").count() == 4  # w7-w9, v1


def test_statistics_match_the_python_encoding(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("st", {"s": "string", "f": "double", "x": "bigint"})
    values = [("b", 1e-05, -3), ("a", 1e16, 5), (None, 0.1, None)]
    data = pa.table(
        {"s": [v[0] for v in values], "f": [v[1] for v in values], "x": [v[2] for v in values]}
    )
    t.append(data, "py")
    spark.createDataFrame(values, "s string, f double, x bigint").coalesce(1).writeTo(
        f"{catalog}.st"
    ).option("append_name", "jvm").append()
    snap = wh.table("st").snapshot()
    cids = [snap.column(n).column_id for n in (ROW_ID, "s", "f", "x")]
    by_batch: dict[str, list[Any]] = {}
    for name in ("py", "jvm"):
        (frag,) = snap.fragments_of([name])
        files = snap.resolve(frag.fragment_id, cids)
        by_batch[name] = [files[c].stats(c) for c in cids[1:]]  # type: ignore[union-attr]
    assert by_batch["jvm"] == by_batch["py"]
    assert by_batch["py"][1].min_value == "1e-05" and by_batch["py"][1].max_value == "1e+16"


def test_missing_append_name_is_refused(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = _table(wh)
    before = len(t.history())
    with pytest.raises(Exception, match="OMNITABLE_MISSING_APPEND_NAME"):
        spark.sql(f"INSERT INTO {catalog}.web (url) VALUES ('x')").collect()
    with pytest.raises(Exception, match="append_name"):
        spark.range(1).selectExpr("'x' AS url").writeTo(f"{catalog}.web").append()
    assert len(wh.table("web").history()) == before
    assert _data_files(t) == set()


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("'x' AS url, 1 AS nope", "unknown column"),
        ("'x' AS url, 'high' AS score", "type STRING, the table has DOUBLE"),
        ("'x' AS url, DATE'2026-01-01' AS n", "type DATE, the table has INT"),
        ("'b' AS _ai_append_name_, 'x' AS url", "set by OmniTable"),
        ("'1' AS _ai_unique_id_, 'x' AS url", "must be non-null BIGINT"),
        ("'x' AS url, 'y' AS URL", "duplicate column"),
    ],
)
def test_schema_mismatch_writes_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, select: str, message: str
) -> None:
    t = _table(wh)
    before = len(t.history())
    with pytest.raises(Exception, match=message):
        spark.sql(f"SELECT {select}").writeTo(f"{catalog}.web").option(
            "append_name", "bad"
        ).append()
    assert len(wh.table("web").history()) == before
    assert _data_files(t) == set()


def test_insert_by_position_needs_every_user_column(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _table(wh)
    spark.conf.set(APPEND_NAME_CONF, "pos")
    with pytest.raises(Exception, match="the query has 2 column"):
        spark.sql(f"INSERT INTO {catalog}.web VALUES ('a', 1.0)").collect()


def test_keyed_table_refuses_append(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    wh.create_table("k", {"id": "bigint", "v": "string"}, key="id")
    with pytest.raises(Exception, match="OMNITABLE_KEYED_TABLE"):
        spark.sql("SELECT 1L AS id, 'a' AS v").writeTo(f"{catalog}.k").option(
            "append_name", "b"
        ).append()


def test_same_batch_name_twice(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = _table(wh)
    df = spark.sql("SELECT 'a' AS url")
    df.writeTo(f"{catalog}.web").option("append_name", "b").append()
    files = _data_files(t)
    with pytest.raises(Exception, match="OMNITABLE_BATCH_EXISTS"):
        df.writeTo(f"{catalog}.web").option("append_name", "b").append()
    assert _data_files(t) == files  # the refused write's files are deleted
    assert wh.table("web").read().num_rows == 1


def test_failed_task_leaves_nothing(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = _table(wh)
    before = len(t.history())
    df = spark.sql(
        "SELECT concat('u', id) AS url, CAST(assert_true(id < 15) IS NULL AS INT) AS n "
        "FROM range(0, 20, 1, 4)"
    )
    with pytest.raises(Exception, match="id < 15"):
        df.writeTo(f"{catalog}.web").option("append_name", "boom").append()
    assert len(wh.table("web").history()) == before
    # The job fails as soon as one task does. A task still running then is killed and deletes its
    # own files as it aborts; one already allowed to commit finishes without reporting to the
    # driver, whose abort deletes the batch directory again 5 s and 30 s later. Wait (bounded).
    deadline = time.monotonic() + 60
    while _data_files(t) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _data_files(t) == set()


@pytest.mark.parametrize(
    "point", ["commit.before_insert", "commit.mid_insert", "commit.before_end"]
)
def test_commit_killed_mid_transaction_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, point: str
) -> None:
    t = _table(wh)
    before = len(t.history())
    spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
    with pytest.raises(Exception, match=f"failpoint '{point}'"):
        spark.sql("SELECT 'a' AS url").writeTo(f"{catalog}.web").option("append_name", "b").append()
    spark.conf.unset(FAILPOINT_CONF)
    t = wh.table("web")
    assert len(t.history()) == before and t.batches() == []
    assert _data_files(t) == set()
    spark.sql("SELECT 'a' AS url").writeTo(f"{catalog}.web").option("append_name", "b").append()
    assert wh.table("web").read().num_rows == 1


def test_spark_and_python_appends_of_one_name_conflict(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any, tmp_path: Path
) -> None:
    """Python appends 'b' between Spark's snapshot and its commit, and the other way round:
    the later commit gets the conflict, whichever language made it."""
    _table(wh)
    gate = tmp_path / "jvm-gate"
    gate.mkdir()

    def spark_append() -> None:
        spark.sql("SELECT 'jvm' AS url").writeTo(f"{catalog}.web").option(
            "append_name", "b"
        ).append()

    with paused_at(spark, "append.before_commit", gate, spark_append) as out:
        wh.table("web").append(pa.table({"url": ["py"]}), "b")
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert "a concurrent commit created it first" in str(out["error"])
    assert [r["url"] for r in wh.table("web").read().to_pylist()] == ["py"]

    # Python paused before its commit while Spark commits the same name: Python conflicts
    result = race(
        "append.before_commit",
        lambda: wh.table("web").append(pa.table({"url": ["py2"]}), "c"),
        lambda: (
            spark.sql("SELECT 'jvm2' AS url")
            .writeTo(f"{catalog}.web")
            .option("append_name", "c")
            .append()
        ),
    )
    assert isinstance(result.get("error"), CommitConflict)
    rows = sorted(r["url"] for r in wh.table("web").read().to_pylist())
    assert rows == ["jvm2", "py"]


def test_spark_and_python_appends_of_different_names_both_land(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    _table(wh)
    result = race(
        "append.before_commit",
        lambda: wh.table("web").append(pa.table({"url": ["py"]}), "p"),
        lambda: (
            spark.sql("SELECT concat('j', id) AS url FROM range(3)")
            .writeTo(f"{catalog}.web")
            .option("append_name", "j")
            .append()
        ),
    )
    assert "version" in result, result
    t = wh.table("web")
    assert sorted(b.name for b in t.batches()) == ["j", "p"]
    ids = [r[ROW_ID] for r in t.read().to_pylist()]
    assert len(set(ids)) == 4


def test_overwrite_replaces_the_named_batch_only(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    t.append(pa.table({"url": ["keep"]}), "other")
    spark.sql("SELECT concat('a', id) AS url FROM range(3)").writeTo(f"{catalog}.web").option(
        "append_name", "daily"
    ).append()
    old_files = _data_files(t)
    spark.conf.set(APPEND_NAME_CONF, "daily")
    spark.sql(f"INSERT OVERWRITE {catalog}.web (url) VALUES ('b0'), ('b1')").collect()
    t = wh.table("web")
    assert sorted(r["url"] for r in t.read().to_pylist()) == ["b0", "b1", "keep"]
    assert t.history()[0].summary["replaced"] is True
    assert old_files <= _data_files(t)  # the replaced files stay for time travel
    spark.sql("SELECT 'c0' AS url").write.format("omnitable").option("warehouse", wh.uri).option(
        "table", "web"
    ).option("append_name", "fresh").mode("overwrite").save()  # no such batch yet: an append
    urls = sorted(r.url for r in spark.table(f"{catalog}.web").select("url").collect())
    assert urls == ["b0", "b1", "c0", "keep"]
    assert sorted(b.name for b in wh.table("web").batches()) == ["daily", "fresh", "other"]
    old = wh.table("web").read(version=2).to_pylist()
    assert sorted(r["url"] for r in old) == ["a0", "a1", "a2", "keep"]


def test_overwrite_racing_a_replace_of_the_same_batch_conflicts(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh)
    t.append(pa.table({"url": ["v1"]}), "daily")
    gate = tmp_path / "gate"
    gate.mkdir()
    spark.conf.set(APPEND_NAME_CONF, "daily")
    statement = f"INSERT OVERWRITE {catalog}.web (url) VALUES ('jvm')"
    with paused_at(
        spark, "append.before_commit", gate, lambda: spark.sql(statement).collect()
    ) as out:
        wh.table("web").append(pa.table({"url": ["py"]}), "daily", mode="replace")
    assert "the batch it replaces was changed by a concurrent commit" in str(out["error"])
    assert [r["url"] for r in wh.table("web").read().to_pylist()] == ["py"]


def test_drop_table_removes_rows_then_directory(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    t.append(pa.table({"url": ["a"]}), "b")
    directory = Path(t.location.path)
    assert directory.exists()
    wh.create_table("other", {"x": "bigint"})
    spark.sql(f"DROP TABLE {catalog}.web").collect()
    assert wh.tables() == ["other"]
    assert not directory.exists()
    with pytest.raises(Exception, match="web"):
        spark.sql(f"DROP TABLE {catalog}.web").collect()
    spark.sql(f"DROP TABLE IF EXISTS {catalog}.web").collect()
    again = _table(wh)  # the name is free again: a new table, with a new directory
    again.append(pa.table({"url": ["new"]}), "b")
    assert [r["url"] for r in wh.table("web").read().to_pylist()] == ["new"]
    assert spark.table(f"{catalog}.web").count() == 1


def test_an_append_of_no_rows_creates_its_batch(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _table(wh)
    spark.range(0).selectExpr("'x' AS url").writeTo(f"{catalog}.web").option(
        "append_name", "empty"
    ).append()
    t = wh.table("web")
    (batch,) = t.batches()
    assert (batch.name, batch.rows, batch.fragments) == ("empty", 0, 1)
    assert t.read().num_rows == 0 and spark.table(f"{catalog}.web").count() == 0
