"""``CALL <catalog>.system.merge_branch`` / ``rebase_branch`` three-way merges in the JVM against
Python's ``Table.merge`` / ``Table.rebase`` (docs/branches.md, "Merging"), on SQLite and
PostgreSQL (``wh``) with the shared local session: each scenario builds the same branches on two
twin tables with Python, merges one with Python and the other with the CALL, and compares the
results, the merge commits' summaries and the resulting snapshots (fragments, files with their
columns, deletion vectors, columns, features, rows) with data and file paths named by where they
first appeared; conflicts fail with Python's message; a Python commit on the target or the
source while the JVM merge is paused before its commit makes it plan again; a JVM merge killed
in its commit leaves nothing visible; a keyed table's merge checks the keys both branches inserted
as Python does. One
warehouse per backend for the module (``shared_warehouse``), tables of their own names for each
test (``unique``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import MergeConflict
from omnitable.spark.session import CATALOG_CLASS, warehouse_string

from .merge_helpers import delete_x, ids_of, make_table, new_rows, set_col

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

Build = Callable[[omnitable.Table], None]  # the steps after make_table: branch 'a' and main


def unique(prefix: str) -> str:
    """A table name of the test's own in the module's warehouse."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A fresh Spark catalog name for ``wh`` (the plugin caches its warehouse per name)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse_string(wh))
    return name


class Tokens:
    """Names data and file paths by where they first appeared in a table's catalog (batch name,
    seq, version, group), so twin tables built by the same steps compare equal."""

    def __init__(self, wh: omnitable.Warehouse, t: omnitable.Table) -> None:
        self.names: dict[str, str] = {}
        tid = t._ctx.record.table_id
        with wh.catalog.store.engine.connect() as conn:
            frags = conn.execute(
                text(
                    "SELECT f.fragment_id, f.path, b.name, f.seq, f.added_version FROM fragments f "
                    "JOIN batches b ON b.table_id = f.table_id AND b.batch_id = f.batch_id "
                    "WHERE f.table_id = :t ORDER BY f.added_version, b.name, f.seq"
                ),
                {"t": tid},
            ).all()
            by_id = {}
            for fid, path, name, seq, v in frags:
                self.names.setdefault(path, f"{name}#{seq}@{v}")
                by_id[fid] = self.names[path]
            self.files: dict[str, str] = {}  # file id -> its path's token
            for file_id, path, fid, group, v in conn.execute(
                text(
                    "SELECT file_id, path, fragment_id, group_name, added_version FROM files "
                    "WHERE table_id = :t ORDER BY added_version"
                ),
                {"t": tid},
            ).all():
                self.names.setdefault(path, f"{by_id[fid]}/{group}@{v}")
                self.files[file_id] = self.names[path]
            self.lineage = conn.execute(
                text(
                    "SELECT file_id, column_id, feature, feature_version, inputs, engine, "
                    "error_count FROM lineage WHERE table_id = :t"
                ),
                {"t": tid},
            ).all()

    def lineage_of(self, file_ids: set[str]) -> list[tuple[Any, ...]]:
        """The lineage rows of these files, file ids as their paths' tokens."""
        out = []
        for fid, cid, feat, fv, inputs, engine, errors in self.lineage:
            if fid in file_ids:
                ins = sorted(
                    json.dumps({**i, "file_id": self.files.get(i.get("file_id"), "?")},
                               sort_keys=True)
                    for i in json.loads(inputs)
                )  # fmt: skip
                out.append((self.files[fid], cid, feat, fv, ins, engine, errors))
        return sorted(out)

    def __call__(self, value: str | None) -> str | None:
        return None if value is None else self.names.get(value, value)


