"""Record-level fault tolerance in backfills: bad records of every kind are isolated, recorded
in the error table and retried; the ratio policy aborts; without isolation the job fails. One
warehouse per backend for the module (``shared_warehouse``), a table of its own for each test."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID

from . import omt_faulty_features as faulty

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

KINDS = {
    "RAISE": "exception",
    "SLEEP": "timeout",
    "MEM": "memory",
    "SEGV": "crash",
    "EXIT": "crash",
}


def _texts(n: int, bad: dict[str, int], seed: int = 7) -> tuple[list[str], dict[int, str]]:
    rng = random.Random(seed)
    texts = [f"record number {i} " + "x" * rng.randint(0, 30) for i in range(n)]
    positions = rng.sample(range(n), sum(bad.values()))
    marked: dict[int, str] = {}
    for marker, count in bad.items():
        for _ in range(count):
            p = positions.pop()
            texts[p] = f"{marker} {texts[p]}"
            marked[p] = marker
    return texts, marked


def _docs(wh: omnitable.Warehouse) -> omnitable.Table:
    """A table ``text`` of the test's own in the module's warehouse."""
    return wh.create_table(f"docs_{uuid.uuid4().hex[:8]}", {"text": "string"})


def _faulty_table(
    wh: omnitable.Warehouse, feature: omnitable.Feature
) -> tuple[omnitable.Table, dict[int, str], list[str]]:
    texts, marked = _texts(3000, {"RAISE": 3, "SLEEP": 2, "MEM": 1, "SEGV": 1, "EXIT": 1})
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1", target_fragment_rows=1000)
    t.register(feature)
    return t, marked, texts


@pytest.fixture
def faulty_table(wh: omnitable.Warehouse) -> tuple[omnitable.Table, dict[int, str], list[str]]:
    return _faulty_table(wh, faulty.score)


@pytest.mark.parametrize("form", ["vectorized", "per-record"])
def test_bad_records_of_every_kind_are_isolated_and_recorded(wh, spark, form: str) -> None:  # type: ignore[no-untyped-def]
    t, marked, texts = _faulty_table(
        wh, faulty.score if form == "vectorized" else faulty.score_each
    )
    result = t.backfill("score").run(spark)
    assert result.errors == {"score@1": len(marked)}
    out = t.read(columns=[ROW_ID, "score"])
    ids = out.column(ROW_ID).to_pylist()
    scores = out.column("score").to_pylist()
    for pos, (text, value) in enumerate(zip(texts, scores, strict=True)):
        if pos in marked:
            assert value is None, (pos, text)
        else:
            assert value == len(text) / 2, (pos, text)
    errors = {r[ROW_ID]: r for r in (r.asDict() for r in t.errors(spark=spark).collect())}
    assert set(errors) == {ids[p] for p in marked}
    for pos, marker in marked.items():
        e = errors[ids[pos]]
        assert e["kind"] == KINDS[marker], (marker, e)
        assert (e["feature"], e["feature_version"], e["batch"]) == ("score", "1", "b1")
        assert e["run_id"] == result.run_id and e["row_offset"] == pos % 1000
        assert len(e["input_digest"]) == 64
    raise_err = next(errors[ids[p]] for p, m in marked.items() if m == "RAISE")
    assert raise_err["exception_type"] == "ValueError" and "cannot score" in raise_err["message"]
    assert "ValueError" in raise_err["traceback"]
    grid = t.status()
    assert grid.errors[("b1", "score")] == len(marked)
    assert "err" in str(grid)
    run = t.warehouse.catalog.get_run(result.run_id)
    assert run["metrics"]["errors"] == {"score@1": len(marked)}
    # readable from Spark SQL too
    t.errors_view(spark, "docs_errors")
    assert spark.sql("SELECT count(*) AS n FROM docs_errors").first().n == len(marked)


def test_error_ratio_policy_aborts_and_commits_nothing(faulty_table, spark) -> None:  # type: ignore[no-untyped-def]
    t, marked, _ = faulty_table
    version = t.version
    with pytest.raises(omnitable.ErrorRatioExceeded, match="above max_error_ratio") as info:
        t.backfill("score").run(spark, max_error_ratio=0.0001)
    assert info.value.failed == len(marked)
    assert t.version == version
    assert t.status().state("b1", "score") == "missing"
    assert t.errors(spark=spark).count() == 0  # the aborted step's error rows are not visible


def test_without_isolation_a_bad_record_fails_the_job(wh: omnitable.Warehouse, spark) -> None:  # type: ignore[no-untyped-def]
    texts, _ = _texts(200, {"RAISE": 1})
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.score)
    with pytest.raises(Exception, match="cannot score"):
        t.backfill("score").run(spark, isolation="off")
    assert t.status().state("b1", "score") == "missing"
    t.backfill("score").run(spark)  # the same data with isolation completes
    assert t.status().state("b1", "score") == "done"


def test_retry_recomputes_only_failed_records_and_resolves_them(
    wh: omnitable.Warehouse, spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    flag = tmp_path / "service-down"
    flag.touch()
    texts = [f"ok {i}" for i in range(500)]
    for p in (7, 123, 444):
        texts[p] = f"FLAKY:{flag}"
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1", target_fragment_rows=250)
    t.register(faulty.score)
    t.backfill("score").run(spark)
    assert t.errors(spark=spark).count() == 3
    assert t.backfill("score").is_empty  # errors alone do not make a column stale
    flag.unlink()  # the transient failure is over
    plan = t.backfill("score", retry_errors=True)
    assert (
        "retry 2 failed record(s)" in plan.explain() or "retry 1 failed record(s)" in plan.explain()
    )
    before = t.read(columns=["score"]).column("score").to_pylist()
    result = plan.run(spark)
    assert result.errors == {}
    after = t.read(columns=["score"]).column("score").to_pylist()
    assert [a for a, b in zip(after, before, strict=True) if a != b] == [len(texts[7]) / 2] * 3
    assert t.errors(spark=spark).count() == 0  # resolved: their files were replaced
    assert t.errors(spark=spark, include_resolved=True).count() == 3
    assert t.status().errors == {}


def test_retry_fixes_transient_failures_while_one_stays_failed(
    wh: omnitable.Warehouse, spark, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    flag = tmp_path / "service-down"
    flag.touch()
    texts = [f"ok {i}" for i in range(500)]
    flaky = list(range(3, 500, 55))  # 10 records
    for p in flaky:
        texts[p] = f"FLAKY:{flag}"
    texts[250] = "RAISE forever"
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.score)
    t.backfill("score").run(spark, max_error_ratio=0.05)
    assert t.errors(spark=spark).count() == len(flaky) + 1
    flag.unlink()
    # the ratio is over the chunk's 500 records (1 failed = 0.2 %), not the 11 retried ones
    result = t.backfill("score", retry_errors=True).run(spark)
    assert result.errors == {"score@1": 1}
    scores = t.read(columns=["score"]).column("score").to_pylist()
    assert [scores[p] for p in flaky] == [len(texts[flaky[0]]) / 2] * len(flaky)
    assert scores[250] is None
    (row,) = t.errors(spark=spark).collect()
    assert (row.row_offset, row.exception_type) == (250, "ValueError")


def test_output_values_that_do_not_fit_the_declared_type_fail_alone(
    wh: omnitable.Warehouse, spark
) -> None:  # type: ignore[no-untyped-def]
    texts = [f"row {i}" for i in range(600)]
    texts[5], texts[400] = "FLOAT row", "HUGE row"
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.sized)
    result = t.backfill("sized").run(spark)
    assert result.errors == {"sized@1": 2}
    out = t.read(columns=["n", "half"]).to_pydict()
    for pos, text in enumerate(texts):
        if pos in (5, 400):  # NULL in every output of the feature
            assert (out["n"][pos], out["half"][pos]) == (None, None)
        else:
            assert (out["n"][pos], out["half"][pos]) == (len(text), len(text) / 2)
    errors = {r.row_offset: r for r in t.errors(spark=spark).collect()}
    assert sorted(errors) == [5, 400]
    assert {e.kind for e in errors.values()} == {"type"}
    assert "'n'" in errors[5].message and "int32" in errors[5].message
    assert len(errors[400].input_digest) == 64


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_sql_feature_values_that_do_not_convert_fail_alone(
    wh: omnitable.Warehouse, spark, ansi: str
) -> None:  # type: ignore[no-untyped-def]
    texts = [f"{i}" for i in range(300)]
    texts[7] = "seven"
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1")
    t.register(omnitable.sql_feature("num", "concat(text, '')", "int", "1"))
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        result = t.backfill("num").run(spark)
    finally:
        spark.conf.unset("spark.sql.ansi.enabled")
    assert result.errors == {"num@1": 1}
    nums = t.read(columns=["num"]).column("num").to_pylist()
    assert nums == [None if i == 7 else i for i in range(300)]
    (row,) = t.errors(spark=spark).collect()
    assert (row.row_offset, row.kind, row.feature) == (7, "type", "num")
    assert "'seven'" in row.message and len(row.input_digest) == 64
    if ansi == "true":  # a retry recomputes the SQL feature; the record fails again
        assert t.backfill("num", retry_errors=True).run(spark).errors == {"num@1": 1}
        assert t.read(columns=["num"]).column("num").to_pylist() == nums


def test_error_rows_are_visible_only_with_their_files(
    wh: omnitable.Warehouse, spark, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    texts, _ = _texts(200, {"RAISE": 2})
    t = _docs(wh)
    t.append(pa.table({"text": texts}), "b1")
    t.register(faulty.score)
    # the error rows are written, then the catalog commit fails: nothing becomes visible
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "backfill.before_commit=raise")
    with pytest.raises(RuntimeError, match="failpoint"):
        t.backfill("score").run(spark)
    assert t.errors(spark=spark).count() == 0
    assert t.errors(spark=spark, include_resolved=True).count() == 2
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    t.backfill("score").run(spark)
    assert t.errors(spark=spark).count() == 2  # now with the committed files
