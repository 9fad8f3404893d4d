"""What a Spark append writes, file by file (docs/spark.md, "Writing from Spark"): each file's
catalog statistics are exactly what the Python writer computes from the same rows, across
fragments, row groups, column groups and column subsets; `_ai_unique_id_` is stored without a
dictionary (every value is distinct), the other columns keep Parquet's usual encodings."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS
from omnitable.vocabulary.stats import compute_stats

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

COLUMNS = {
    "s": "string",
    "f": "double",
    "n": "int",
    "b": "boolean",
    "day": "date",
    "at": "timestamp",
    "price": "decimal(12,3)",
    "empty": "bigint",
}
# 2,500 rows in 2 tasks: fragments of 700 rows, row groups of 300; nulls, NaN, -0.0, long and
# non-ASCII strings, an all-null column; `n` and `b` in a second column group.
SOURCE = [
    "CASE WHEN id % 7 = 0 THEN NULL WHEN id % 11 = 0 THEN repeat('é', 70) "
    "ELSE concat('k', CAST(id % 13 AS STRING)) END AS s",
    "CASE WHEN id = 1234 THEN CAST('NaN' AS DOUBLE) WHEN id % 5 = 0 THEN -0.0D "
    "WHEN id % 9 = 0 THEN NULL ELSE id / 7.0D - 100 END AS f",
    "CAST(id % 17 - 8 AS INT) AS n",
    "CASE WHEN id % 3 = 0 THEN NULL ELSE id % 2 = 0 END AS b",
    "date_add(DATE'2026-01-01', CAST(id % 40 AS INT)) AS day",
    "timestamp_micros(1700000000000000 + id * 1000003) AS at",
    "CAST(id * 1.125 - 900 AS DECIMAL(12,3)) AS price",
    "CAST(NULL AS BIGINT) AS empty",
]


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    name = f"oml_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def _append(spark: Any, catalog: str, wh: omnitable.Warehouse, select: list[str]) -> None:
    wh.create_table("lay", COLUMNS, groups={"meta": ["n", "b"]})
    spark.range(0, 2500, 1, 2).selectExpr(*select).writeTo(f"{catalog}.lay").option(
        "append_name", "jvm"
    ).option("target_fragment_rows", "700").option("row_group_size", "300").append()


def _files(t: omnitable.Table) -> list[tuple[Any, dict[int, str]]]:
    """Every file of the table with the physical name of each column id it carries."""
    snap = t.snapshot()
    names = {c.column_id: c.physical_name for c in snap.columns}
    ids = [c.column_id for c in snap.columns if c.name != "_ai_append_name_"]
    out = []
    for frag in snap.fragments_of(None):
        files = snap.resolve(frag.fragment_id, ids)
        for f in {f.file_id: f for f in files.values() if f is not None}.values():
            out.append((f, {c: names[c] for c in f.columns}))
    return out


def test_each_file_has_the_statistics_python_computes(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _append(spark, catalog, wh, SOURCE)
    t = wh.table("lay")
    root = Path(t.location.path)
    files = _files(t)
    assert len({f.fragment_id for f, _ in files}) == 4  # 1,250 rows per task: 700 + 550
    assert {f.group_name for f, _ in files} == {"base", "meta"}
    checked = 0
    for f, columns in files:
        data = pq.read_table(root / f.path)
        assert data.num_rows == f.row_count
        for column_id, physical in columns.items():
            assert f.stats(column_id) == compute_stats(data.column(physical)), (f.path, physical)
            checked += 1
    assert checked == 4 * 9  # per fragment: the id and 6 columns in base, 2 in meta
    rows = t.read().to_pylist()
    assert len(rows) == 2500 and len({r[ROW_ID] for r in rows}) == 2500
    assert all(r["empty"] is None for r in rows)


def test_a_subset_of_columns_reads_back_in_both_readers(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _append(spark, catalog, wh, [SOURCE[2], SOURCE[0]])  # n before s: by name, not position
    t = wh.table("lay")
    for f, columns in _files(t):
        data = pq.read_table(Path(t.location.path) / f.path)
        for column_id, physical in columns.items():
            assert f.stats(column_id) == compute_stats(data.column(physical))
    got = t.read(columns=["s", "n", "f"])
    want = spark.range(0, 2500, 1, 2).selectExpr(SOURCE[0], SOURCE[2]).toArrow()
    assert got.column("f").null_count == 2500
    assert _pairs(got) == _pairs(want)
    threes = sum(1 for n, s in _pairs(want) if n == 3 and s is not None)
    assert spark.table(f"{catalog}.lay").where("n = 3 AND s IS NOT NULL").count() == threes


def _pairs(data: pa.Table) -> list[tuple[Any, Any]]:
    pairs = zip(data.column("n").to_pylist(), data.column("s").to_pylist(), strict=True)
    return sorted(pairs, key=repr)


def test_row_ids_are_stored_without_a_dictionary(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    _append(spark, catalog, wh, SOURCE)
    t = wh.table("lay")
    base = [f for f, _ in _files(t) if f.group_name == "base"]
    meta = pq.ParquetFile(Path(t.location.path) / base[0].path).metadata
    assert meta.num_row_groups == 3  # 700 rows in row groups of 300
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    for rg in range(meta.num_row_groups):
        chunks = {n: meta.row_group(rg).column(i) for i, n in enumerate(names)}
        assert not chunks[ROW_ID].has_dictionary_page
        assert not {"PLAIN_DICTIONARY", "RLE_DICTIONARY"} & set(chunks[ROW_ID].encodings)
        assert chunks["s"].has_dictionary_page  # 13 distinct short strings: a dictionary pays
    assert pa.types.is_int64(
        pq.read_schema(Path(t.location.path) / base[0].path).field(ROW_ID).type
    )
