"""The Spark read path returns exactly what the Python reader returns (random tables, SQLite and
PostgreSQL catalogs), with column pruning, predicates, versions, batches and refs."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.format import writer as writer_module
from omnitable.format.stitch import stitch
from omnitable.format.writer import WriteOptions
from omnitable.spark.session import warehouse_string

pytestmark = pytest.mark.spark

# Spark DDL type -> generator of n random Python values (None = NULL)
TYPES: dict[str, Any] = {
    "bigint": lambda r, n: [int(v) for v in r.integers(-(2**40), 2**40, n)],
    "int": lambda r, n: [int(v) for v in r.integers(-(2**31), 2**31 - 1, n)],
    "smallint": lambda r, n: [int(v) for v in r.integers(-(2**15), 2**15 - 1, n)],
    "double": lambda r, n: [float(v) for v in r.normal(0, 1e3, n)],
    "float": lambda r, n: [float(np.float32(v)) for v in r.normal(0, 10, n)],
    "boolean": lambda r, n: [bool(v) for v in r.integers(0, 2, n)],
    "string": lambda r, n: [
        "".join(chr(c) for c in r.integers(32, 0x2FF, int(k))) for k in r.integers(0, 30, n)
    ],
    "binary": lambda r, n: [r.bytes(int(k)) for k in r.integers(0, 20, n)],
    "date": lambda r, n: [
        dt.date(2000, 1, 1) + dt.timedelta(days=int(v)) for v in r.integers(0, 20000, n)
    ],
    "timestamp": lambda r, n: [
        dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=int(v))
        for v in r.integers(0, 10**14, n)
    ],
    "decimal(18,4)": lambda r, n: [
        Decimal(int(v)) / 10000 for v in r.integers(-(10**12), 10**12, n)
    ],
    "array<bigint>": lambda r, n: [
        [int(x) for x in r.integers(0, 100, int(k))] for k in r.integers(0, 5, n)
    ],
    "map<string,double>": lambda r, n: [
        [(f"k{j}", float(j)) for j in range(int(k))] for k in r.integers(0, 4, n)
    ],
    "struct<a:int,b:string>": lambda r, n: [
        {"a": int(v), "b": f"b{v}"} for v in r.integers(0, 1000, n)
    ],
}


def _values(rng: np.random.Generator, ddl: str, n: int) -> list[Any]:
    vals = TYPES[ddl](rng, n)
    mask = rng.random(n) < 0.15
    return [None if m else v for v, m in zip(vals, mask, strict=True)]


def _random_table(wh: omnitable.Warehouse, seed: int) -> omnitable.Table:
    """3-4 batches with random fragment and row-group sizes, then a column added for some rows."""
    rng = np.random.default_rng(seed)
    names = list(TYPES)
    picked = [names[i] for i in rng.choice(len(names), size=6, replace=False)]
    schema = {f"c{i}": ddl for i, ddl in enumerate(picked)}
    groups = {"g1": ["c0", "c1"], "g2": ["c2"], "g3": ["c3", "c4"]}
    t = wh.create_table(f"rand{seed}", schema, groups=groups)
    for b in range(int(rng.integers(3, 5))):
        n = int(rng.integers(0, 1500)) if b else 0  # the first batch is empty: a 0-row fragment
        data = {c: _values(rng, ddl, n) for c, ddl in schema.items()}
        t.append(
            pa.table(data, schema=t.schema.remove(0).remove(0)),
            f"batch/{b}",
            row_group_size=int(rng.integers(1, 400)),
            target_fragment_rows=int(rng.integers(100, 900)),
        )
    ids = t.read([ROW_ID]).column(0).to_numpy()
    some = ids[rng.random(len(ids)) < 0.6]
    late = pa.table({ROW_ID: some, "extra": [float(i) / 3 for i in some]})
    rows_per_group = int(rng.integers(1, 300))  # row groups unlike the base files'
    with omnitable.connect(
        wh.uri, write_options=WriteOptions(row_group_size=rows_per_group)
    ) as other:
        other.table(t.name).add_columns(late, group="late")
    return wh.table(t.name)


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r[ROW_ID])


def _spark_rows(df: Any) -> list[dict[str, Any]]:
    return _rows(df.toArrow())


def assert_same(df: Any, expected: pa.Table) -> None:
    assert df.columns == expected.column_names
    got, want = _spark_rows(df), _rows(expected)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == w, f"row {w[ROW_ID]} differs:\n spark  {g}\n python {w}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_tables_read_the_same(spark: Any, wh: omnitable.Warehouse, seed: int) -> None:
    t = _random_table(wh, seed)
    df = spark.read.format("omnitable").option("warehouse", warehouse_string(wh)).load(t.name)
    assert_same(df, t.read())
    small = (
        spark.read.format("omnitable")
        .option("warehouse", warehouse_string(wh))
        .option("batch_size", "37")
        .option("max_rows_per_partition", "111")
        .load(t.name)
    )
    assert_same(small, t.read())


def test_files_written_in_parts_read_the_same(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Column files written as parts on several threads and stitched (format/stitch.py) read
    as the Python reader reads them, a filtered read of small text pages included (files do
    not depend on the catalog: one backend)."""
    wh = omnitable.connect(tmp_path / "wh")
    stitched: list[int] = []

    def counting(parts: Any, sink: Any, lead: Any = None) -> int:
        stitched.append(len(parts) + (lead is not None))
        return stitch(parts, sink, lead)

    monkeypatch.setattr(writer_module, "PART_MIN_BYTES", 1)
    monkeypatch.setattr(writer_module, "stitch", counting)
    monkeypatch.setattr(writer_module.os, "cpu_count", lambda: 3)
    t = _random_table(wh, 11)
    rng = np.random.default_rng(11)
    n = 3_000
    texts = wh.create_table("parted_text", {"x": "double", "text": "string"})
    texts.append(pa.table({"x": rng.random(n), "text": ["w" * 300 + str(i) for i in range(n)]}),
                 "a", row_group_size=500)  # fmt: skip
    assert stitched and max(stitched) == 3
    assert_same(t.to_spark(spark), t.read())
    df = texts.to_spark(spark)
    assert_same(df.where("x < 0.05").select(ROW_ID, "text"),
                texts.read([ROW_ID, "text"], where=pc.field("x") < 0.05))  # fmt: skip
    assert texts.read().num_rows == n
    # Spark's own Parquet reader (parquet-mr, with its page-index filtering) reads the files
    snap = texts.snapshot()
    for frag in snap.fragments:
        for file in snap.files_by_fragment[frag.fragment_id]:
            path = texts.location.child_path(file.path)
            want = pq.read_table(path)
            got = spark.read.parquet(path)
            assert got.count() == want.num_rows
            if "text" in want.column_names:
                picked = got.where("text LIKE '%7'").toArrow()
                assert sorted(picked.column("text").to_pylist()) == sorted(
                    t for t in want.column("text").to_pylist() if t.endswith("7"))  # fmt: skip
            else:
                picked = got.where("x < 0.05").toArrow()
                assert sorted(picked.column("x").to_pylist()) == sorted(
                    x for x in want.column("x").to_pylist() if x < 0.05)  # fmt: skip
    wh.close()


