"""A backfill chunk's commit checks, at the head, what it read and what its plan decided on
(issue 10, items 2-5): each case is a real race, a second writer committing between the chunk's
snapshot and its commit (an in-process failpoint hook), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable._failpoints import hooked
from omnitable.features.planner import Plan

from . import omt_faulty_features as faulty
from . import omt_test_features as F

pytestmark = pytest.mark.spark

TEXTS = ["  Hello  World ", "Foo 42 bar", "ONE", "a b c d", "x1"]


@pytest.fixture
def docs(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": TEXTS}), "b1")
    t.register(F.clean, F.n_chars, omnitable.sql_feature("text_len", "length(text)", "int", "1"))
    return t


def _run_racing(plan: Plan, spark, other: Callable[[], object], match: str) -> None:  # type: ignore[no-untyped-def]
    """Run ``plan`` while ``other`` commits just before the (first) chunk's commit."""
    with (
        hooked("backfill.before_commit", other),
        pytest.raises(omnitable.CommitConflict, match=match),
    ):
        plan.run(spark)


def test_backfill_reading_an_input_recomputed_meanwhile_conflicts_and_replans(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    docs.backfill("clean").run(spark)
    plan = docs.backfill("n_chars")  # reads clean@1's files

    def recompute_clean() -> None:
        docs.register(F.clean_v2)
        docs.backfill("clean").run(spark)

    _run_racing(plan, spark, recompute_clean, r"input column\(s\) clean were recomputed")
    assert docs.status().state("b1", "n_chars") == "missing"  # nothing committed
    plan.run(spark)  # re-plans: computes n_chars from clean@2's files
    assert docs.status().state("b1", "n_chars") == "done"
    lin = docs.lineage("n_chars")
    snap = docs.snapshot()
    cid = snap.column("clean").column_id
    for rec in lin:
        current = snap.resolve(rec.fragment_id, [cid])[cid]
        assert current is not None and rec.inputs[0]["file_id"] == current.file_id
    assert docs.backfill("n_chars").is_empty


def test_stale_plan_of_an_old_feature_version_cannot_overwrite_the_new_one(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    plan = docs.backfill("clean")  # clean@1
    docs.register(F.clean_v2)  # after planning, before the run: clean@2 computed and committed
    docs.backfill("clean").run(spark)
    with pytest.raises(omnitable.CommitConflict, match="replaces for column.*clean"):
        plan.run(spark)
    assert {r.feature_version for r in docs.lineage("clean")} == {"2"}
    assert docs.status().state("b1", "clean") == "done"
    assert plan.run(spark).versions == []  # re-planned: clean@2 is already done


def test_plan_whose_batch_was_replaced_conflicts_cleanly_and_replans(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    plan = docs.backfill("clean")
    docs.append(pa.table({"text": ["New  One"]}), "b1", mode="replace")
    with pytest.raises(omnitable.CommitConflict, match="planned fragment.* removed"):
        plan.run(spark)
    plan.run(spark)
    assert docs.read(columns=["clean"]).column("clean").to_pylist() == ["new  one"]


def test_output_type_changed_while_the_backfill_runs_is_not_attached(
    docs: omnitable.Table, spark
) -> None:  # type: ignore[no-untyped-def]
    plan = docs.backfill("text_len")  # int
    bigint = omnitable.sql_feature("text_len", "length(text)", "bigint", "2")
    _run_racing(plan, spark, lambda: docs.register(bigint), "column 'text_len' was replaced")
    assert docs.status().state("b1", "text_len") == "missing"
    plan.run(spark)
    got = docs.read(columns=["text_len"])
    assert got.schema.field("text_len").type == pa.int64()
    assert got.column("text_len").to_pylist() == [len(s) for s in TEXTS]


def test_backfill_replaces_only_files_holding_just_its_outputs(
    docs: omnitable.Table, wh: omnitable.Warehouse, spark
) -> None:  # type: ignore[no-untyped-def]
    """A table where a raw column landed in a feature's group before ownership was checked at
    commit (the add_columns/register race): the feature's backfill must not remove its file."""
    ids = docs.read(columns=[omnitable.ROW_ID]).column(omnitable.ROW_ID)
    docs.add_columns(pa.table({omnitable.ROW_ID: ids, "note": ["n"] * len(ids)}), group="h")
    with docs.warehouse.catalog.store.write() as conn:  # the state the race left behind
        t = docs.record.table_id
        conn.execute(
            text(
                "UPDATE columns SET group_name = 'text_len' WHERE table_id = :t AND name = 'note'"
            ),
            {"t": t},
        )
        conn.execute(
            text(
                "UPDATE files SET group_name = 'text_len' WHERE table_id = :t AND group_name = 'h'"
            ),
            {"t": t},
        )
    docs.backfill("text_len").run(spark)
    got = docs.read(columns=["note", "text_len"])
    assert got.column("note").to_pylist() == ["n"] * len(TEXTS)
    assert got.column("text_len").to_pylist() == [len(s) for s in TEXTS]


def test_retry_plan_whose_file_was_replaced_conflicts_and_replans(
    wh: omnitable.Warehouse, spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    flag = tmp_path / "service-down"
    flag.touch()
    texts = [f"ok {i}" for i in range(200)]  # 1 failure stays under max_error_ratio
    texts[3] = f"FLAKY:{flag}"
    t = wh.create_table("docs", {"text": "string"})
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.score)
    t.backfill("score").run(spark)
    stale = t.backfill("score", retry_errors=True)  # patches the file holding the failure
    flag.unlink()
    t.backfill("score", retry_errors=True).run(spark)  # another retry replaced that file first
    with pytest.raises(omnitable.CommitConflict, match="patches or replaces for column.*score"):
        stale.run(spark)
    assert stale.run(spark).versions == []  # re-planned: nothing is left to retry
    assert t.errors(spark=spark).count() == 0
    assert t.read(columns=["score"]).column("score").to_pylist()[3] == len(texts[3]) / 2


def test_backfill_whose_commit_outcome_is_unknown_keeps_its_files(
    docs: omnitable.Table, spark, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The commit landed, the connection dropped, the lookup and the run's own bookkeeping find
    the catalog away: the caller gets CommitOutcomeUnknown and the files the commit references
    stay (deleting them would break the committed version)."""
    plan = docs.backfill("clean")
    monkeypatch.setenv(
        "OMNITABLE_FAILPOINTS",
        "commit.after_commit=disconnect,commit.lookup=disconnect,run.finish=disconnect",
    )
    with pytest.raises(omnitable.CommitOutcomeUnknown):
        plan.run(spark)
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert docs.status().state("b1", "clean") == "done"
    got = docs.read(columns=["clean"]).column("clean").to_pylist()
    assert got == [t.strip().lower() for t in TEXTS]  # the committed files are all there
