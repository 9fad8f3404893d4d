"""SQL ``UPDATE`` without Spark's exchange and sort (jvm/.../optimizer/KeepOmniTableUpdateOrder.scala,
``OmniTableDeltaOperation.streamsFragments``): when the rows go from the scan to the write through
projections and filters only and the scan reads each fragment whole in one task, the plan has no
Exchange and no Sort, and each task rewrites the fragments it read. The rows equal Python's
``Table.update`` on tables of many fragments read by several tasks (packed partitions, deleted
rows, several batches); a fragment split between tasks, a subquery or another table's UPDATE keeps
Spark's plan."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pyarrow as pa
import pytest
from spark_tables import fragmented_rows, fragmented_table

import omnitable
from omnitable import ROW_ID

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

RULE = "io.omnitable.spark.optimizer.KeepOmniTableUpdateOrder"
_names = itertools.count()


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    return fragmented_table(wh, "u")


def _rows(t: omnitable.Table) -> list[dict[str, Any]]:
    return fragmented_rows(t)


def _plan(spark: Any, statement: str) -> str:
    """EXPLAIN's physical plan, expression ids left out (they differ between two plannings)."""
    return re.sub(r"#\d+L?", "#", str(spark.sql(f"EXPLAIN {statement}").collect()[0][0]))


def _python_update(t: omnitable.Table, where: Any, value: Any) -> None:
    rows = [r for r in _rows(t) if where(r)]
    t.update(
        pa.table({ROW_ID: [r[ROW_ID] for r in rows], "quality": [value(r) for r in rows]}),
        columns=["quality"],
    )


@pytest.mark.parametrize("filtered", [False, True])
def test_update_plans_no_exchange_and_equals_python_update(
    spark: Any, wh: omnitable.Warehouse, catalog: str, filtered: bool
) -> None:
    """Many fragments, packed several to a task (small maxPartitionBytes: several tasks): each
    row's new value is computed from its own ``x``, so a row written into another fragment or at
    another offset shows up as a wrong value; the rows equal Python's ``Table.update``."""
    sql, py = _table(wh), _table(wh)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    where = " WHERE x % 3 = 1" if filtered else ""
    statement = f"UPDATE {catalog}.{sql.name} SET quality = x * 10 + 0.5{where}"
    plan = _plan(spark, statement)
    assert "WriteDelta" in plan and "Exchange" not in plan and "Sort" not in plan, plan
    tasks = spark.sql(f"SELECT * FROM {catalog}.{sql.name}").rdd.getNumPartitions()
    assert tasks > 2
    spark.sql(statement)
    _python_update(py, lambda r: not filtered or r["x"] % 3 == 1, lambda r: r["x"] * 10 + 0.5)
    got, want = _rows(sql), _rows(py)
    assert got == want
    assert all(r["quality"] == r["x"] * 10 + 0.5 for r in got if not filtered or r["x"] % 3 == 1)
    head = sql.history(1)[0]
    assert head.op == "update" and head.summary["rows"] == len([
        r for r in got if not filtered or r["x"] % 3 == 1
    ])  # fmt: skip


def test_rule_excluded_keeps_sparks_exchange_and_sort(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh)
    statement = f"UPDATE {catalog}.{t.name} SET quality = 0"
    spark.conf.set("spark.sql.optimizer.excludedRules", RULE)
    plan = _plan(spark, statement)
    assert "Exchange" in plan and "Sort" in plan, plan


def test_split_fragments_and_subqueries_keep_the_exchange(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A fragment cut into row ranges (read by several tasks) or rows coming through a subquery
    (a join) need Spark's clustering: the plan keeps it, and the rows are still right."""
    sql, py = _table(wh), _table(wh)
    sub = (
        f"UPDATE {catalog}.{sql.name} SET quality = -1 "
        f"WHERE x IN (SELECT x + 1 FROM {catalog}.{sql.name} WHERE x < 20)"
    )
    assert "Exchange" in _plan(spark, sub)
    spark.sql(sub)
    live = {r["x"] for r in _rows(py)}
    _python_update(py, lambda r: r["x"] - 1 in live and r["x"] <= 20, lambda r: -1.0)
    assert _rows(sql) == _rows(py)
    spark.conf.set("spark.omnitable.read.max_rows_per_partition", "10")
    split = f"UPDATE {catalog}.{sql.name} SET quality = x + 0.25 WHERE x >= 400"
    assert "Exchange" in _plan(spark, split)
    spark.sql(split)
    _python_update(py, lambda r: r["x"] >= 400, lambda r: r["x"] + 0.25)
    assert _rows(sql) == _rows(py)


def test_other_tables_updates_keep_their_plan(spark: Any, tmp_path: Any) -> None:
    """The rule only informs OmniTable's own write: a Delta UPDATE plans the same with it or
    without it, and updates the same rows."""
    path = tmp_path / "delta"
    spark.range(50).selectExpr("id", "CAST(id AS DOUBLE) AS q").write.format("delta").save(
        str(path)
    )
    statement = f"UPDATE delta.`{path}` SET q = q * 2 WHERE id % 2 = 0"
    with_rule = _plan(spark, statement)
    spark.conf.set("spark.sql.optimizer.excludedRules", RULE)
    try:
        without = _plan(spark, statement)
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")
    assert with_rule == without
    spark.sql(statement)
    got = spark.read.format("delta").load(str(path)).orderBy("id").collect()
    assert [r.q for r in got] == [float(i * 2 if i % 2 == 0 else i) for i in range(50)]