def test_projection_predicates_and_batches(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _random_table(wh, 7)
    df = t.to_spark(spark)
    cols = [ROW_ID, "c3", "extra"]
    assert_same(df.select(*cols), t.read(cols))
    assert_same(df.where("extra > 100").select(*cols), t.read(cols, where=pc.field("extra") > 100))
    assert_same(
        df.where("extra IS NULL").select(*cols), t.read(cols, where=pc.field("extra").is_null())
    )
    names = [b.name for b in t.batches()][1:3]
    assert_same(t.to_spark(spark, batches=names), t.read(batches=names))
    assert_same(df.where(f"_ai_append_name_ = '{names[0]}'"), t.read(batches=[names[0]]))


def test_versions(spark: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("v", {"x": "bigint"})
    v1 = t.append(pa.table({"x": pa.array(range(10), pa.int64())}), "a")
    v2 = t.add_columns(pa.table({ROW_ID: pa.array(range(5), pa.int64()), "y": ["y"] * 5}))
    t.append(pa.table({"x": pa.array(range(10, 15), pa.int64())}), "b")
    for v in (v1, v2, None):
        assert_same(t.to_spark(spark, version=v), t.read(version=v))
    with pytest.raises(Exception, match="Cannot read version 99"):
        t.to_spark(spark, version=99).collect()


def test_counts_and_empty_tables(spark: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("e", {"x": "double"})
    df = t.to_spark(spark)
    assert df.count() == 0 and df.columns == [ROW_ID, "_ai_append_name_", "x"]
    t.append(pa.table({"x": pa.array([1.0, None, 3.0])}), "one")
    assert t.to_spark(spark).count() == 3
    assert t.to_spark(spark).where("x IS NULL").count() == 1


def test_table_properties_are_read_settings(spark: Any, wh: omnitable.Warehouse) -> None:
    """Read option, then session conf, then table property, then default (docs/spark.md)."""
    t = wh.create_table("props", {"x": "bigint"}, properties={"read.max_rows_per_partition": 2})
    t.append(pa.table({"x": pa.array(range(10), pa.int64())}), "a")

    def partitions(**options: str) -> int:
        reader = spark.read.format("omnitable").option("warehouse", warehouse_string(wh))
        df = reader.options(**options).load(t.name)
        assert df.count() == 10
        return int(df.rdd.getNumPartitions())

    assert partitions() == 5
    key = "spark.omnitable.read.max_rows_per_partition"
    spark.conf.set(key, "5")
    try:
        assert partitions() == 2
        assert partitions(max_rows_per_partition="10") == 1
    finally:
        spark.conf.unset(key)
    bad = wh.create_table("bad_props", {"x": "bigint"}, properties={"read.batch_size": "many"})
    bad_read = spark.read.format("omnitable").option("warehouse", warehouse_string(wh))
    with pytest.raises(
        Exception, match="table property read.batch_size='many' of table 'bad_props'"
    ):
        bad_read.load(bad.name).collect()


def test_missing_table_is_a_spark_not_found_error(spark: Any, wh: omnitable.Warehouse) -> None:
    from pyspark.errors import AnalysisException

    wh.create_table("exists", {"x": "bigint"})
    with pytest.raises(AnalysisException) as err:
        spark.read.format("omnitable").option("warehouse", warehouse_string(wh)).load("nope")
    assert err.value.getCondition() == "TABLE_OR_VIEW_NOT_FOUND"
    assert "Cannot find table 'nope'" in str(err.value) and "exists" in str(err.value)


def test_extension_is_loaded(spark: Any) -> None:
    assert spark.sql("SELECT omnitable_version()").first()[0] == omnitable.__version__
