"""The Python API on a SparkSession: reads, appends of Spark DataFrames, backfills (pandas and
SQL features), error tables and scan metrics — one set of tests for both kinds of session.

Collected normally, the module runs on the shared classic session (tests/conftest.py). With
``OMNITABLE_TEST_SESSION=connect`` it runs on a Spark Connect session that
``omnitable.spark_session(remote="local[2]")`` starts with the jar; test_connect_session.py
runs it that way in a child pytest (pyspark serves one kind of session per process). The bodies
are the same, so the two cannot drift.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import Iterator
from typing import Any

import omt_connect_features as features
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.exec.scan_metrics import ScanMetrics
from omnitable.spark.session import CATALOG_CLASS, is_connect, warehouse_string

pytestmark = pytest.mark.spark

SESSION_ENV = "OMNITABLE_TEST_SESSION"
TEXTS = ["alpha", "BAD one", "gamma ray", "delta", "BAD two", "epsilon x"]


def on_connect() -> bool:
    return os.environ.get(SESSION_ENV) == "connect"


@pytest.fixture(scope="module")
def session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """The classic shared session, or a Spark Connect session on a local server with the jar."""
    if not on_connect():
        yield request.getfixturevalue("spark")
        return
    pg = os.environ.get("OMNITABLE_TEST_POSTGRES_URL")
    spark = omnitable.spark_session(
        tmp_path_factory.mktemp("connect-default-wh"),
        remote="local[2,4]",
        **({"spark.omnitable.warehouses.test_postgres": pg} if pg else {}),
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.driver.memory": "1g",
            "spark.default.parallelism": "2",
            "spark.ui.showConsoleProgress": "false",
            "spark.databricks.delta.snapshotPartitions": "2",
        },
    )
    assert is_connect(spark)
    yield spark
    spark.stop()


@pytest.fixture
def catalog(session: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse (catalogs can be added to a live session)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    session.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    session.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def test_the_session_is_of_the_kind_asked_for(session: Any) -> None:
    assert is_connect(session) == on_connect()
    assert not hasattr(session, "_jsparkSession") or not on_connect()


def test_reads_dataframe_source_and_sql(
    session: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table("docs", {"text": "string", "score": "double"})
    t.append(pa.table({"text": ["a", "b", "c"], "score": [0.5, 0.7, 0.9]}), "b1")
    t.append(pa.table({"text": ["d"], "score": [0.1]}), "b2")
    rows = t.to_spark(session).orderBy(ROW_ID).collect()
    assert [(r.text, r.score) for r in rows] == [("a", 0.5), ("b", 0.7), ("c", 0.9), ("d", 0.1)]
    assert t.to_spark(session, batches=["b2"]).count() == 1
    direct = session.read.format("omnitable").option("warehouse", warehouse_string(wh)).load("docs")
    assert direct.where("score > 0.6").count() == 2
    sql = session.sql(f"SELECT text FROM {catalog}.docs WHERE score > 0.6 ORDER BY text")
    assert [r.text for r in sql.collect()] == ["b", "c"]
    assert session.sql("SELECT omnitable_version()").first()[0]


def test_scan_metrics_of_a_tagged_read(session: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": [f"row {i}" for i in range(50)]}), "b1", target_fragment_rows=20)
    metrics = ScanMetrics(session)
    metrics.reset()
    tag = f"read-{uuid.uuid4().hex[:8]}"
    session.addTag(tag)
    try:
        assert len(t.to_spark(session).select("text").collect()) == 50
    finally:
        session.removeTag(tag)
    read = metrics.for_tag(tag)
    assert read["omnitableScans"] == 1
    assert read["fragmentsRead"] == 3
    assert read["omnitableBytesRead"] > 0
    assert metrics.snapshot()["total"]["tasks"] >= read["tasks"] > 0
    assert metrics.for_tag("no-such-tag") == {}


def test_append_spark_dataframes(session: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("docs", {"text": "string", "n": "bigint"})
    frame = pd.DataFrame({"text": [f"t{i}" for i in range(30)], "n": list(range(30))})
    v1 = t.append(session.createDataFrame(frame).repartition(3), "b1")
    out = t.read(columns=[ROW_ID, "text", "n"]).to_pandas().sort_values("n")
    assert out["text"].tolist() == frame["text"].tolist()
    assert out[ROW_ID].is_unique
    supplied = pd.DataFrame({ROW_ID: [10**12, 10**12 + 1], "text": ["x", "y"], "n": [100, 101]})
    v2 = t.append(session.createDataFrame(supplied), "b2")
    assert v2 > v1 and t.count() == 32
    b2 = t.read(columns=[ROW_ID, "n"], batches=["b2"]).to_pandas().sort_values("n")
    assert b2[ROW_ID].tolist() == [10**12, 10**12 + 1]
    dupes = pd.DataFrame({ROW_ID: [10**12, 7], "text": ["z", "w"], "n": [1, 2]})
    with pytest.raises(omnitable.OmniTableError):
        t.append(session.createDataFrame(dupes), "b3")
    assert t.count() == 32


def test_backfill_pandas_and_sql_features(session: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": TEXTS * 3}), "b1", target_fragment_rows=8)
    t.register(features.n_chars, omnitable.sql_feature("text_len", "length(text)", "int", "1"))
    result = t.backfill(["n_chars", "text_len"]).run(session)
    out = t.read(columns=["text", "n_chars", "text_len"]).to_pandas()
    assert out["n_chars"].tolist() == [len(x) for x in TEXTS * 3]
    assert out["text_len"].tolist() == out["n_chars"].tolist()
    assert {f for s in result.steps for f in s.features} == {"n_chars@1", "text_len@1"}
    assert all(s.fragments == 3 for s in result.steps)
    pandas_step = next(s for s in result.steps if "n_chars@1" in s.features)
    assert pandas_step.scans >= 1 and pandas_step.bytes_read > 0  # scan metrics of the job
    again = t.backfill(["n_chars", "text_len"])
    assert again.is_empty


def test_error_tables(session: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": TEXTS}), "b1")
    t.register(features.score)
    result = t.backfill("score").run(session, max_error_ratio=0.5)
    assert result.errors == {"score@1": 2}
    scores = t.read(columns=["text", "score"]).to_pandas()
    good = scores[~scores["text"].str.startswith("BAD")]
    assert good["score"].tolist() == [len(x) / 2 for x in good["text"]]
    assert scores[scores["text"].str.startswith("BAD")]["score"].isna().all()
    errors = [r.asDict() for r in t.errors(spark=session).collect()]
    assert sorted(e["row_offset"] for e in errors) == [1, 4]
    assert {(e["feature"], e["kind"], e["exception_type"]) for e in errors} == {
        ("score", "exception", "ValueError")
    }
    assert all(e["run_id"] == result.run_id for e in errors)
    assert t.errors("other", spark=session).count() == 0
    view = t.errors_view(session, f"docs_errors_{uuid.uuid4().hex[:6]}")
    assert session.sql(f"SELECT count(*) AS n FROM {view}").first().n == 2


def test_errors_of_a_table_without_error_table(session: Any, wh: omnitable.Warehouse) -> None:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": ["a"]}), "b1")
    assert t.errors(spark=session).count() == 0


def test_hot_column_view_refresh_and_read(
    session: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = wh.create_table(
        "hotv", {"a": "bigint", "b": "string", "ts": "timestamp"}, groups={"g": ["b"]}
    )
    stamps = [dt.datetime(2020, 1, 1, i, tzinfo=dt.UTC) for i in range(10)]
    t.append(
        pa.table({"a": list(range(10)), "b": [f"s{i}" for i in range(10)],
                  "ts": pa.array(stamps, t.schema.field("ts").type)}),
        "b1",
    )  # fmt: skip
    t.create_view("hot", ["a", "ts"])
    (res,) = t.maintain(["views"], options={"views": {"spark": session}})
    assert res.outcome == "committed"
    assert t.views()[0]["data_files"] == 1  # recorded through this session: read directly
    query = f"SELECT a FROM {catalog}.hotv WHERE a > 6"
    assert "ColumnViewRead" in session.sql(f"EXPLAIN {query}").first()[0]
    assert sorted(r.a for r in session.sql(query).collect()) == [7, 8, 9]
    # the refresh's write settings were set in the session and taken back
    assert session.conf.get("parquet.block.row.count.limit", None) is None
    # Table.read answers from the same files: the refresh's write settings reached Delta's
    # writer (timestamps as TIMESTAMP_MICROS, else the view's files could not answer)
    scan = t.scan(["a", "ts"], where=pc.field("a") > 6)
    assert scan.stats.view == "hot"
    got = sorted(zip(scan.table.column("a").to_pylist(), scan.table.column("ts").to_pylist(),
                     strict=True))  # fmt: skip
    assert got == list(zip(range(7, 10), stamps[7:], strict=True))