def snapshot_state(wh: omnitable.Warehouse, t: omnitable.Table, branch: str) -> dict[str, Any]:
    """The catalog state and rows of ``branch``'s head, paths as tokens."""
    tok = Tokens(wh, t)
    snap = t.snapshot(branch=branch)
    record = t._ctx.record
    cols = wh.catalog.columns_at(record, branch, snap.version)
    names = {c.column_id: c.name for c in cols}
    frags = []
    for f in snap.fragments:
        dv = snap.deletion(f.fragment_id)
        files = sorted(
            (tok(fi.path), fi.group_name, fi.row_count, tuple(sorted(names[c] for c in fi.columns)),
             tuple(sorted((names[c], m.feature_version or "") for c, m in fi.columns.items())))
            for fi in snap.files_by_fragment.get(f.fragment_id, ())
        )  # fmt: skip
        frags.append((tok(f.path), f.batch_name, f.seq, f.row_count,
                      None if dv is None else dv.vector, files))  # fmt: skip
    data = t.branch(branch).read().sort_by(ROW_ID).to_pylist()
    return {
        "version": snap.version,
        "fragments": frags,
        "batches": [b.name for b in snap.batches],
        "columns": [(c.column_id, c.name, c.state, c.data_type, c.group_name) for c in cols],
        "features": [
            (r["name"], r["version"]) for r in wh.catalog.feature_rows(record, None, branch)
        ],
        "rows": data,
        "lineage": tok.lineage_of(
            {fi.file_id for files in snap.files_by_fragment.values() for fi in files}
        ),
    }


def merge_commit(t: omnitable.Table, branch: str) -> tuple[str, dict[str, Any]]:
    head = t.branch(branch).history(limit=1)[0]
    return head.op, head.summary


def result_of(t: omnitable.Table, wh: omnitable.Warehouse, r: Any) -> dict[str, Any]:
    """Python's MergeResult as the CALL's row, paths as tokens."""
    tok = Tokens(wh, t)
    return {
        "version": r.version, "fast_forward": r.fast_forward, "base_version": r.base_version,
        "source_version": r.source_version, "cells": r.cells, "batches": r.batches,
        "deletes": r.deletes, "columns": r.columns, "features": r.features,
        "resolved": sorted((c.kind, tok(c.where), c.column, tok(c.source), tok(c.target))
                           for c in r.resolved),
    }  # fmt: skip


def call_result(t: omnitable.Table, wh: omnitable.Warehouse, row: dict[str, Any]) -> dict[str, Any]:
    tok = Tokens(wh, t)
    out = dict(row)
    out["resolved"] = sorted(
        (c["kind"], tok(c["where"]), c["column"], tok(c["source"]), tok(c["target"]))
        for c in row["resolved"]
    )
    return out


