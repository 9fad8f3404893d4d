"""The batch read order (catalog schema v7, docs/catalog.md "Read order") through the JVM, on
SQLite and PostgreSQL (``wh``): after a Python rollback that restores a replaced batch, the JVM
readers (``spark.read.format("omnitable")``, SQL, the ``batches`` and ``fragments`` metadata
tables) return batches and rows in Python's order; and the JVM writers (INSERT INTO, INSERT
OVERWRITE, CALL rollback / revert / merge_branch) give batches the read positions Python's
writer gives them for the same history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from spark_tables import APPEND_NAME_CONF

import omnitable

pytestmark = pytest.mark.spark


def _python_order(t: omnitable.Table) -> tuple[list[str], list[int]]:
    return [b.name for b in t.batches()], t.read(["x"])["x"].to_pylist()


def _positions(t: omnitable.Table) -> list[tuple[str, int]]:
    """(name, read position) of the visible batches, in read order."""
    return [(b.name, b.position) for b in t.snapshot().batches]


def test_jvm_reads_in_pythons_order_after_a_rollback(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("ro", {"x": "bigint"})
    for i, name in enumerate(["b0", "b1", "b2"]):
        t.append(pa.table({"x": [10 * i, 10 * i + 1]}), name, target_fragment_rows=1)
    target = t.version
    t.append(pa.table({"x": [5]}), "b0", mode="replace")
    replaced = t.version
    t.rollback(target)
    expected = (["b0", "b1", "b2"], [0, 1, 10, 11, 20, 21])
    assert _python_order(t) == expected
    spark.conf.set("spark.omnitable.read.max_rows_per_partition", "1")  # a partition per row
    by_source = spark.read.format("omnitable").option("warehouse", wh.uri).load("ro")
    assert [r.x for r in by_source.select("x").collect()] == expected[1]
    assert [r.x for r in spark.sql(f"SELECT x FROM {catalog}.ro").collect()] == expected[1]
    names = [r.name for r in spark.sql(f"SELECT name FROM {catalog}.ro.batches").collect()]
    assert names == expected[0]
    frags = spark.sql(f"SELECT batch FROM {catalog}.ro.fragments").collect()
    assert [r.batch for r in frags] == ["b0", "b0", "b1", "b1", "b2", "b2"]
    old = spark.sql(f"SELECT x FROM {catalog}.ro VERSION AS OF {replaced}").collect()
    assert [r.x for r in old] == [10, 11, 20, 21, 5]  # time travel: the replaced b0 is last


def _history(
    t: omnitable.Table,
    append: Callable[[int, str, str], None],
    call: Callable[[str, int | str], None],
) -> None:
    """One history, by ``append(x, name, mode)`` and ``call(procedure, version or branch)``:
    appends, replaces, a rollback, a revert of a replace, and a merge of a branch that
    replaced a batch while main appended another."""
    for i, name in enumerate(["b0", "b1", "b2"]):
        append(10 * i, name, "append")
    target = t.version
    append(5, "b1", "overwrite")
    call("rollback", target)
    append(6, "b2", "overwrite")
    replace = t.version
    append(40, "b4", "append")
    call("revert", replace)
    t.create_branch("fix").append(pa.table({"x": [7]}), "b0", mode="replace")
    append(50, "b5", "append")
    call("merge_branch", "fix")


def test_jvm_writers_give_the_positions_python_gives(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py = wh.create_table("by_py", {"x": "bigint"})
    jvm = wh.create_table("by_jvm", {"x": "bigint"})

    def py_append(x: int, name: str, mode: str) -> None:
        py.append(pa.table({"x": [x]}), name, mode="replace" if mode == "overwrite" else "error")

    def py_call(procedure: str, arg: int | str) -> None:
        if procedure == "merge_branch":
            py.merge(str(arg))
        else:
            getattr(py, procedure)(arg)

    def jvm_append(x: int, name: str, mode: str) -> None:
        spark.conf.set(APPEND_NAME_CONF, name)
        verb = "OVERWRITE" if mode == "overwrite" else "INTO"
        spark.sql(f"INSERT {verb} {catalog}.by_jvm VALUES ({x})").collect()

    def jvm_call(procedure: str, arg: int | str) -> None:
        value = f"'{arg}'" if isinstance(arg, str) else str(arg)
        spark.sql(f"CALL {catalog}.system.{procedure}('by_jvm', {value})").collect()

    _history(py, py_append, py_call)
    _history(jvm, jvm_append, jvm_call)
    assert [c.op for c in jvm.history()] == [c.op for c in py.history()]
    # the rollback and the revert put b1 and b2 back in their places; the merged b0 keeps
    # the position of the branch's replace (before b5, which main appended after it)
    assert _python_order(py) == (["b1", "b2", "b4", "b0", "b5"], [10, 20, 40, 7, 50])
    assert _positions(jvm) == _positions(py)
    assert _python_order(jvm) == _python_order(py)
