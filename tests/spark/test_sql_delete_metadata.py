"""Metadata-only ``DELETE FROM`` (DSv2 ``SupportsDeleteV2``, jvm/.../write/MetadataDelete.scala):
a predicate that the catalog alone decides for every fragment — batch names, fragment ids,
statistics proving all or none of a fragment's rows match — deletes without a Spark job, and
leaves what the row-level path leaves on a twin table (rows, batches, history summary); any other
predicate goes the row-level way. Races with Python commits follow Python's rules (the predicate
columns are the read set; deletes of the same fragment conflict). SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_tables import paused_at

import omnitable
from omnitable import ROW_ID

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

ROW_LEVEL_ONLY = "org.apache.spark.sql.execution.datasources.v2.OptimizeMetadataOnlyDeleteFromTable"
FAILPOINT_CONF = "spark.omnitable.test.failpoint"


def _web(wh: omnitable.Warehouse) -> omnitable.Table:
    """Batches b0 (scores 0-5), b1 (10-13), b2 (20-24), fragments of at most 3 rows."""
    t = wh.create_table(f"w_{uuid.uuid4().hex[:8]}", {"url": "string", "score": "double"})
    for batch, base, n in (("b0", 0, 6), ("b1", 10, 4), ("b2", 20, 5)):
        urls = [f"{batch}-{i}" for i in range(n)]
        scores = [float(base + i) for i in range(n)]
        t.append(pa.table({"url": urls, "score": scores}), batch, target_fragment_rows=3)
    return t


def _jobs(spark: Any, statement: str) -> int:
    """How many Spark jobs ``statement`` ran (the status tracker, fed by Spark's listener bus)."""
    sc = spark.sparkContext
    group = f"g{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, statement)
    try:
        spark.sql(statement)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    return len(sc.statusTracker().getJobIdsForGroup(group))


def _state(t: omnitable.Table) -> tuple[Any, ...]:
    head = t.history(1)[0]
    urls = sorted(t.read(columns=["url"])["url"].to_pylist())
    return urls, {b.name: b.rows for b in t.batches()}, head.op, head.summary.get("rows"), t.version


@pytest.mark.parametrize(
    "where",
    [
        "_ai_append_name_ = 'b1'",
        "_ai_append_name_ IN ('b0', 'b2')",
        "score >= 0",
        "score >= 10 AND score < 20",
        "_ai_append_name_ <> 'b0' AND score < 100",
        "score > 1000",
    ],
)
def test_metadata_delete_runs_no_job_and_equals_the_row_level_path(
    spark: Any, wh: omnitable.Warehouse, catalog: str, where: str
) -> None:
    meta, rows = _web(wh), _web(wh)
    assert _jobs(spark, f"DELETE FROM {catalog}.{meta.name} WHERE {where}") == 0
    spark.conf.set("spark.sql.optimizer.excludedRules", ROW_LEVEL_ONLY)
    try:
        assert _jobs(spark, f"DELETE FROM {catalog}.{rows.name} WHERE {where}") > 0
    finally:
        spark.conf.unset("spark.sql.optimizer.excludedRules")
    assert _state(meta) == _state(rows)
    spark_urls = sorted(
        r.url for r in spark.sql(f"SELECT url FROM {catalog}.{meta.name}").collect()
    )
    assert spark_urls == _state(rows)[0]


@pytest.mark.parametrize("where", ["url = 'b0-1'", "score >= 4", "score IS NULL OR score > 1"])
def test_undecidable_predicates_take_the_row_level_path(
    spark: Any, wh: omnitable.Warehouse, catalog: str, where: str
) -> None:
    """A data predicate whose statistics leave some fragment undecided (b0's first fragment holds
    scores 0-2, its second 3-5): Spark's row-level job, the rows Python's delete leaves."""
    sql, py = _web(wh), _web(wh)
    assert _jobs(spark, f"DELETE FROM {catalog}.{sql.name} WHERE {where}") > 0
    expr = {
        "url = 'b0-1'": pc.field("url") == "b0-1",
        "score >= 4": pc.field("score") >= 4,
        "score IS NULL OR score > 1": pc.field("score").is_null() | (pc.field("score") > 1),
    }[where]
    py.delete(expr)
    assert _state(sql)[:2] == _state(py)[:2]


def test_delete_without_predicate_deletes_every_row_without_a_job(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    before = t.version
    assert _jobs(spark, f"DELETE FROM {catalog}.{t.name}") == 0
    assert t.count() == 0 and t.version == before + 1
    head = t.history(1)[0]
    assert head.op == "delete" and head.summary["rows"] == 15 and head.summary["fragments"] == 6
    assert len(t.read(columns=["url"], version=before)) == 15  # time travel still sees them


def test_metadata_delete_after_a_row_delete_counts_only_live_rows(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    t.delete(pc.field("url") == "b1-0")
    assert _jobs(spark, f"DELETE FROM {catalog}.{t.name} WHERE _ai_append_name_ = 'b1'") == 0
    assert t.history(1)[0].summary["rows"] == 3
    assert {b.name: b.rows for b in t.batches()} == {"b0": 6, "b1": 0, "b2": 5}


@pytest.mark.parametrize(
    ("where", "concurrent", "conflicts"),
    [
        ("_ai_append_name_ = 'b1'", "append", False),
        ("_ai_append_name_ = 'b1'", "update_score", False),  # score is not in the read set
        ("score >= 10 AND score < 20", "update_score", True),  # it is: Python's rule
        ("_ai_append_name_ = 'b1'", "delete_same_fragment", True),
    ],
)
def test_metadata_delete_racing_a_python_commit(
    spark: Any,
    wh: omnitable.Warehouse,
    catalog: str,
    tmp_path: Path,
    where: str,
    concurrent: str,
    conflicts: bool,
) -> None:
    """A Python commit landing while the metadata-only DELETE waits at its commit."""
    t = _web(wh)
    b0 = t.read([ROW_ID, "url"]).sort_by("url").to_pylist()[0][ROW_ID]
    jobs: dict[str, int] = {}

    def statement() -> None:
        jobs["jobs"] = _jobs(spark, f"DELETE FROM {catalog}.{t.name} WHERE {where}")

    with paused_at(spark, "delete.before_commit", tmp_path, statement) as out:
        other = wh.table(t.name)
        if concurrent == "append":
            other.append(pa.table({"url": ["b3-0"], "score": [15.0]}), "b3")
        elif concurrent == "update_score":
            other.update(pa.table({ROW_ID: [b0], "score": [-1.0]}))
        else:
            other.delete(pc.field("url") == "b1-3")
    out.update(jobs)
    urls = sorted(t.read(columns=["url"])["url"].to_pylist())
    if conflicts:
        assert "OMNITABLE_COMMIT_CONFLICT" in str(out.get("error")), out
        assert any(u.startswith("b1-") for u in urls)
    else:
        assert out.get("jobs") == 0, out
        assert not any(u.startswith("b1-") for u in urls)
        assert ("b3-0" in urls) == (concurrent == "append")
