"""The JVM reader records the access log (one entry per scan, driver side), and a regroup
chosen from it keeps Spark reads and features exactly as they were (docs/governance.md,
"Access log" and "Regrouping"), and races Spark backfills both ways."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import CommitConflict
from omnitable.format.access import read_access

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

LEN = omnitable.sql_feature("s_len", "length(s)", "int", "1")
UP = omnitable.sql_feature("s_up", "upper(s)", "string", "1")
LOW = omnitable.sql_feature("s_low", "lower(s)", "string", "1")


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return "rs_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_spark_scans_are_recorded_and_regroup_keeps_reads_and_features(
    wh: omnitable.Warehouse, name: str, spark: Any
) -> None:
    groups = {"g0": ["a", "s"], "g1": ["b"], "g2": ["c"]}
    t = wh.create_table(name, {"a": "bigint", "s": "string", "b": "bigint", "c": "bigint"},
                        groups=groups)  # fmt: skip
    for k in range(2):
        n = range(k * 10, k * 10 + 6)
        t.append(pa.table({"a": list(n), "s": [f"s{i}" for i in n], "b": [i * 2 for i in n],
                           "c": [i * 3 for i in n]}), f"b{k}", target_fragment_rows=4)  # fmt: skip
    t.register(LEN)
    t.backfill("s_len").run(spark)
    df = t.to_spark(spark)
    query = df.where(df.b > 4).select("a", "c")
    before_rows, before_grid, old = _rows(query), dict(t.status().cells), t.version
    entries = sorted(read_access(t.location), key=lambda e: e.time)
    # the backfill's scan of its input, then the query (filter column included)
    assert [(e.reader, e.columns) for e in entries] == [
        ("spark", ("s",)),
        ("spark", ("a", "b", "c")),
    ]
    assert entries[1].version == old and entries[1].branch == "main"

    spark.conf.set("spark.omnitable.access_log", "false")
    try:
        t.to_spark(spark).select("a").collect()
    finally:
        spark.conf.unset("spark.omnitable.access_log")
    assert len(read_access(t.location)) == 2

    opts = {"regroup": {"min_group_columns": 1, "min_scans": 1}}
    (res,) = t.maintain(["regroup"], options=opts)
    assert res.outcome == "committed"
    assert [a["columns"] for a in res.plan.actions if a["kind"] == "group"] == [["a", "b", "c"]]
    new_df = t.to_spark(spark)
    assert _rows(new_df.where(new_df.b > 4).select("a", "c")) == before_rows
    assert dict(t.status().cells) == before_grid  # s_len stays done
    assert set(before_grid.values()) == {"done"}
    old_df = t.to_spark(spark, version=old)
    assert _rows(old_df.where(old_df.b > 4).select("a", "c")) == before_rows

    # a backfill paused before its commit while a regroup commits: it conflicts (its input
    # fragments were replaced) and the retry plans on the regrouped fragments
    t.register(UP)
    other = wh.table(name)
    flip = {"regroup": {"groups": {"pa": ["a", "s"]}}}
    with (
        hooked("backfill.before_commit", lambda: other.maintain(["regroup"], options=flip)),
        pytest.raises(CommitConflict, match="fragment\\(s\\) were removed"),
    ):
        t.backfill("s_up").run(spark)
    t.backfill("s_up").run(spark)
    # a regroup paused before its commit while a backfill commits: it prepares again and commits
    t.register(LOW)
    back = {"regroup": {"groups": {"pb": ["a", "b"]}}}
    raced: list[int] = []

    def backfill() -> None:
        other.backfill("s_low").run(spark)
        raced.append(other.version)

    with hooked("governance.before_commit", backfill):
        (again,) = t.maintain(["regroup"], options=back)
    assert again.outcome == "committed" and again.plan.base_version >= raced[0]
    assert set(t.status().cells.values()) == {"done"}
    got = t.read(columns=["s", "s_len", "s_up", "s_low", "a", "b"]).to_pylist()
    assert all((r["s_len"], r["s_up"], r["s_low"]) == (len(r["s"]), r["s"].upper(),
               r["s"].lower()) for r in got)  # fmt: skip
    assert sorted((r["a"], r["b"]) for r in got) == sorted((i, 2 * i) for k in range(2)
                                                         for i in range(k * 10, k * 10 + 6))  # fmt: skip
