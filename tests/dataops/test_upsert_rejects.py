"""Rejected upsert rows: a custom merge policy runs under the ``isolation`` policy given to
``Table.upsert`` (a row whose merge overruns the time budget is rejected and keeps its stored
values, the other rows merge; a bad ``isolation`` argument is refused before anything is
written); and an error table that cannot be written after the commit is reported, not raised."""

from __future__ import annotations

import logging
import pathlib
import time

import pandas as pd
import pyarrow as pa
import pytest

import omnitable
from omnitable.isolation import IsolationPolicy


def _add_or_hang(stored: pd.DataFrame, incoming: pd.DataFrame) -> pd.DataFrame:
    if (incoming["label"] == 13).any():
        time.sleep(30)
    return pd.DataFrame({"label": stored["label"] + incoming["label"]})


@pytest.mark.spark
def test_a_merge_overrunning_its_budget_is_rejected_and_the_rest_merges(
    tmp_path: object, spark: object
) -> None:
    wh = omnitable.connect(str(tmp_path))
    t = wh.create_table("k", {"url": "string", "label": "bigint"}, key="url")
    t.upsert(pa.table({"url": ["a", "b", "c"], "label": [1, 2, 3]}))
    result = t.upsert(
        pa.table({"url": ["a", "b", "c"], "label": [10, 13, 1]}),
        policy=_add_or_hang,
        isolation=IsolationPolicy(timeout_s=0.5, call_timeout_s=2.0),
        spark=spark,
    )
    assert (result.merged, result.rejected.column("url").to_pylist()) == (2, ["b"])
    assert "time budget" in result.rejected.column("_ai_error_")[0].as_py()
    got = sorted((r["url"], r["label"]) for r in t.read(["url", "label"]).to_pylist())
    assert got == [("a", 11), ("b", 2), ("c", 4)]
    errors = t.errors(spark=spark).select("kind", "exception_type", "input_digest").collect()
    assert [(e.kind, e.exception_type, e.input_digest) for e in errors] == [
        ("upsert", "policy", "'b'")
    ]


def test_a_bad_isolation_argument_commits_nothing(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("k", {"url": "string", "label": "bigint"}, key="url")
    t.upsert(pa.table({"url": ["a"], "label": [1]}))
    version = t.version
    with pytest.raises(omnitable.ValidationError, match="IsolationPolicy"):
        t.upsert(pa.table({"url": ["a"], "label": [2]}), policy=_add_or_hang, isolation="fast")  # type: ignore[arg-type]
    assert t.version == version and t.lookup(["a"], ["label"]).to_pylist() == [{"label": 1}]


@pytest.mark.spark
def test_an_error_table_that_cannot_be_written_is_reported_not_raised(
    tmp_path: pathlib.Path, spark: object, caplog: pytest.LogCaptureFixture
) -> None:
    wh = omnitable.connect(str(tmp_path))
    t = wh.create_table("k", {"url": "string", "label": "bigint"}, key="url")
    errors_dir = pathlib.Path(t.location.path) / "errors"
    errors_dir.parent.mkdir(parents=True, exist_ok=True)
    errors_dir.write_text("not a directory: the Delta error table cannot be created here")
    with caplog.at_level(logging.WARNING, logger="omnitable.exec.errors"):
        result = t.upsert(pa.table({"url": ["a", None], "label": [1, 2]}), spark=spark)
    assert result.version == t.version and result.inserted == 1
    assert not result.errors_recorded and result.rejected.num_rows == 1
    assert "were not recorded in its error table" in caplog.text
    assert t.lookup(["a"], ["label"]).to_pylist() == [{"label": 1}]
