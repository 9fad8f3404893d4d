"""Every data operation on a branch (docs/branches.md), on SQLite and PostgreSQL (``wh``): the
branch reads what a plain Python model of it says, main reads exactly what it read before, and
main's later commits never show on the branch. Rows the branch inherits are removed through
``removals`` (at two levels for a branch of a branch); time travel stays within the branch."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import APPEND_NAME, ROW_ID
from omnitable.exceptions import NotFoundError

from .common import Row, base_table, batch, content, ids_where, model_content, new_rows, rows


@dataclass
class Forked:
    """Main with two batches, branch ``exp`` forked at main's head, and main's rows then."""

    t: omnitable.Table
    b: omnitable.Table
    main_before: list[Row]

    def model(self) -> list[Row]:
        return [dict(r) for r in self.main_before]

    def check(self, want: list[Row], *, by_id: bool = True) -> None:
        """The branch reads ``want``, main reads what it read before the fork, and a later
        commit on main shows on main only."""
        if by_id:
            assert rows(self.b) == want
        else:
            assert content(self.b) == model_content(want)
        assert rows(self.t) == self.main_before
        self.t.append(batch("later", [900, 901]), "later")
        assert "later" not in {r[APPEND_NAME] for r in rows(self.b)}
        assert "later" not in {x.name for x in self.b.batches()}
        assert [r["x"] for r in rows(self.t) if r[APPEND_NAME] == "later"] == [900, 901]
        if by_id:
            assert rows(self.b) == want
        else:
            assert content(self.b) == model_content(want)


@pytest.fixture
def forked(wh: omnitable.Warehouse) -> Forked:
    t = base_table(wh)
    before = rows(t)
    return Forked(t, t.create_branch("exp"), before)


def test_append(forked: Forked) -> None:
    forked.b.append(batch("nb", [100, 101, 102]), "nb")
    want = forked.model() + new_rows("nb", [100, 101, 102])
    forked.check(want, by_id=False)
    ids = [r[ROW_ID] for r in rows(forked.b)]
    assert len(set(ids)) == len(ids)


def test_add_columns(forked: Forked) -> None:
    ids = [r[ROW_ID] for r in forked.main_before][::2]
    forked.b.add_columns(
        pa.table({ROW_ID: pa.array(ids, pa.int64()), "note": [f"n{i}" for i in ids]})
    )
    want = [{**r, "note": f"n{r[ROW_ID]}" if r[ROW_ID] in ids else None} for r in forked.model()]
    forked.check(want)
    assert "note" in forked.b.schema.names and "note" not in forked.t.schema.names


def test_delete_by_filter_and_by_ids(forked: Forked) -> None:
    res = forked.b.delete(pc.field("x").isin([0, 3, 12, 13]))
    assert res.rows == 4
    want = [r for r in forked.model() if r["x"] not in (0, 3, 12, 13)]
    gone = ids_where(want, lambda r: r["x"] in (1, 11))
    forked.b.delete(ids=gone)
    want = [r for r in want if r[ROW_ID] not in gone]
    assert forked.b.count() == len(want) and forked.t.count() == len(forked.main_before)
    forked.check(want)


def test_update(forked: Forked) -> None:
    pick = ids_where(forked.main_before, lambda r: r["x"] in (1, 4, 12))
    forked.b.update(pa.table({ROW_ID: pa.array(pick, pa.int64()), "s": ["u1", "u4", "u12"]}))
    by_x = {1: "u1", 4: "u4", 12: "u12"}
    want = [{**r, "s": by_x.get(r["x"], r["s"])} for r in forked.model()]
    forked.check(want)


def test_rename_retire_restore(forked: Forked) -> None:
    forked.b.rename_column("x", "y")
    renamed = [{ROW_ID: r[ROW_ID], APPEND_NAME: r[APPEND_NAME], "y": r["x"], "s": r["s"]}
               for r in forked.model()]  # fmt: skip
    assert rows(forked.b) == renamed
    forked.b.retire("s")
    assert rows(forked.b) == [{k: v for k, v in r.items() if k != "s"} for r in renamed]
    assert forked.b.retired() == ["s"] and forked.t.retired() == []
    assert rows(forked.t) == forked.main_before
    forked.b.restore("s")
    forked.check(renamed)
    assert forked.t.schema.names[-2:] == ["x", "s"]


def test_rollback(forked: Forked) -> None:
    fork = forked.b.version
    forked.b.delete(ids=ids_where(forked.main_before, lambda r: r["x"] < 3))
    forked.b.append(batch("nb", [100]), "nb")
    forked.b.rollback(fork)
    assert rows(forked.b) == forked.main_before
    first = forked.t.history()[-2].version  # main's append of b1, before the fork
    assert [h.op for h in forked.t.history()][-2:] == ["append", "create"]
    forked.b.rollback(first)  # undoes b2, which the branch inherits from main
    forked.check([r for r in forked.model() if r[APPEND_NAME] == "b1"])


def test_revert(forked: Forked) -> None:
    deleted = forked.b.delete(ids=ids_where(forked.main_before, lambda r: r["x"] in (2, 4)))
    assert deleted.version is not None
    b2 = next(h.version for h in forked.t.history() if h.op == "append" and "b2" in h.summary_json)
    forked.b.revert(b2)  # a commit main made before the fork
    assert rows(forked.b) == [r for r in forked.model() if r["x"] in (0, 1, 3, 5)]
    forked.b.revert(
        deleted.version
    )  # the branch's own delete: rows 2 and 4 come back (b2 stays out)
    forked.check([r for r in forked.model() if r[APPEND_NAME] == "b1"])


def test_upsert_and_lookup(wh: omnitable.Warehouse) -> None:
    t = wh.create_table("k", {"url": "string", "n": "bigint"}, key="url")
    t.upsert(pa.table({"url": [f"u{i}" for i in range(5)], "n": pa.array(range(5), pa.int64())}))
    before = rows(t)
    b = t.create_branch("exp")
    b.upsert(pa.table({"url": ["u1", "u7"], "n": pa.array([100, 107], pa.int64())}))
    want = {f"u{i}": i for i in range(5)} | {"u1": 100, "u7": 107}
    assert {r["url"]: r["n"] for r in rows(b)} == want
    assert b.lookup(["u1", "u7", "u3"], ["url", "n"]).to_pylist() == [
        {"url": "u1", "n": 100}, {"url": "u7", "n": 107}, {"url": "u3", "n": 3},
    ]  # fmt: skip
    assert t.lookup(["u1", "u7"], ["url", "n"]).to_pylist() == [{"url": "u1", "n": 1}]
    assert rows(t) == before
    t.upsert(pa.table({"url": ["u2", "u8"], "n": pa.array([200, 208], pa.int64())}))
    assert {r["url"]: r["n"] for r in rows(b)} == want
    assert b.lookup(["u2", "u8"], ["url", "n"]).to_pylist() == [{"url": "u2", "n": 2}]
    assert t.lookup(["u1", "u2", "u8"], ["n"]).column("n").to_pylist() == [1, 200, 208]


def test_branch_of_a_branch_removes_rows_at_two_levels(forked: Forked) -> None:
    """``c`` forks from ``exp`` after ``exp``'s own commits; it deletes and updates rows main
    owns and rows ``exp`` owns, and neither ancestor sees it."""
    t, b = forked.t, forked.b
    b.append(batch("nb", [100, 101, 102]), "nb")
    b.delete(ids=ids_where(forked.main_before, lambda r: r["x"] == 0))
    exp_before = rows(b)
    c = t.create_branch("c", from_branch="exp")
    grand = ids_where(exp_before, lambda r: r["x"] in (1, 12))  # main's rows
    parent = ids_where(exp_before, lambda r: r["x"] == 101)  # exp's row
    c.delete(ids=grand + parent)
    upd = ids_where(exp_before, lambda r: r["x"] in (5, 100))
    c.update(pa.table({ROW_ID: pa.array(upd, pa.int64()), "s": ["c5", "c100"]}))
    gone = set(grand + parent)
    want = [{**r, "s": {5: "c5", 100: "c100"}.get(r["x"], r["s"])}
            for r in exp_before if r[ROW_ID] not in gone]  # fmt: skip
    assert rows(c) == want
    assert rows(b) == exp_before
    c.rename_column("s", "label")
    assert [r["label"] for r in rows(c)] == [r["s"] for r in want]
    assert rows(b) == exp_before
    forked.check(exp_before)  # main as before; main's later commit shows on neither branch
    assert "later" not in {r[APPEND_NAME] for r in rows(c)}


def test_time_travel_on_a_branch(forked: Forked) -> None:
    t, b = forked.t, forked.b
    fork = b.version
    v1 = b.delete(ids=ids_where(forked.main_before, lambda r: r["x"] == 3)).version
    after_delete = rows(b)
    main_v = t.append(batch("m", [500]), "m")
    v2 = b.update(
        pa.table({ROW_ID: pa.array([after_delete[0][ROW_ID]], pa.int64()), "s": ["z"]})
    ).version
    assert v1 is not None and v2 is not None and v1 < main_v < v2
    assert rows(b, version=fork) == forked.main_before
    assert rows(b, version=v1) == after_delete
    assert rows(b, version=v2)[0]["s"] == "z"
    with pytest.raises(NotFoundError):
        b.read(version=main_v)  # main's commit after the fork: not in the branch's history
    # an unbound reader reads a version wherever it was committed
    assert rows(t, version=v1) == after_delete
    assert rows(t, branch="exp") == rows(b) and rows(b, branch="main") == rows(t)
    assert [h.version for h in b.history()] == [v2, v1, *[h.version for h in t.history()][1:]]
