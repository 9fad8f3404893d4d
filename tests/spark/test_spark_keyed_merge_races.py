"""A keyed ``MERGE INTO`` (optimizer/KeyedMerge.scala: Python's ``Table.upsert``) racing Python's
other writers on SQLite and PostgreSQL, both ways round: the MERGE paused at
``merge.before_commit`` (spark_tables ``paused_at``) while Python commits an ``add_columns``, a
backfill of a feature of ``quality``, a delete (of the row the MERGE matched or another) or an
update (of the column the MERGE sets or another); and Python's writer paused at its
``*.before_commit`` failpoint (conftest ``race``) while the MERGE commits. The outcome is
docs/catalog.md's: an upsert checks its keys against the rows committed after its snapshot
(``keysChecked``), so the MERGE conflicts with Python's upsert message when the row of a key it
found was deleted (Python's upsert would re-plan and insert the key again; a Spark statement
cannot re-plan); a write of a cell it writes is the (fragment, column) conflict; everything else
lands beside it. Every case checks the keys stay unique and ``Table.lookup`` finds every key."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_tables import APPEND_NAME_CONF, keyed_table, paused_at

import omnitable
from omnitable import ROW_ID

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

UPSERT = (
    "WHEN MATCHED THEN UPDATE SET quality = s.quality "
    "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality)"
)
KEY_CONFLICT = "deleted or moved the rows of 1 of the keys it found"
CELL_CONFLICT = "wrote column(s) quality in 1 of the same fragment(s)"


def _values(t: omnitable.Table, *extra: str) -> dict[int, tuple[Any, ...]]:
    """x → (label, quality, text, *extra) of the live rows; x unique, every key found by lookup."""
    cols = ["label", "quality", "text", *extra]
    rows = t.read(["x", *cols]).to_pylist()
    out = {r["x"]: tuple(r[c] for c in cols) for r in rows}
    assert len(out) == len(rows)
    keys = sorted(out)
    assert [r["x"] for r in t.lookup(keys, ["x"]).to_pylist()] == keys
    return out


def _merge(spark: Any, catalog: str, t: omnitable.Table, xs: tuple[int, ...] = (2, 77)) -> Any:
    """The MERGE of x 2 (matched: quality 2.5) and 77 (new: quality 7.0), as a statement."""
    src = f"ksrc_{uuid.uuid4().hex[:8]}"
    rows = [(x, {2: 2.5, 3: 3.5, 77: 7.0}[x]) for x in xs]
    spark.createDataFrame(rows, "x bigint, quality double").createOrReplaceTempView(src)
    spark.conf.set(APPEND_NAME_CONF, "merged")
    return lambda: spark.sql(f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.x = s.x {UPSERT}")


def _merged(before: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    """``before`` after the MERGE alone."""
    return {**before, 2: ("a", 2.5, "t2", *before[2][3:]), 77: (None, 7.0, None)}


def _id(t: omnitable.Table, x: int) -> int:
    return int(t.read([ROW_ID], where=pc.field("x") == x)[ROW_ID][0].as_py())


def _update(t: omnitable.Table, x: int, column: str, value: Any) -> None:
    t.update(pa.table({ROW_ID: pa.array([_id(t, x)], pa.int64()), column: [value]}), [column])


def _add_z(t: omnitable.Table) -> None:
    """``add_columns`` z = "z<x>" for every live row, in a group of its own."""
    rows = t.read([ROW_ID, "x"]).to_pylist()
    t.add_columns(pa.table({ROW_ID: pa.array([r[ROW_ID] for r in rows], pa.int64()),
                            "z": [f"z{r['x']}" for r in rows]}), group="gz")  # fmt: skip


def _register_q2(t: omnitable.Table) -> None:
    t.register(omnitable.sql_feature("q2", "quality * 2", "double", "1"))


# -- the MERGE paused before its commit while Python commits ---------------------------------


@pytest.mark.parametrize("x", [2, 5], ids=["the_matched_row", "another_row"])
def test_a_delete_lands_while_the_merge_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, x: int
) -> None:
    """Deleting the row the MERGE matched: the MERGE conflicts with Python's upsert message
    (the key it found is no longer at the row it found; Python's upsert would re-plan and insert
    it again), nothing of it lands. Another row: both land."""
    t = keyed_table(wh)
    before = _values(t)
    with paused_at(spark, "merge.before_commit", tmp_path, _merge(spark, catalog, t)) as out:
        assert wh.table(t.name).delete(pc.field("x") == x).rows == 1
    fresh = wh.table(t.name)
    rest = {k: v for k, v in before.items() if k != x}
    if x == 2:
        assert "Cannot commit upsert into table" in str(out.get("error")), out
        assert KEY_CONFLICT in str(out["error"])
        assert _values(fresh) == rest and fresh.history(1)[0].op == "delete"
    else:
        assert "error" not in out, out
        assert _values(fresh) == {k: v for k, v in _merged(before).items() if k != x}
        assert [h.op for h in fresh.history(2)] == ["upsert", "delete"]


def test_a_keyed_merge_matching_every_key_checks_its_keys_too(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Every source key matched (nothing inserted): still op ``upsert`` (``inserted`` 0, as
    ``Table.upsert``), and a delete of a matched row meanwhile is the same conflict."""
    t = keyed_table(wh)
    before = _values(t)
    _merge(spark, catalog, t, (3,))()
    head = wh.table(t.name).history(1)[0]
    assert head.op == "upsert" and (head.summary["inserted"], head.summary["merged"]) == (0, 1)
    assert _values(wh.table(t.name)) == {**before, 3: ("a", 3.5, "t3")}
    statement = _merge(spark, catalog, t, (2,))
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        assert wh.table(t.name).delete(pc.field("x") == 2).rows == 1
    assert KEY_CONFLICT in str(out.get("error")), out
    rest = {k: v for k, v in before.items() if k != 2}
    assert _values(wh.table(t.name)) == {**rest, 3: ("a", 3.5, "t3")}


