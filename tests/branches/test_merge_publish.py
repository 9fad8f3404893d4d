"""Merging back-filled features and write-audit-publish on local Spark, SQLite catalog
(docs/branches.md, "Merging" and "Write-audit-publish"): features back-filled on two branches
are both done on main after the merges, with the right values, read the same by Spark; a
feature whose input main changed meanwhile is stale; ``publish`` merges only when every
callable and SQL check passes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import AuditFailed, MergeConflict

from . import omt_merge_features as feats
from .merge_helpers import BASE, head_state, make_table, rows, set_col, with_values

pytestmark = pytest.mark.spark

S_LEN = omnitable.sql_feature("s_len", "length(s)", "int", "1")
Y2 = omnitable.sql_feature("y2", "y * 2", "double", "1")
COLS = ("s", "y", "s_len", "y2")


@pytest.fixture
def t(tmp_path: Path) -> Iterator[omnitable.Table]:
    wh = omnitable.connect(str(tmp_path / "wh"))
    table = make_table(wh)
    table.register(S_LEN, Y2)
    yield table
    wh.close()


def _model(base: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    return {x: (s, y, len(s), y * 2) for x, (s, y) in base.items()}


def _spark_rows(
    t: omnitable.Table, spark: Any, cols: tuple[str, ...] = COLS
) -> dict[int, tuple[Any, ...]]:
    got = t.to_spark(spark).select("x", *cols).collect()
    return {r["x"]: tuple(r[c] for c in cols) for r in got}


def _states(t: omnitable.Table) -> set[str]:
    grid = t.status()
    return {grid.state(b, c) for b in grid.batches for c in grid.columns}


def test_features_back_filled_on_two_branches_merge_into_main(
    t: omnitable.Table, spark: Any
) -> None:
    a, b = t.create_branch("a"), t.create_branch("b")
    a.backfill(["s_len"]).run(spark)
    t.backfill(["y2"]).run(spark, branch="b")  # planned again on b, commits there
    assert _states(t) == {"missing"}  # nothing on main yet
    assert {b.status().state("b1", "y2"), b.status().state("b1", "s_len")} == {"done", "missing"}
    assert t.merge("a").fast_forward
    result = t.merge("b")
    assert not result.fast_forward and not result.resolved and result.cells == 3
    assert _states(t) == {"done"}
    assert t.backfill(["s_len", "y2"]).is_empty  # adopted outputs are not recomputed
    want = _model(BASE)
    assert rows(t, COLS) == want == _spark_rows(t, spark)
    lineage = t.lineage("y2", batch="b1")  # one record per fragment, as on b
    assert [(r.feature, r.feature_version) for r in lineage] == [("y2", "1")] * 2
    assert [r.run_id for r in lineage] == [r.run_id for r in b.lineage("y2", batch="b1")]


def test_a_feature_whose_input_main_changed_is_stale_after_the_merge(
    t: omnitable.Table, spark: Any
) -> None:
    b = t.create_branch("b")
    b.backfill(["s_len"]).run(spark)
    set_col(t, "s", {1: "changed on main"})  # the input of s_len in b1's first fragment
    t.merge("b")
    grid = t.status()
    # b1's first fragment is stale, its second done; b2 done
    assert (grid.state("b1", "s_len"), grid.state("b2", "s_len")) == ("partial", "done")
    plan = t.backfill(["s_len"])
    assert list(plan.recompute_reasons) == [("s_len", "b1")] and not plan.is_empty
    plan.run(spark)
    want = _model(with_values(BASE, 0, {1: "changed on main"}))
    assert {x: r[:3] for x, r in rows(t, COLS[:3]).items()} == {x: r[:3] for x, r in want.items()}
    assert t.status().state("b1", "s_len") == "done"


def test_a_feature_recomputed_on_the_source_after_its_input_changed_is_done(
    t: omnitable.Table, spark: Any
) -> None:
    """The source changes an input and back-fills on it: the merge adopts both cells, and the
    output's lineage names the adopted input file, so it is done (not stale) on main."""
    t.backfill(["s_len"]).run(spark)
    a = t.create_branch("a")
    set_col(a, "s", {1: "longer on a"})
    assert a.status().state("b1", "s_len") == "partial"
    a.backfill(["s_len"]).run(spark)
    set_col(t, "y", {7: 77.0})  # main moved: a three-way merge
    result = t.merge("a")
    assert not result.fast_forward and result.cells == 2
    assert t.status().state("b1", "s_len") == "done"
    assert t.backfill(["s_len"]).is_empty
    want = _model(with_values(with_values(BASE, 0, {1: "longer on a"}), 1, {7: 77.0}))
    got = rows(t, COLS[:3])
    assert got == {x: r[:3] for x, r in want.items()}
    assert {x: r[:3] for x, r in _spark_rows(t, spark).items()} == got


