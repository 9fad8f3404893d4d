"""Branches and tags through Spark (docs/branches.md, "Spark"), on SQLite and PostgreSQL
(``wh``) with the shared local session: ``to_spark`` on a bound table, the ``branch`` and
``tag`` read options and SQL ``VERSION AS OF 'name'`` read what the Python reader reads after
deletes, updates and renames on a branch (the JVM honours ``removals``), and a backfill on a
branch fills the branch's rows only."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable.spark.session import CATALOG_CLASS, warehouse_string

from .common import Row, base_table, batch, ids_where, rows

pytestmark = pytest.mark.spark

LEN = omnitable.sql_feature("s_len", "length(s)", "int", "1")


def spark_rows(df: Any) -> list[Row]:
    return sorted((r.asDict() for r in df.collect()), key=lambda r: r[ROW_ID])


def test_spark_reads_branches_and_tags_like_python(spark: Any, wh: omnitable.Warehouse) -> None:
    t = base_table(wh)
    b = t.create_branch("exp")
    b.delete(pc.field("x").isin([0, 11]))
    b.update(pa.table({ROW_ID: pa.array([1], pa.int64()), "s": ["one"]}))
    b.rename_column("x", "y")
    older = b.version
    b.create_tag("exp_tag")
    c = b.create_branch("c")
    c.delete(ids=ids_where(rows(c), lambda r: r["y"] in (4, 12)))
    b.append(pa.table({"y": pa.array([77], pa.int64()), "s": ["s77"]}), "nb")
    t.append(batch("m", [500]), "m")

    def reader() -> Any:  # a DataFrameReader keeps the options set on it: a new one each time
        return spark.read.format("omnitable").option("warehouse", warehouse_string(wh))

    assert spark_rows(b.to_spark(spark)) == rows(b)
    assert spark_rows(t.to_spark(spark, branch="exp")) == rows(b)
    assert spark_rows(reader().option("branch", "exp").load("t")) == rows(b)
    assert spark_rows(reader().option("branch", "c").load("t")) == rows(c)
    assert spark_rows(reader().option("tag", "exp_tag").load("t")) == rows(t, tag="exp_tag")
    assert rows(t, tag="exp_tag") == rows(b, version=older) != rows(b)
    assert spark_rows(b.to_spark(spark, older)) == rows(b, version=older)
    assert spark_rows(t.to_spark(spark)) == rows(t)
    assert 77 not in [r["y"] for r in rows(c)] and 500 in [r["x"] for r in rows(t)]
    catalog = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{catalog}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", warehouse_string(wh))
    sql = f"SELECT * FROM {catalog}.t VERSION AS OF"
    assert spark_rows(spark.sql(f"{sql} 'exp_tag'")) == rows(t, tag="exp_tag")
    assert spark_rows(spark.sql(f"{sql} 'c'")) == rows(c)
    assert spark_rows(spark.sql(f"SELECT * FROM {catalog}.t")) == rows(t)


def test_backfill_on_a_branch(spark: Any, wh: omnitable.Warehouse) -> None:
    """A feature registered on main before the fork, back-filled on the branch after the branch
    deleted and updated inherited rows: the branch's live rows get values, main none."""
    t = base_table(wh)
    t.register(LEN)
    b = t.create_branch("exp")
    b.delete(ids=ids_where(rows(b), lambda r: r["x"] in (0, 12)))
    b.update(pa.table({ROW_ID: pa.array([1], pa.int64()), "s": ["a longer one"]}))
    b.append(batch("nb", [1000]), "nb")
    main_before, main_status = rows(t), t.status()
    result = b.backfill(["s_len"]).run(spark)
    assert result.versions
    got = rows(b)
    assert [r["x"] for r in got] == [1, 2, 3, 4, 5, 10, 11, 13, 1000]
    assert all(r["s_len"] == len(r["s"]) for r in got) and got[0]["s_len"] == 12
    grid = b.status()
    assert {grid.state(name, "s_len") for name in ("b1", "b2", "nb")} == {"done"}
    assert rows(t) == main_before and all(r["s_len"] is None for r in main_before)
    assert t.status().state("b1", "s_len") == main_status.state("b1", "s_len") != "done"
    t.append(batch("later", [2000]), "later")
    assert rows(b) == got and "later" not in {r[APPEND_NAME] for r in got}
    assert spark_rows(b.to_spark(spark)) == got