@pytest.mark.parametrize("column", ["quality", "text"])
def test_an_update_lands_while_the_merge_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, column: str
) -> None:
    """An update of the column the MERGE sets (another row of the same fragment): the
    (fragment, column) conflict, nothing of the MERGE lands. Of another column of the matched
    row: both land."""
    t = keyed_table(wh)
    before = _values(t)
    value = -1.0 if column == "quality" else "new"
    x = 3 if column == "quality" else 2
    with paused_at(spark, "merge.before_commit", tmp_path, _merge(spark, catalog, t)) as out:
        _update(wh.table(t.name), x, column, value)
    got = _values(wh.table(t.name))
    if column == "quality":
        assert CELL_CONFLICT in str(out.get("error")), out
        assert got == {**before, 3: ("a", -1.0, "t3")}
    else:
        assert "error" not in out, out
        assert got == {**_merged(before), 2: ("a", 2.5, "new")}


def test_add_columns_lands_while_the_merge_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Both land; the inserted key reads NULL in the new column (``add_columns`` gave values for
    the rows it saw)."""
    t = keyed_table(wh)
    before = _values(t)
    with paused_at(spark, "merge.before_commit", tmp_path, _merge(spark, catalog, t)) as out:
        _add_z(wh.table(t.name))
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["upsert", "add_columns"]
    want = {x: (*v, f"z{x}") for x, v in _merged(before).items() if x != 77}
    assert _values(fresh, "z") == {**want, 77: (None, 7.0, None, None)}


def test_a_backfill_lands_while_the_merge_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Both land: the backfill computed q2 from the quality it read (row 2: 4.0), the MERGE then
    rewrote quality in that fragment, so b1 is ``stale`` for q2 and the inserted batch
    ``missing``."""
    t = keyed_table(wh)
    _register_q2(t)
    before = _values(t)
    with paused_at(spark, "merge.before_commit", tmp_path, _merge(spark, catalog, t)) as out:
        wh.table(t.name).backfill(["q2"]).run(spark)
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["upsert", "backfill"]
    assert _values(fresh) == _merged(before)
    q2 = {r["x"]: r["q2"] for r in fresh.read(["x", "q2"]).to_pylist()}
    assert q2[2] == 4.0 and q2[5] == 10.0 and q2[77] is None
    grid = fresh.status()
    assert (grid.state("b1", "q2"), grid.state("merged", "q2")) == ("stale", "missing")


# -- Python's writer paused before its commit while the MERGE commits ------------------------


@pytest.mark.parametrize("x", [2, 5], ids=["the_matched_row", "another_row"])
def test_a_merge_lands_while_a_delete_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any, x: int
) -> None:
    """Both land, as if the MERGE came first: the deleted row stays deleted (the matched one
    with the value the MERGE gave it behind the vector), the new key is found."""
    t = keyed_table(wh)
    before = _values(t)
    result = race(
        "delete.before_commit",
        lambda: wh.table(t.name).delete(pc.field("x") == x),
        _merge(spark, catalog, t),
    )
    assert "error" not in result, result
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["delete", "upsert"]
    assert _values(fresh) == {k: v for k, v in _merged(before).items() if k != x}


@pytest.mark.parametrize("column", ["quality", "text"])
def test_a_merge_lands_while_an_update_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any, column: str
) -> None:
    """Python's update of the column the MERGE set (same fragment) conflicts with commit.py's
    (fragment, column) message; of another column it lands after the MERGE."""
    t = keyed_table(wh)
    before = _values(t)
    value = -1.0 if column == "quality" else "new"
    result = race(
        "update.before_commit",
        lambda: _update(wh.table(t.name), 3 if column == "quality" else 2, column, value),
        _merge(spark, catalog, t),
    )
    got = _values(wh.table(t.name))
    if column == "quality":
        assert CELL_CONFLICT in str(result.get("error")), result
        assert got == _merged(before)
    else:
        assert "error" not in result, result
        assert got == {**_merged(before), 2: ("a", 2.5, "new")}


def test_a_merge_lands_while_add_columns_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = keyed_table(wh)
    before = _values(t)
    result = race("add_columns.before_commit", lambda: _add_z(wh.table(t.name)),
                  _merge(spark, catalog, t))  # fmt: skip
    assert "error" not in result, result
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["add_columns", "upsert"]
    want = {x: (*v, f"z{x}") for x, v in _merged(before).items() if x != 77}
    assert _values(fresh, "z") == {**want, 77: (None, 7.0, None, None)}


def test_a_merge_lands_while_a_backfill_waits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    """The backfill read quality before the MERGE rewrote it in that fragment: its commit
    conflicts on its read set, nothing of it lands (q2 stays ``missing``)."""
    t = keyed_table(wh)
    _register_q2(t)
    before = _values(t)
    result = race("backfill.before_commit",
                  lambda: wh.table(t.name).backfill(["q2"]).run(spark),
                  _merge(spark, catalog, t))  # fmt: skip
    assert "its input column(s) quality were recomputed" in str(result.get("error")), result
    fresh = wh.table(t.name)
    assert fresh.history(1)[0].op == "upsert" and _values(fresh) == _merged(before)
    assert fresh.status().state("b1", "q2") == "missing"
