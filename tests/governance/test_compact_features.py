"""Compaction keeps features exactly as they were (docs/governance.md): a feature compacted is
still done and not stale, one that was stale stays stale, lineage follows the new files, and a
backfill racing a compaction (both orders) loses nothing. Backfills run on Spark."""

from __future__ import annotations

import hashlib
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable._failpoints import hooked
from omnitable.exceptions import CommitConflict
from omnitable.vocabulary.names import ROW_ID

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

LEN = omnitable.sql_feature("text_len", "length(text)", "int", "1")
UP = omnitable.sql_feature("up", "upper(text)", "string", "1")


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return "f_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:16]


def _table(wh: omnitable.Warehouse, name: str, spark: Any) -> omnitable.Table:
    """b0, b1, b2 of 10 rows in fragments of 4; text_len and up done everywhere."""
    t = wh.create_table(name, {"text": "string"})
    for b in range(3):
        texts = [f"text {b} {'x' * i}" for i in range(10)]
        t.append(pa.table({"text": texts}), f"b{b}", target_fragment_rows=4)
    t.register(LEN, UP)
    t.backfill(["text_len", "up"]).run(spark)
    return t


def _grid(t: omnitable.Table) -> dict[tuple[str, str], str]:
    return dict(t.status().cells)


def _fragments(t: omnitable.Table, batch: str) -> int:
    return len(t.snapshot().fragments_of([batch]))


def test_done_stays_done_and_stale_stays_stale(
    wh: omnitable.Warehouse, name: str, spark: Any
) -> None:
    t = _table(wh, name, spark)
    ids = t.read(columns=[ROW_ID], batches=["b1"]).column(0).to_pylist()
    t.update(pa.table({ROW_ID: [ids[0]], "text": ["changed"]}))  # b1: 1 of 3 fragments stale
    t.update(pa.table({ROW_ID: ids, "text": [f"all {i}" for i in ids]}))  # ... then all of b1
    t.update(pa.table({ROW_ID: [t.read(columns=[ROW_ID], batches=["b2"]).column(0)[9].as_py()],
                       "text": ["last"]}))  # fmt: skip  # b2: its last fragment stale
    before = _grid(t)
    assert before[("b0", "text_len")] == "done" and before[("b1", "text_len")] == "stale"
    assert before[("b2", "up")] == "partial"
    rows = t.read().sort_by(ROW_ID)

    (result,) = t.maintain(["compact"])

    assert result.outcome == "committed"
    assert _grid(t) == before and t.read().sort_by(ROW_ID).equals(rows)
    assert [_fragments(t, b) for b in ("b0", "b1")] == [1, 1]
    assert _fragments(t, "b2") == 2  # the stale fragment is kept apart from the done ones
    lineage = t.lineage("text_len", batch="b0")
    assert lineage and all(r.engine != "" for r in lineage)
    # a backfill after the compaction recomputes exactly the stale rows, then all is done
    t.backfill(["text_len", "up"]).run(spark)
    assert set(_grid(t).values()) == {"done"}
    got = t.read(columns=["text", "text_len"]).to_pylist()
    assert all(r["text_len"] == len(r["text"]) for r in got)


def test_a_backfill_paused_while_a_compaction_commits_conflicts(
    wh: omnitable.Warehouse, name: str, spark: Any
) -> None:
    t = _table(wh, name, spark)
    t.register(omnitable.sql_feature("low", "lower(text)", "string", "1"))
    compactor = wh.table(name)
    with (
        hooked("backfill.before_commit", lambda: compactor.maintain(["compact"])),
        pytest.raises(CommitConflict, match="fragment\\(s\\) were removed"),
    ):
        t.backfill("low").run(spark)
    assert [_fragments(t, b) for b in ("b0", "b1", "b2")] == [1, 1, 1]
    t.backfill("low").run(spark)  # the retry plans on the new fragments
    assert set(_grid(t).values()) == {"done"}


def test_a_compaction_paused_while_a_backfill_commits_prepares_again(
    wh: omnitable.Warehouse, name: str, spark: Any
) -> None:
    t = _table(wh, name, spark)
    t.register(omnitable.sql_feature("low", "lower(text)", "string", "1"))
    other = wh.table(name)
    with hooked("governance.before_commit", lambda: other.backfill("low").run(spark)):
        (result,) = t.maintain(["compact"])
    assert result.outcome == "committed"
    assert [h.op for h in t.history()].count("compact") == 1
    assert set(_grid(t).values()) == {"done"}
    got = t.read(columns=["text", "low"]).to_pylist()
    assert all(r["low"] == r["text"].lower() for r in got)
