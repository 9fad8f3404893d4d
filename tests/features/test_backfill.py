"""End-to-end backfills on local Spark: values, lineage, idempotence, staleness, concurrency."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID

from . import omt_test_features as F

pytestmark = pytest.mark.spark

TEXTS = ["  Hello World ", "Foo 42 bar", "ONE", "a b c d", "x1"]


@pytest.fixture
def docs(wh: omnitable.Warehouse) -> omnitable.Table:
    t = wh.create_table("docs", {"text": "string", "lang": "string"})
    t.append(pa.table({"text": TEXTS * 3, "lang": ["en"] * 15}), "b1", target_fragment_rows=4)
    t.append(pa.table({"text": TEXTS, "lang": ["de"] * 5}), "b2")
    t.register(
        F.clean,
        F.n_chars,
        F.words,
        F.quality,
        omnitable.sql_feature("text_len", "length(text)", "int", "1"),
    )
    return t


def _col(t: omnitable.Table, name: str, batch: str | None = None) -> list:  # type: ignore[type-arg]
    return t.read(columns=[name], batches=[batch] if batch else None).column(name).to_pylist()


def test_backfill_computes_the_closure_with_lineage(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    plan = docs.backfill(["quality", "text_len"])
    text = plan.explain()
    assert "step 1: level 1" in text and "fused x2" in text  # clean and text_len share `text`
    result = plan.run(spark)
    assert len(result.versions) == 3  # one commit per step
    texts = TEXTS * 3 + TEXTS
    assert _col(docs, "clean") == [s.strip().lower() for s in texts]
    assert _col(docs, "text_len") == [len(s) for s in texts]
    assert _col(docs, "n_words") == [len(s.split()) for s in texts]
    assert _col(docs, "has_digit") == [any(c.isdigit() for c in s) for s in texts]
    want_q = [len(s.strip()) / max(1, len(s.split())) for s in texts]
    assert _col(docs, "quality") == pytest.approx(want_q)
    grid = docs.status()
    assert {grid.state(b, c) for b in ("b1", "b2") for c in grid.columns} == {"done"}
    lin = docs.lineage("quality", batch="b2")
    assert len(lin) == 1
    rec = lin[0]
    assert (rec.feature, rec.feature_version, rec.engine, rec.run_id) == (
        "quality",
        "1",
        "pandas",
        result.run_id,
    )
    assert {i["column"] for i in rec.inputs} == {"n_chars", "n_words"}
    assert all(i["file_id"] for i in rec.inputs)
    assert docs.lineage("text_len")[0].engine == "spark-sql"
    run = docs.warehouse.catalog.get_run(result.run_id)
    assert run["status"] == "succeeded" and run["kind"] == "backfill"


def test_second_identical_backfill_does_nothing(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    docs.backfill("quality").run(spark)
    version = docs.version
    plan = docs.backfill("quality")
    assert plan.is_empty and "nothing to do" in plan.explain()
    assert plan.run(spark).versions == []
    assert docs.version == version


def test_version_bump_recomputes_downstream_only_where_needed(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    docs.backfill(["quality", "text_len"]).run(spark)
    docs.register(F.clean_v2)
    plan = docs.backfill(["quality", "text_len"])
    names = [f.name for s in plan.steps for f in s.features]
    assert names == ["clean", "n_chars", "words", "quality"]  # text_len is not downstream
    plan.run(spark)
    assert _col(docs, "clean", "b2")[0] == "hello world"
    assert docs.backfill(["quality", "text_len"]).is_empty


def test_new_batch_is_backfilled_alone(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    docs.backfill("quality").run(spark)
    docs.append(pa.table({"text": ["New Batch  "], "lang": ["fr"]}), "b3")
    plan = docs.backfill("quality")
    assert {f.batch_name for s in plan.steps for f in s.fragments} == {"b3"}
    assert docs.status().state("b3", "quality") == "missing"
    plan.run(spark)
    assert _col(docs, "clean", "b3") == ["new batch"]
    assert docs.status().state("b3", "quality") == "done"


def test_concurrent_backfills_of_different_features_both_commit(
    docs: omnitable.Table, spark, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    docs.register(F.shout, F.first_char)
    # both runs compute from the same base, then wait before committing
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "backfill.before_commit=sleep:3")
    base = docs.version
    errors: list[BaseException] = []

    def run(target: str) -> None:
        try:
            docs.backfill(target, batches=["b1"]).run(spark)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("shout", "first_char")]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert docs.version == base + 2
    assert _col(docs, "shout", "b1")[0] == TEXTS[0].upper()
    assert _col(docs, "first_char", "b1")[0] == TEXTS[0][:1]


def test_concurrent_backfills_of_the_same_feature_conflict(
    docs: omnitable.Table, spark, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "backfill.before_commit=sleep:3")
    outcomes: list[str] = []

    def run() -> None:
        try:
            docs.backfill("clean", batches=["b2"]).run(spark)
            outcomes.append("ok")
        except omnitable.CommitConflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["conflict", "ok"]
    assert docs.status().state("b2", "clean") == "done"


def test_ids_are_untouched_and_rows_stay_aligned(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    before = docs.read(columns=[ROW_ID, "text"])
    docs.backfill("clean").run(spark)
    after = docs.read(columns=[ROW_ID, "text", "clean"])
    assert after.column(ROW_ID).equals(before.column(ROW_ID))
    assert [t.strip().lower() for t in after.column("text").to_pylist()] == after.column(
        "clean"
    ).to_pylist()


def test_output_type_change_keeps_one_file_per_group(docs: omnitable.Table, spark) -> None:  # type: ignore[no-untyped-def]
    docs.backfill("text_len", batches=["b2"]).run(spark)
    docs.register(omnitable.sql_feature("text_len", "length(text)", "bigint", "2"))
    assert docs.status().state("b2", "text_len") == "missing"  # a new column replaced the old
    docs.backfill("text_len", batches=["b2"]).run(spark)
    snap = docs.snapshot()
    for frag in snap.fragments_of(["b2"]):
        groups = [f.group_name for f in snap.files_by_fragment[frag.fragment_id]]
        assert groups.count("text_len") == 1  # the int file was replaced, not left behind
    assert _col(docs, "text_len", "b2") == [len(s) for s in TEXTS]
