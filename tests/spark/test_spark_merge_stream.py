"""SQL ``MERGE INTO`` without Spark's exchange and sort (jvm/.../optimizer/
BroadcastOmniTableMergeSource.scala, KeepOmniTableUpdateOrder.scala): a MERGE with only WHEN
MATCHED / WHEN NOT MATCHED BY SOURCE clauses broadcasts a small deterministic source, so the
target scan streams each fragment whole, in offset order, into its rewrite. On SQLite and
PostgreSQL, twin tables (one merged with the broadcast, one with ``merge_broadcast_bytes=0``,
today's shuffle plan) end with the same rows and the same commit; the cardinality check, ANSI
errors and Spark's refusal of a non-deterministic condition are kept; a source over the bound, a
non-deterministic source and a MERGE that inserts keep the shuffle plan."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spark_tables import fragmented_rows, fragmented_table

import omnitable
from omnitable import APPEND_NAME, ROW_ID

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

BOUND = "spark.omnitable.optimizer.merge_broadcast_bytes"
_names = itertools.count()


@pytest.fixture(autouse=True)
def _unset_bound(spark: Any) -> Any:
    yield
    spark.conf.unset(BOUND)
    spark.conf.unset("spark.sql.files.maxPartitionBytes")


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    return fragmented_table(wh, "ms")


def _rows(t: omnitable.Table) -> list[dict[str, Any]]:
    return fragmented_rows(t)


def _source(spark: Any, t: omnitable.Table, xs: list[int]) -> str:
    """A view of (id, x, v) for the live rows of ``t`` with x in ``xs``: v = x * 10 + 0.5, so a
    value written to another row (fragment or offset) shows. Cached, so Spark knows its size (an
    RDD's is unknown: no broadcast)."""
    name = f"src_{next(_names)}"
    data = [(r[ROW_ID], r["x"], r["x"] * 10 + 0.5) for r in _rows(t) if r["x"] in set(xs)]
    df = spark.createDataFrame(data, f"{ROW_ID} bigint, x bigint, v double").cache()
    df.count()
    df.createOrReplaceTempView(name)
    return name


def _plan(spark: Any, statement: str) -> str:
    return re.sub(r"#\d+L?", "#", str(spark.sql(f"EXPLAIN {statement}").collect()[0][0]))


def _streams(plan: str) -> bool:
    """The write reads the target as scanned: a broadcast of the source is the only exchange, no
    sort (nor sort-merge join)."""
    return re.findall(r"\w*Exchange", plan) == ["BroadcastExchange"] and "Sort" not in plan


def _merge(catalog: str, t: omnitable.Table, src: str, on: str, clauses: str) -> str:
    return f"MERGE INTO {catalog}.{t.name} t USING {src} s ON {on} {clauses}"


CLAUSES = {
    "matched_update": "WHEN MATCHED THEN UPDATE SET quality = s.v",
    "matched_update_delete": (
        "WHEN MATCHED AND s.x % 5 = 0 THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET quality = s.v, label = concat(t.label, '+')"
    ),
    "by_source": (
        "WHEN MATCHED THEN UPDATE SET quality = s.v "
        "WHEN NOT MATCHED BY SOURCE AND t.x % 4 = 0 THEN DELETE "
        "WHEN NOT MATCHED BY SOURCE THEN UPDATE SET quality = -t.x"
    ),
}


@pytest.mark.parametrize(
    ("clauses", "on"),
    [
        ("matched_update", f"t.{ROW_ID} = s.{ROW_ID}"),
        ("matched_update_delete", "t.x = s.x"),
        ("by_source", f"t.{ROW_ID} = s.{ROW_ID}"),
    ],
)
def test_merge_streams_and_equals_the_shuffle_plan(
    spark: Any, wh: omnitable.Warehouse, catalog: str, clauses: str, on: str
) -> None:
    """Many fragments, several tasks (small maxPartitionBytes): the broadcast plan has no
    exchange of the target and no sort, and its rows and commit equal the shuffle plan's on a
    twin table."""
    fast, slow = _table(wh), _table(wh)
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")
    assert spark.sql(f"SELECT * FROM {catalog}.{fast.name}").rdd.getNumPartitions() > 2
    xs = [x for x in range(950) if x % 3 != 1]
    statement = _merge(catalog, fast, _source(spark, fast, xs), on, CLAUSES[clauses])
    assert _streams(_plan(spark, statement)), _plan(spark, statement)
    spark.sql(statement)
    spark.conf.set(BOUND, "0")
    slow_statement = _merge(catalog, slow, _source(spark, slow, xs), on, CLAUSES[clauses])
    plan = _plan(spark, slow_statement)
    assert "Exchange hashpartitioning" in plan and "Sort" in plan, plan
    spark.sql(slow_statement)
    strip = [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(fast)]
    assert strip == [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(slow)]
    assert all(r["quality"] == r["x"] * 10 + 0.5 for r in _rows(fast) if r["x"] in set(xs))
    head, twin = fast.history(1)[0], slow.history(1)[0]
    assert (head.op, head.summary) == (twin.op, twin.summary)
    assert head.summary["rows"] > 0 and fast.version == slow.version


def test_a_source_row_matching_twice_still_fails(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """Spark's cardinality check on the broadcast plan: every match of a streamed target row is
    in the task that reads it, so two source rows for one target row fail the statement, nothing
    committed."""
    t = _table(wh)
    v, before = t.version, _rows(t)
    src = _source(spark, t, list(range(500, 600)))
    dup = f"(SELECT {ROW_ID}, v FROM {src} UNION ALL SELECT {ROW_ID}, 2.0 AS v FROM {src} WHERE x = 555)"
    statement = _merge(
        catalog, t, dup, f"t.{ROW_ID} = s.{ROW_ID}", "WHEN MATCHED THEN UPDATE SET quality = s.v"
    )
    assert _streams(_plan(spark, statement)), _plan(spark, statement)
    with pytest.raises(Exception, match="MERGE_CARDINALITY_VIOLATION"):
        spark.sql(statement)
    assert t.version == v and _rows(t) == before


def test_ansi_errors_and_non_deterministic_conditions_as_spark(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A value failing an ANSI cast fails the broadcast plan too, nothing committed; a
    non-deterministic ON condition is refused as Spark refuses it."""
    t = _table(wh)
    v, before = t.version, _rows(t)
    src = _source(spark, t, list(range(100, 120)))
    bad = _merge(
        catalog,
        t,
        src,
        f"t.{ROW_ID} = s.{ROW_ID}",
        "WHEN MATCHED THEN UPDATE SET quality = CAST(concat('q', CAST(s.x AS STRING)) AS DOUBLE)",
    )
    assert _streams(_plan(spark, bad))
    with pytest.raises(Exception, match="CAST_INVALID_INPUT"):
        spark.sql(bad)
    with pytest.raises(Exception, match="(?i)non-deterministic"):
        spark.sql(
            _merge(
                catalog,
                t,
                src,
                f"t.{ROW_ID} = s.{ROW_ID} AND rand() < 2",
                "WHEN MATCHED THEN UPDATE SET quality = s.v",
            )
        )
    assert t.version == v and _rows(t) == before


def test_large_random_or_inserting_sources_keep_the_shuffle(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """A source estimated over the bound, a non-deterministic source and a MERGE with an INSERT
    clause keep Spark's plan (an exchange of the target, a sort); the rows are still right."""
    t = _table(wh)
    src = _source(spark, t, list(range(200, 260)))
    on = f"t.{ROW_ID} = s.{ROW_ID}"
    update = "WHEN MATCHED THEN UPDATE SET quality = s.v"
    spark.conf.set(BOUND, "16")
    over = _merge(catalog, t, src, on, update)
    assert "Exchange hashpartitioning" in _plan(spark, over)
    spark.sql(over)
    spark.conf.unset(BOUND)
    assert _streams(_plan(spark, over))
    rand = _merge(
        catalog,
        t,
        f"(SELECT *, rand() AS r FROM {src})",
        on,
        "WHEN MATCHED THEN UPDATE SET quality = s.v + s.r * 0",
    )
    assert "Exchange hashpartitioning" in _plan(spark, rand)
    spark.conf.set("spark.omnitable.write.appendName", f"ins{next(_names)}")
    try:
        insert = _merge(
            catalog,
            t,
            src,
            on,
            update + " WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.v)",
        )
        assert "Exchange hashpartitioning" in _plan(spark, insert)
    finally:
        spark.conf.unset("spark.omnitable.write.appendName")
    got = {r["x"]: r["quality"] for r in _rows(t)}
    assert all(got[x] == x * 10 + 0.5 for x in range(200, 260) if x in got)
    assert t.history(1)[0].summary["rows"] == len([x for x in range(200, 260) if x in got])


def _target_scan(plan: str) -> str:
    """The BatchScan lines of ``plan`` (the target's and any source's)."""
    return "\n".join(line for line in plan.splitlines() if "BatchScan" in line)


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(xs=st.sets(st.integers(0, 949), min_size=1, max_size=120), scale=st.integers(-3, 3))
def test_merge_and_update_skip_the_batch_name_and_keep_it(
    spark: Any, wh: omnitable.Warehouse, catalog: str, xs: set[int], scale: int
) -> None:
    """Neither a MERGE nor an UPDATE that keeps every row's ``_ai_append_name_`` reads it (the
    rule NULLs it in the written rows, the writer skips its check): the target scan lists no
    ``_ai_append_name_``, the rows equal Python's ``Table.update`` of the same values on a twin
    table, and every row keeps its batch name. An UPDATE filtering on the batch name still reads it."""
    sql, py = _table(wh), _table(wh)
    names = {r["x"]: r[APPEND_NAME] for r in sql.read(["x", APPEND_NAME]).to_pylist()}
    merge = _merge(catalog, sql, _source(spark, sql, sorted(xs)), f"t.{ROW_ID} = s.{ROW_ID}",
                   f"WHEN MATCHED THEN UPDATE SET quality = s.v * {scale}")  # fmt: skip
    update = f"UPDATE {catalog}.{sql.name} SET label = concat(label, '+') WHERE x % 5 = 0"
    for statement in (merge, update):
        scan = _target_scan(_plan(spark, statement))
        assert f"{sql.name}[" in scan and APPEND_NAME not in scan, scan
        spark.sql(statement)
    live = [r for r in _rows(py) if r["x"] in xs]
    if live:  # every x drawn may be a deleted row: then the MERGE changed nothing either
        py.update(pa.table({ROW_ID: [r[ROW_ID] for r in live],
                            "quality": [(r["x"] * 10 + 0.5) * scale for r in live]}),
                  columns=["quality"])  # fmt: skip
    five = [r for r in _rows(py) if r["x"] % 5 == 0]
    py.update(pa.table({ROW_ID: [r[ROW_ID] for r in five],
                        "label": [r["label"] + "+" for r in five]}), columns=["label"])  # fmt: skip
    strip = [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(sql)]
    assert strip == [{k: v for k, v in r.items() if k != ROW_ID} for r in _rows(py)]
    assert {r["x"]: r[APPEND_NAME] for r in sql.read(["x", APPEND_NAME]).to_pylist()} == names
    by_name = f"UPDATE {catalog}.{sql.name} SET quality = 1.0 WHERE {APPEND_NAME} = '{min(names.values())}'"
    assert APPEND_NAME in _target_scan(_plan(spark, by_name))
