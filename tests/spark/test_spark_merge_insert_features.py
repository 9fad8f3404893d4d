"""The rows a ``MERGE ... WHEN NOT MATCHED THEN INSERT`` adds and a registered feature's output
column, on SQLite and PostgreSQL (jvm/.../write/WriteSchema.scala ``insertTargets``,
FragmentWriter.scala): Spark gives the columns an INSERT does not assign NULL, so an inserted
fragment gets a file of a feature's output column only when its rows hold a non-NULL value in it.
A value an INSERT gives the output column is stored and read back, and ``status()`` is what
Python's ``Table.append`` of the same rows gives on a twin table; a MERGE not assigning it leaves
the batch ``missing`` (as Python's upsert); NULL and non-NULL values in one fragment keep the file
(NULLs read NULL), a fragment whose rows are all NULL has none. Unkeyed and keyed tables. One
warehouse per backend for the module, tables of their own names."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_tables import APPEND_NAME_CONF, bind_catalog, reset_write_settings

import omnitable
from omnitable import ROW_ID

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

FRAGMENT_ROWS_CONF = "spark.omnitable.write.target_fragment_rows"
PARTITIONS_CONF = "spark.sql.shuffle.partitions"
ROWS = 6
_names = itertools.count()


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Iterator[str]:
    """A catalog bound to ``wh``; one shuffle partition, so the inserted rows of a MERGE are
    written by one task (one fragment unless ``FRAGMENT_ROWS_CONF`` says fewer rows)."""
    partitions = spark.conf.get(PARTITIONS_CONF)
    spark.conf.set(PARTITIONS_CONF, "1")
    yield bind_catalog(spark, wh)
    reset_write_settings(spark)
    spark.conf.unset(FRAGMENT_ROWS_CONF)
    spark.conf.set(PARTITIONS_CONF, partitions)


def _table(wh: omnitable.Warehouse, key: str | None) -> omnitable.Table:
    """x 0..5 (quality x) as batch ``b1``, feature q2 = quality * 2 registered (``missing``)."""
    t = wh.create_table(
        f"mif{next(_names)}",
        {"x": "bigint", "quality": "double"},
        groups={"meta": ["quality"]},
        key=key,
    )
    data = pa.table({"x": list(range(ROWS)), "quality": [float(i) for i in range(ROWS)]})
    if key is None:
        t.append(data, "b1")
    else:
        t.upsert(data, append_name="b1")
    t.register(omnitable.sql_feature("q2", "quality * 2", "double", "1"))
    return t


def _merge(
    spark: Any, catalog: str, t: omnitable.Table, rows: list[tuple[int, float, float | None]],
    insert: str,
) -> None:  # fmt: skip
    """MERGE ``rows`` (x, quality, q2) into ``t`` on x: matched rows take the quality, the others
    are inserted by ``insert`` (an INSERT clause) as batch ``merged``."""
    src = f"fsrc_{uuid.uuid4().hex[:8]}"
    spark.createDataFrame(rows, "x bigint, quality double, q2 double").createOrReplaceTempView(src)
    spark.conf.set(APPEND_NAME_CONF, "merged")
    spark.sql(
        f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.x = s.x "
        f"WHEN MATCHED THEN UPDATE SET quality = s.quality WHEN NOT MATCHED THEN {insert}"
    )


def _q2(t: omnitable.Table) -> dict[int, Any]:
    return {r["x"]: r["q2"] for r in t.read(["x", "q2"]).to_pylist()}


def _states(t: omnitable.Table) -> tuple[str, str]:
    grid = t.status()
    return grid.state("b1", "q2"), grid.state("merged", "q2")


def _python_twin(
    wh: omnitable.Warehouse, rows: list[tuple[int, float, float | None]]
) -> omnitable.Table:
    """The twin: the same table, the new rows (x not in b1) appended by Python as ``merged``."""
    t = _table(wh, None)
    new = [r for r in rows if r[0] >= ROWS]
    t.append(
        pa.table({"x": [r[0] for r in new], "quality": [r[1] for r in new],
                  "q2": pa.array([r[2] for r in new], pa.float64())}),
        "merged",
    )  # fmt: skip
    return t


def _q2_files_by_fragment(t: omnitable.Table) -> dict[frozenset[int], bool]:
    """For each fragment of batch ``merged``: its row ids -> whether a file provides q2."""
    snap = t.snapshot()
    q2 = next(c.column_id for c in snap.columns if c.name == "q2")
    base = f"{t.location.path}"
    out = {}
    for frag in (f for f in snap.fragments if f.batch_name == "merged"):
        files = snap.files_by_fragment.get(frag.fragment_id, [])
        id_file = next(f for f in files if f.group_name == "base")
        ids = pq.read_table(f"{base}/{id_file.path}").column(ROW_ID).to_pylist()
        out[frozenset(ids)] = any(q2 in f.columns for f in files)
    return out


INSERT_Q2 = "INSERT (x, quality, q2) VALUES (s.x, s.quality, s.q2)"
INSERT_NO_Q2 = "INSERT (x, quality) VALUES (s.x, s.quality)"


@pytest.mark.parametrize("key", [None, "x"], ids=["unkeyed", "keyed"])
def test_inserted_feature_values_are_stored_as_python_append_stores_them(
    spark: Any, wh: omnitable.Warehouse, catalog: str, key: str | None
) -> None:
    t = _table(wh, key)
    rows = [(1, 1.5, None), (10, 10.0, 21.0), (11, 11.0, 23.0)]
    _merge(spark, catalog, t, rows, INSERT_Q2)
    fresh = wh.table(t.name)
    q2 = _q2(fresh)
    assert (q2[10], q2[11]) == (21.0, 23.0)
    assert all(q2[x] is None for x in range(ROWS))
    twin = _python_twin(wh, rows)
    assert _q2(twin) == q2
    assert _states(fresh) == _states(twin)
    assert _states(fresh)[1] != "missing"
    assert list(_q2_files_by_fragment(fresh).values()) == [True]


@pytest.mark.parametrize("key", [None, "x"], ids=["unkeyed", "keyed"])
def test_a_merge_not_assigning_the_output_leaves_the_batch_missing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, key: str | None
) -> None:
    t = _table(wh, key)
    _merge(spark, catalog, t, [(10, 10.0, 99.0), (11, 11.0, 98.0)], INSERT_NO_Q2)
    fresh = wh.table(t.name)
    assert _q2(fresh)[10] is None and _q2(fresh)[11] is None
    assert _states(fresh) == ("missing", "missing")
    assert list(_q2_files_by_fragment(fresh).values()) == [False]


@pytest.mark.parametrize("key", [None, "x"], ids=["unkeyed", "keyed"])
def test_an_insert_of_null_values_only_writes_no_file_of_the_output(
    spark: Any, wh: omnitable.Warehouse, catalog: str, key: str | None
) -> None:
    """An INSERT assigning q2 from a source column that is NULL in every new row: ``missing``,
    as Python's upsert leaves the new rows (an all-NULL column cannot be told from an unassigned
    one)."""
    t = _table(wh, key)
    _merge(spark, catalog, t, [(10, 10.0, None), (11, 11.0, None)], INSERT_Q2)
    fresh = wh.table(t.name)
    assert _q2(fresh)[10] is None
    assert _states(fresh)[1] == "missing"
    assert list(_q2_files_by_fragment(fresh).values()) == [False]


@pytest.mark.parametrize("key", [None, "x"], ids=["unkeyed", "keyed"])
def test_null_and_non_null_values_in_one_fragment_keep_the_file(
    spark: Any, wh: omnitable.Warehouse, catalog: str, key: str | None
) -> None:
    t = _table(wh, key)
    rows = [(10, 10.0, None), (11, 11.0, 23.0), (12, 12.0, None)]
    _merge(spark, catalog, t, rows, INSERT_Q2)
    fresh = wh.table(t.name)
    q2 = _q2(fresh)
    assert (q2[10], q2[11], q2[12]) == (None, 23.0, None)
    twin = _python_twin(wh, rows)
    assert _q2(twin) == q2
    assert _states(fresh) == _states(twin)
    assert list(_q2_files_by_fragment(fresh).values()) == [True]


@pytest.mark.parametrize("key", [None, "x"], ids=["unkeyed", "keyed"])
def test_each_inserted_fragment_keeps_the_file_only_with_a_non_null_value(
    spark: Any, wh: omnitable.Warehouse, catalog: str, key: str | None
) -> None:
    """Fragments of one row: those of rows with a q2 value get its file, the others none, so the
    batch is ``partial`` (a Python append of the column writes it in every fragment)."""
    t = _table(wh, key)
    spark.conf.set(FRAGMENT_ROWS_CONF, "1")
    rows = [(10, 10.0, 21.0), (11, 11.0, None), (12, 12.0, 25.0), (13, 13.0, None)]
    _merge(spark, catalog, t, rows, INSERT_Q2)
    fresh = wh.table(t.name)
    q2 = _q2(fresh)
    assert {x: q2[x] for x in (10, 11, 12, 13)} == {10: 21.0, 11: None, 12: 25.0, 13: None}
    ids = {r["x"]: r[ROW_ID] for r in fresh.read([ROW_ID, "x"]).to_pylist()}
    has_value = {frozenset([ids[x]]): q2[x] is not None for x in (10, 11, 12, 13)}
    assert _q2_files_by_fragment(fresh) == has_value
    assert _states(fresh) == ("missing", "partial")