@pytest.mark.parametrize("strategy", ["ours", "theirs"])
def test_one_output_of_a_two_output_feature_in_conflict(
    t: omnitable.Table, spark: Any, strategy: str
) -> None:
    """a back-fills a feature of two outputs (one file per fragment); main sets one output of
    one fragment: that cell conflicts, the other output is adopted from the same file, and
    "theirs" adopts that file a second time for the conflicting cell."""
    t.register(feats.s_stats)
    a = t.create_branch("a")
    a.backfill(["s_stats"]).run(spark)
    set_col(t, "s_chars", {1: 99})
    with pytest.raises(MergeConflict) as info:
        t.merge("a")
    assert [(c.kind, c.column) for c in info.value.details] == [("cell", "s_chars")]
    result = t.merge("a", strategy=strategy)
    assert [c.column for c in result.resolved] == ["s_chars"]
    got = rows(t, ("s", "s_chars", "s_digits"))
    want: dict[int, tuple[Any, ...]] = {
        x: (s, len(s), sum(ch.isdigit() for ch in s)) for x, (s, _) in BASE.items()
    }
    if strategy == "ours":  # main's cell; the rest of the fragment's s_chars is NULL there
        want = {x: (r[0], 99 if x == 1 else None, r[2]) if x < 5 else r for x, r in want.items()}
    assert got == want == _spark_rows(t, spark, ("s", "s_chars", "s_digits"))
    if strategy == "theirs":
        assert t.status().state("b1", "s_chars") == "done"
        assert t.backfill(["s_stats"]).is_empty


def test_a_feature_registered_and_back_filled_on_a_branch_is_done_after_the_merge(
    t: omnitable.Table, spark: Any
) -> None:
    a = t.create_branch("a")
    a.register(omnitable.sql_feature("s_up", "upper(s)", "string", "1"))
    assert "s_up" not in {f.name for f in t.features()}  # registered on a only
    a.backfill(["s_up"]).run(spark)
    set_col(t, "s", {11: "m11"})  # main moved (b2 only): a three-way merge
    result = t.merge("a")
    assert not result.fast_forward and result.features == 1 and not result.resolved
    assert {f.name for f in t.features()} == {"s_len", "y2", "s_up"}
    grid = t.status()
    assert (grid.state("b1", "s_up"), grid.state("b2", "s_up")) == ("done", "stale")
    got = rows(t, ("s", "s_up"))
    assert {x: r for x, r in got.items() if x < 10} == {
        x: (s, s.upper()) for x, (s, _) in BASE.items() if x < 10
    }
    assert got[11] == ("m11", "R11")  # computed on a from the value main changed since
    assert {x: r[:2] for x, r in _spark_rows(t, spark, ("s", "s_up")).items()} == got


# -- write-audit-publish -------------------------------------------------------------------


def _no_big_y(branch: omnitable.Table) -> bool:
    return branch.read(["y"], where=pc.field("y") > 100).num_rows == 0


def _raises(branch: omnitable.Table) -> bool:
    raise RuntimeError(f"cannot audit {branch.current_branch}")


def test_publish_merges_only_when_every_check_passes(t: omnitable.Table, spark: Any) -> None:
    audit = t.create_branch("audit")
    set_col(audit, "y", {1: 1000.0})
    seen: list[str] = []
    passing = [lambda br: seen.append(br.current_branch), _no_big_y]  # None counts as a pass
    before = head_state(t)
    with pytest.raises(AuditFailed) as info:
        t.publish("audit", passing, spark=spark)
    assert seen == ["audit"] and "_no_big_y" in info.value.check
    assert info.value.reason == "returned False"
    with pytest.raises(AuditFailed) as info:
        t.publish("audit", [_raises], spark=spark)
    assert info.value.reason == "RuntimeError: cannot audit audit"
    sql = "SELECT COUNT(*) = 0 FROM {table} WHERE y > 100"
    with pytest.raises(AuditFailed) as info:
        t.publish("audit", [sql], spark=spark)
    assert info.value.check == sql and "not true" in info.value.reason
    assert head_state(t) == before  # nothing merged
    set_col(audit, "y", {1: 1.5})  # fixed on the branch
    result = t.publish("audit", [*passing, sql, "SELECT y < 100 FROM {table}"], spark=spark)
    assert result.fast_forward and result.version == t.version
    assert rows(t) == with_values(BASE, 1, {1: 1.5})


def test_publish_refuses_bad_checks_before_running_any(t: omnitable.Table, spark: Any) -> None:
    audit = t.create_branch("audit")
    set_col(audit, "y", {1: 5.5})
    ran: list[str] = []
    before = head_state(t)
    for bad in ([lambda br: ran.append("x"), 42], [lambda br: ran.append("x"), "SELECT 1"]):
        with pytest.raises(omnitable.ValidationError):
            t.publish("audit", bad, spark=spark)  # type: ignore[arg-type]
    with pytest.raises(AuditFailed, match="returned no row"):
        t.publish("audit", ["SELECT true FROM {table} WHERE y > 1e9"], spark=spark)
    assert ran == [] and head_state(t) == before
    with pytest.raises(omnitable.NotFoundError):
        t.publish("nope", [], spark=spark)
    t.publish("audit", spark=spark)  # no checks: a plain merge
    assert rows(t) == with_values(BASE, 1, {1: 5.5})