def make_keyed(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    """A keyed table (``key`` string, ``v`` bigint) of keys k1, k2 (batch ``u0``)."""
    k = wh.create_table(name, {"key": "string", "v": "bigint"}, key="key")
    k.upsert(pa.table({"key": ["k1", "k2"], "v": [1, 2]}), append_name="u0")
    return k


def twins(
    wh: omnitable.Warehouse, build: Build, make: Callable[..., omnitable.Table] = make_table
) -> tuple[omnitable.Table, omnitable.Table]:
    py, jv = make(wh, unique("py")), make(wh, unique("jv"))
    for t in (py, jv):
        build(t)
    return py, jv


def check_same(
    spark: Any,
    wh: omnitable.Warehouse,
    build: Build,
    strategy: str = "fail",
    rebase: bool = False,
    make: Callable[..., omnitable.Table] = make_table,
) -> dict[str, Any]:
    """Merge ``a`` into main (``rebase``: main into ``a``) on both twins (made by ``make``);
    assert every outcome equal; returns the CALL's row."""
    return merged_twins(spark, wh, build, strategy, rebase, make)[0]


def merged_twins(
    spark: Any,
    wh: omnitable.Warehouse,
    build: Build,
    strategy: str = "fail",
    rebase: bool = False,
    make: Callable[..., omnitable.Table] = make_table,
) -> tuple[dict[str, Any], omnitable.Table]:
    """``check_same``, returning the CALL's row and the table the CALL merged."""
    py, jv = twins(wh, build, make)
    c = catalog(spark, wh)
    target = "a" if rebase else "main"
    if rebase:
        expected = py.rebase("a", strategy=strategy)
        sql = f"CALL {c}.system.rebase_branch('{jv.name}', 'a', strategy => '{strategy}')"
    else:
        expected = py.merge("a", strategy=strategy)
        sql = f"CALL {c}.system.merge_branch('{jv.name}', 'a', strategy => '{strategy}')"
    (row,) = [r.asDict(recursive=True) for r in spark.sql(sql).collect()]
    assert call_result(jv, wh, row) == result_of(py, wh, expected)
    assert merge_commit(jv, target) == merge_commit(py, target)
    for branch in ("main", "a"):
        assert snapshot_state(wh, jv, branch) == snapshot_state(wh, py, branch), branch
    return row, jv


def _cells(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1", 6: "A6", 10: "A10"})
    set_col(t, "y", {2: 2.5, 7: 7.5, 11: 11.5})


def _batches(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    a.append(new_rows([30], "a"), "from_a")
    set_col(t, "s", {10: "M10"})
    t.append(new_rows([40], "m"), "from_main")


def _deletes(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    delete_x(a, 1, 2)
    delete_x(t, 3)
    delete_x(t, 1)


def _columns(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.rename_column("s", "label")
    ids = ids_of(a)
    a.add_columns(pa.table({ROW_ID: [ids[3], ids[8]], "z": [3, 8]}))
    set_col(a, "label", {4: "A4"})
    set_col(t, "y", {4: 44.0})


def _replaced_batch(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.append(new_rows([20, 21], "r"), "b2", mode="replace")
    delete_x(a, 5)
    set_col(t, "y", {0: 0.5})


def _cell_conflict(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    set_col(a, "s", {1: "A1"})
    set_col(t, "s", {2: "M2"})
    set_col(t, "y", {7: 7.7})


def _batch_conflict(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    a.append(new_rows([20], "r"), "b2", mode="replace")
    set_col(t, "s", {10: "M10"})


def _feature_conflict(t: omnitable.Table) -> None:
    t.register(omnitable.sql_feature("s_len", "length(s)", "int", "1"))
    a = t.create_branch("a")
    a.register(omnitable.sql_feature("s_len", "length(s) + 1", "int", "2"))
    t.register(omnitable.sql_feature("s_len", "length(s) + 2", "int", "3"))
    a.register(omnitable.sql_feature("y2", "y * 2", "double", "1"))  # only on a: merged


def _rows_conflict(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    delete_x(a, 1, 3)
    set_col(a, "y", {8: 8.8})  # updated on a, deleted on main
    set_col(t, "s", {1: "M1", 3: "r3"})  # 1 updated (a conflict), 3 rewritten with its value
    delete_x(t, 8)


def _rows_rewritten(t: omnitable.Table) -> None:
    a = t.create_branch("a")
    delete_x(a, 2)
    set_col(t, "s", {2: "r2", 4: "M4"})  # 2 rewritten with the same value: no conflict


CONFLICTS = {"cell": _cell_conflict, "batch": _batch_conflict, "feature": _feature_conflict,
             "rows": _rows_conflict}  # fmt: skip

CLEAN = {"cells": _cells, "batches": _batches, "deletes": _deletes, "columns": _columns,
         "replaced_batch": _replaced_batch, "rows_rewritten": _rows_rewritten}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_clean_merge_by_call_equals_python(spark: Any, wh: omnitable.Warehouse, name: str) -> None:
    row = check_same(spark, wh, CLEAN[name])
    assert row["version"] is not None and not row["fast_forward"] and row["resolved"] == []


@pytest.mark.parametrize("strategy", ["ours", "theirs"])
@pytest.mark.parametrize("name", sorted(CONFLICTS))
def test_resolved_conflicts_equal_python(
    spark: Any, wh: omnitable.Warehouse, name: str, strategy: str
) -> None:
    row = check_same(spark, wh, CONFLICTS[name], strategy)
    assert {c["kind"] for c in row["resolved"]} == {name}
    assert len(row["resolved"]) == (2 if name == "rows" else 1)


def test_a_feature_back_filled_on_the_source_merges_with_its_lineage(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    def build(t: omnitable.Table) -> None:
        a = t.create_branch("a")
        a.register(omnitable.sql_feature("s_up", "upper(s)", "string", "1"))
        a.backfill(["s_up"]).run(spark)
        set_col(t, "s", {11: "m11"})  # main moved (b2 only): a three-way merge

    row = check_same(spark, wh, build)
    assert row["features"] == 1 and row["columns"] == 1 and row["cells"] > 0


def test_rebase_by_call_equals_python(spark: Any, wh: omnitable.Warehouse) -> None:
    row = check_same(spark, wh, _cells, rebase=True)
    assert row["cells"] == 3


@pytest.mark.parametrize("name", ["cell", "batch", "rows"])
def test_conflicts_fail_with_pythons_message(
    spark: Any, wh: omnitable.Warehouse, name: str
) -> None:
    py, jv = twins(wh, CONFLICTS[name])
    with pytest.raises(MergeConflict) as expected:
        py.merge("a")
    before = (jv.version, jv.history(limit=1)[0])
    c = catalog(spark, wh)
    with pytest.raises(Exception) as err:
        spark.sql(f"CALL {c}.system.merge_branch('{jv.name}', 'a')").collect()
    got = str(err.value)
    assert "OMNITABLE_MERGE_CONFLICT" in got
    message = str(expected.value)
    py_tok, jv_tok = Tokens(wh, py), Tokens(wh, jv)
    for path, token in sorted(py_tok.names.items(), key=lambda x: -len(x[0])):
        message = message.replace(path, token)
    for path, token in sorted(jv_tok.names.items(), key=lambda x: -len(x[0])):
        got = got.replace(path, token)
    assert _parts(message) == _parts(got[got.index("Cannot merge branch") :])
    assert (jv.version, jv.history(limit=1)[0]) == before


def _parts(message: str) -> tuple[str, set[str], str]:
    """A MergeConflict message as (head, the conflicts listed, tail): Python lists the conflicts
    of different fragments in no fixed order."""
    head, rest = message.split("conflict(s): ", 1)
    listed, tail = rest.split("; nothing was committed.", 1)
    return head, set(listed.split("; ")), tail.split("(see MergeConflict.details)")[0]


def _upsert(t: omnitable.Table, batch: str, **kv: int) -> None:
    t.upsert(pa.table({"key": list(kv), "v": list(kv.values())}), append_name=batch)


def _keyed_clean(k: omnitable.Table) -> None:
    a = k.create_branch("a")
    _upsert(a, "ua", k1=11, a_only=12)  # k1 updated in place, a_only inserted
    _upsert(k, "um", m_only=21)


def _keyed_both(k: omnitable.Table) -> None:
    a = k.create_branch("a")
    _upsert(a, "ua", new=10, k1=11, a_only=12)
    _upsert(k, "um", new=20, m_only=21)  # "new" inserted on both: a key conflict


def _keyed_both_deleted(k: omnitable.Table) -> None:
    """The rows ``ours`` leaves out add to the rows the source deleted in the copied batch."""
    a = k.create_branch("a")
    _upsert(a, "ua", p=10, q=11, r=12)
    a.delete(ids=[r[ROW_ID] for r in a.lookup(["p"], [ROW_ID]).to_pylist()])
    _upsert(k, "um", q=20, p=21)  # only q conflicts: p is deleted on a


def _keyed_rows(k: omnitable.Table) -> None:
    a = k.create_branch("a")
    a.delete(ids=[r[ROW_ID] for r in a.lookup(["k1"], [ROW_ID]).to_pylist()])
    _upsert(k, "um", k1=5)  # updated on main, deleted on a: a rows conflict


def _by_key(k: omnitable.Table) -> dict[str, int]:
    return {r["key"]: r["v"] for r in k.read(["key", "v"]).to_pylist()}


@pytest.mark.parametrize(
    ("name", "strategy"),
    [("clean", "fail"), ("both", "ours"), ("both_deleted", "ours"), ("rows", "theirs")],
)
def test_a_keyed_merge_by_call_equals_python(
    spark: Any, wh: omnitable.Warehouse, name: str, strategy: str
) -> None:
    """A keyed table's three-way merge in the JVM: the keys both branches inserted are probed in
    the key index as Python probes them; ``ours`` leaves the source's rows of those keys out."""
    build = {"clean": _keyed_clean, "both": _keyed_both, "both_deleted": _keyed_both_deleted,
             "rows": _keyed_rows}[name]  # fmt: skip
    row, jv = merged_twins(spark, wh, build, strategy, make=make_keyed)
    kinds = {"clean": [], "both": ["key"], "both_deleted": ["key"], "rows": ["rows"]}[name]
    assert [c["kind"] for c in row["resolved"]] == kinds
    if name == "both":
        assert [(c["where"], c["source"]) for c in row["resolved"]] == [("ua", "1 key(s) inserted")]
    keys = _by_key(jv)
    assert jv.count() == len(keys)  # keys unique among live rows
    assert jv.lookup(sorted(keys)).column("v").to_pylist() == [keys[k] for k in sorted(keys)]


def test_a_keyed_rebase_by_call_equals_python(spark: Any, wh: omnitable.Warehouse) -> None:
    """``rebase_branch`` of a keyed table: main's batch holding a key the branch inserted too keeps
    the branch's row with ``ours``."""
    row = check_same(spark, wh, _keyed_both, "ours", rebase=True, make=make_keyed)
    assert [(c["kind"], c["where"]) for c in row["resolved"]] == [("key", "um")]


def test_a_keyed_key_conflict_fails_or_is_refused_as_in_python(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """``fail`` and ``theirs`` on keys inserted on both branches commit nothing, with Python's
    messages (the batch and how many of its keys)."""
    py, jv = twins(wh, _keyed_both, make_keyed)
    c = catalog(spark, wh)
    before = (jv.version, len(jv.history()), _by_key(jv))
    for strategy, error, kind in (
        ("fail", MergeConflict, "OMNITABLE_MERGE_CONFLICT"),
        ("theirs", omnitable.ValidationError, "OMNITABLE_INVALID_OPERATION"),
    ):
        with pytest.raises(error) as expected:
            py.merge("a", strategy=strategy)
        with pytest.raises(Exception) as err:
            spark.sql(
                f"CALL {c}.system.merge_branch('{jv.name}', 'a', strategy => '{strategy}')"
            ).collect()
        assert kind in str(err.value) and str(expected.value) in str(err.value)
        assert (jv.version, len(jv.history()), _by_key(jv)) == before
        if strategy == "fail":
            assert "1 conflict(s): key ua (source: 1 key(s) inserted, target: inserted too)" in str(
                err.value
            )


MOVES = {
    "target": lambda t: set_col(t, "y", {0: 0.25}),
    "source": lambda t: set_col(t.branch("a"), "s", {8: "A8"}),
    "target_same_cell": lambda t: set_col(t, "s", {1: "M1"}),  # the cell 'a' changed
}


@pytest.mark.parametrize("moved", sorted(MOVES))
def test_a_python_commit_during_the_call_makes_it_plan_again(
    spark: Any, wh: omnitable.Warehouse, tmp_path: Path, pause_call: Any, moved: str
) -> None:
    """The CALL paused before its commit; a Python commit lands on the target or the source;
    the CALL's commit conflicts and it plans again: the result is Python's merge of the new
    heads (a conflict when the target's commit changed a cell the source changed too)."""
    py, jv = twins(wh, _cells)
    MOVES[moved](py)
    try:
        expected: Any = py.merge("a")
    except MergeConflict as exc:
        expected = exc
    c = catalog(spark, wh)
    try:
        thread, out = pause_call(
            spark,
            f"CALL {c}.system.merge_branch('{jv.name}', 'a')",
            "merge.before_commit",
        )
        MOVES[moved](jv)
        (tmp_path / "merge.before_commit.go").touch()
        thread.join(120)
    finally:
        spark.conf.unset("spark.omnitable.test.failpoint")
    if isinstance(expected, MergeConflict):
        assert "OMNITABLE_MERGE_CONFLICT" in out.get("error", ""), out
        assert "1 conflict(s): cell " in out["error"] and " column s " in out["error"]
        assert jv.history(limit=1)[0].op == "update"
        return
    assert "error" not in out, out
    assert call_result(jv, wh, out["row"]) == result_of(py, wh, expected)
    assert merge_commit(jv, "main") == merge_commit(py, "main")
    assert snapshot_state(wh, jv, "main") == snapshot_state(wh, py, "main")


@pytest.mark.parametrize("point", ["commit.mid_insert", "commit.before_end"])
def test_a_call_killed_in_its_commit_leaves_nothing_visible(
    spark: Any, wh: omnitable.Warehouse, point: str
) -> None:
    t = make_table(wh, unique("jv"))
    _batches(t)
    before = (snapshot_state(wh, t, "main"), len(t.history()))
    c = catalog(spark, wh)
    spark.conf.set("spark.omnitable.test.failpoint", f"{point}=raise")
    try:
        with pytest.raises(Exception) as err:
            spark.sql(f"CALL {c}.system.merge_branch('{t.name}', 'a')").collect()
    finally:
        spark.conf.unset("spark.omnitable.test.failpoint")
    assert point in str(err.value)
    assert (snapshot_state(wh, t, "main"), len(t.history())) == before
    row = spark.sql(f"CALL {c}.system.merge_branch('{t.name}', 'a')").collect()[0]
    assert row["version"] == t.version and row["batches"] == 1
