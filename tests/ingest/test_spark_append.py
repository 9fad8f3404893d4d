"""Distributed ingest: Spark tasks write fragments, the driver commits once."""

from __future__ import annotations

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID

pytestmark = pytest.mark.spark


def test_spark_dataframe_append(wh: omnitable.Warehouse, spark) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table("s", {"text": "string", "n": "bigint"}, groups={"num": ["n"]})
    df = spark.range(0, 1000, numPartitions=4).selectExpr("concat('row-', id) AS text", "id AS n")
    version = t.append(df, "spark/1", target_fragment_rows=300)
    assert version == 1
    assert t.history()[0].summary["engine"] == "spark"
    out = t.read(columns=[ROW_ID, "text", "n"])
    assert sorted(out.column("n").to_pylist()) == list(range(1000))
    assert len(set(out.column(ROW_ID).to_pylist())) == 1000
    assert out.column("text").to_pylist() == [f"row-{n}" for n in out.column("n").to_pylist()]
    frags = t.batches()[0].fragments
    assert frags == 4  # each partition (250 rows) is cut independently
    # fragments come back in partition order
    assert out.column("n").to_pylist() == list(range(1000))
    # generated ids of a later local append never collide
    t.append(pa.table({"text": ["local"]}), "local")
    assert t.read(columns=[ROW_ID]).num_rows == 1001
    assert len(set(t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist())) == 1001


def test_spark_append_with_supplied_ids_is_validated(wh: omnitable.Warehouse, spark) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table("s", {"text": "string"})
    t.append(spark.createDataFrame([(5, "a"), (6, "b")], [ROW_ID, "text"]), "one")
    assert t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist() == [5, 6]
    with pytest.raises(omnitable.ValidationError, match="already exist"):
        t.append(spark.createDataFrame([(6, "c")], [ROW_ID, "text"]), "two")
    with pytest.raises(omnitable.ValidationError, match="duplicate"):
        t.append(spark.createDataFrame([(9, "c"), (9, "d")], [ROW_ID, "text"]), "two")
    with pytest.raises(omnitable.UnknownColumnError, match="colour"):
        t.append(spark.createDataFrame([("c", "red")], ["text", "colour"]), "two")
    assert t.version == 1


def test_empty_spark_dataframe(wh: omnitable.Warehouse, spark) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table("s", {"text": "string"})
    t.append(spark.createDataFrame([], "text string"), "empty")
    assert [(b.rows, b.fragments) for b in t.batches()] == [(0, 1)]
