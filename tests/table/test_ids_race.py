"""Racing appends never commit the same ``_ai_unique_id_`` twice (generated or supplied ids,
local or Spark ingest), and supplied ids far apart never conflict falsely."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID

POINT = "append.before_commit"
Race = Callable[[str, Callable[[], Any], Callable[[], Any]], dict[str, Any]]  # conftest.race


def ids_of(t: omnitable.Table) -> list[int]:
    return sorted(t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist())


def supplied(ids: list[int]) -> pa.Table:
    return pa.table({ROW_ID: pa.array(ids, pa.int64()), "x": [float(i % 7) for i in ids]})


def test_generated_ids_conflict_with_supplied_ids_committed_first(
    wh: omnitable.Warehouse, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    out = race(
        POINT,
        lambda: t.append(pa.table({"x": [1.0] * 10}), "auto", target_fragment_rows=4),
        lambda: t.append(supplied([3, 100]), "given"),
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "[3]" in str(out["error"]) and ROW_ID in str(out["error"])
    assert ids_of(t) == [3, 100]
    assert [b.name for b in t.batches()] == ["given"]


def test_supplied_ids_conflict_with_generated_ids_committed_first(
    wh: omnitable.Warehouse, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    out = race(
        POINT,
        lambda: t.append(supplied([2, 4, 2**40]), "given"),
        lambda: t.append(pa.table({"x": [1.0] * 10}), "auto"),
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "2 of its" in str(out["error"]) and "[2, 4]" in str(out["error"])
    assert ids_of(t) == list(range(10))


def test_overlapping_supplied_ids_conflict_and_name_the_ids(
    wh: omnitable.Warehouse, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    out = race(
        POINT,
        lambda: t.append(supplied([-(2**62), 7, 2**62]), "first"),
        lambda: t.append(supplied([5, 7, 9]), "second"),
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "[7]" in str(out["error"])
    assert ids_of(t) == [5, 7, 9]


def test_hash_like_supplied_ids_that_do_not_overlap_both_commit(
    wh: omnitable.Warehouse, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    wide = [-(2**62), -12345, 98765, 2**62]
    out = race(
        POINT,
        lambda: t.append(supplied(wide), "first"),
        lambda: t.append(supplied([0, 5, 6]), "second"),
    )
    assert "version" in out, out
    assert ids_of(t) == sorted([*wide, 0, 5, 6])
    # and a generated append racing them commits too (its range is past every supplied id)
    out = race(
        POINT,
        lambda: t.append(pa.table({"x": [1.0] * 3}), "auto"),
        lambda: t.append(supplied([11, 12]), "third"),
    )
    assert "version" in out, out
    assert len(set(ids_of(t))) == len(ids_of(t)) == 12


def test_largest_supplied_id_is_accepted_and_exhausts_generation(
    wh: omnitable.Warehouse,
) -> None:
    t = wh.create_table("t", {"x": "double"})
    t.append(supplied([2**63 - 1]), "max")
    assert ids_of(t) == [2**63 - 1]
    with pytest.raises(omnitable.ValidationError, match="exhausted"):
        t.append(pa.table({"x": [1.0]}), "auto")
    assert t.version == 1


@pytest.mark.spark
def test_spark_generated_ids_conflict_with_supplied_ids_committed_first(
    wh: omnitable.Warehouse, spark: Any, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    df = spark.range(0, 10, numPartitions=2).selectExpr("CAST(id AS DOUBLE) AS x")
    out = race(
        POINT,
        lambda: t.append(df, "spark"),
        lambda: t.append(supplied([4]), "given"),
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "[4]" in str(out["error"])
    assert ids_of(t) == [4]


@pytest.mark.spark
def test_spark_supplied_ids_are_checked_exactly_against_concurrent_commits(
    wh: omnitable.Warehouse, spark: Any, race: Race
) -> None:
    t = wh.create_table("t", {"x": "double"})
    df = spark.createDataFrame([(-(2**62), 1.0), (3, 2.0), (2**62, 3.0)], [ROW_ID, "x"])
    out = race(
        POINT,
        lambda: t.append(df, "spark"),
        lambda: t.append(pa.table({"x": [1.0] * 5}), "auto"),
    )
    assert isinstance(out.get("error"), omnitable.CommitConflict), out
    assert "1 of its" in str(out["error"]) and "[3]" in str(out["error"])
    assert ids_of(t) == [0, 1, 2, 3, 4]
    # far-apart ids do not conflict falsely
    df2 = spark.createDataFrame([(-(2**62), 1.0), (2**62, 3.0)], [ROW_ID, "x"])
    out = race(
        POINT,
        lambda: t.append(df2, "spark2"),
        lambda: t.append(supplied([100]), "given"),
    )
    assert "version" in out, out
    assert ids_of(t) == [-(2**62), 0, 1, 2, 3, 4, 100, 2**62]
