"""The JVM's commit paths racing Python's ``Table.add_columns`` (commit.py is the reference), on
SQLite and PostgreSQL: each JVM statement paused at its ``*.before_commit`` failpoint
(spark_tables ``paused_at``) while ``add_columns`` commits, and the reverse (Python's
``add_columns`` paused at ``add_columns.before_commit`` while the JVM commits), for a mixed MERGE
(update + insert), an insert-only MERGE, a metadata-only DELETE, ``register_feature``,
``backfill`` and the three-way ``merge_branch``. A new column in a group of its own never
conflicts with them (Python's racing-writer matrix: ``("update" | "append" | "delete" |
"register" | "backfill", "add_columns")`` all land): both commits land and the snapshot reads
both. A feature whose output name ``add_columns`` took meanwhile conflicts either way round
("column 'f' was added by a concurrent commit"); a branch that added the column ``add_columns``
adds on the target makes the merge refuse as Python's ``Table.merge`` does."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from spark_tables import APPEND_NAME_CONF, dml_table, paused_at

import omnitable
from omnitable import ROW_ID
from omnitable.exceptions import MergeConflict

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

UPSERT = (
    "WHEN MATCHED THEN UPDATE SET quality = s.quality "
    "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality)"
)


def _add(t: omnitable.Table, column: str = "z") -> dict[int, str]:
    """``add_columns``: every live row gets ``column`` = "n<its id>", in a group of its own;
    returns id → value."""
    ids = t.read([ROW_ID]).column(ROW_ID).to_pylist()
    values = {i: f"n{i}" for i in ids}
    t.add_columns(pa.table({ROW_ID: pa.array(ids, pa.int64()), column: list(values.values())}),
                  group=f"g_{column}")  # fmt: skip
    return values


def _by_x(t: omnitable.Table, *cols: str) -> dict[int, tuple[Any, ...]]:
    return {r["x"]: tuple(r[c] for c in cols) for r in t.read(["x", *cols]).to_pylist()}


def _ids(t: omnitable.Table) -> dict[int, int]:
    return {r["x"]: r[ROW_ID] for r in t.read([ROW_ID, "x"]).to_pylist()}


def _source(spark: Any, xs: list[int]) -> str:
    name = f"src_{uuid.uuid4().hex[:8]}"
    rows = [(x, float(x) + 0.5) for x in xs]
    spark.createDataFrame(rows, "x bigint, quality double").createOrReplaceTempView(name)
    return name


def _merge(spark: Any, catalog: str, t: omnitable.Table, clauses: str) -> Any:
    src = _source(spark, [1, 6, 100])
    spark.conf.set(APPEND_NAME_CONF, "merged")
    return lambda: spark.sql(
        f"MERGE INTO {catalog}.{t.name} t USING {src} s ON t.x = s.x {clauses}"
    )


def _check_merged(t: omnitable.Table, z: Mapping[int, str | None], updated: bool) -> None:
    """x 1 and 6 took quality x + 0.5 (``updated``), x 100 is new (z NULL), every other row
    kept its values, and every row that add_columns saw reads its z."""
    ids, got = _ids(t), _by_x(t, "quality", "z")
    assert sorted(got) == [*range(12), 100]
    for x in range(12):
        q = x + 0.5 if updated and x in (1, 6) else float(x)
        assert got[x] == (q, z[ids[x]]), x
    assert got[100] == (100.5, None)


@pytest.mark.parametrize("adder", ["python", "alter_table"])
def test_a_mixed_merge_paused_while_add_columns_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path, adder: str
) -> None:
    """Python's add_columns (values for every row) or the JVM's ALTER TABLE … ADD COLUMNS (no
    values: z reads NULL) lands while the MERGE waits; then the MERGE lands too."""
    t = dml_table(wh)
    statement = _merge(spark, catalog, t, UPSERT)
    z: Mapping[int, str | None] = {}
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        if adder == "python":
            z = _add(wh.table(t.name))
        else:
            spark.sql(f"ALTER TABLE {catalog}.{t.name} ADD COLUMNS (z string)")
            z = dict.fromkeys(_ids(t).values())
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["upsert", "add_columns"]
    _check_merged(fresh, z, updated=True)


def test_an_insert_only_merge_paused_while_add_columns_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = dml_table(wh)
    statement = _merge(
        spark, catalog, t, "WHEN NOT MATCHED THEN INSERT (x, quality) VALUES (s.x, s.quality)"
    )
    with paused_at(spark, "append.before_commit", tmp_path, statement) as out:
        z = _add(wh.table(t.name))
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["append", "add_columns"]
    _check_merged(fresh, z, updated=False)


def test_a_metadata_only_delete_paused_while_add_columns_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = dml_table(wh)
    t.append(pa.table({"x": [20, 21], "label": ["b", "b"]}), "b2")
    statement = lambda: spark.sql(  # noqa: E731
        f"DELETE FROM {catalog}.{t.name} WHERE _ai_append_name_ = 'b2'"
    )
    with paused_at(spark, "delete.before_commit", tmp_path, statement) as out:
        z = _add(wh.table(t.name))
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["delete", "add_columns"]
    ids = _ids(fresh)
    assert _by_x(fresh, "z") == {x: (z[ids[x]],) for x in range(12)}


def _register(spark: Any, catalog: str, t: omnitable.Table, name: str) -> Any:
    return lambda: spark.sql(
        f"CALL {catalog}.system.register_feature('{t.name}', '{name}', 'x + 1', 'bigint', '1')"
    ).collect()


def test_register_feature_paused_while_add_columns_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """Another column: both land. The feature's output name: the registration conflicts, as
    Python's register does against a concurrent add_columns of that name."""
    t = dml_table(wh)
    for gate in ("a", "b"):
        (tmp_path / gate).mkdir()
    with paused_at(
        spark, "register.before_commit", tmp_path / "a", _register(spark, catalog, t, "f1")
    ) as out:
        z = _add(wh.table(t.name))
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [f.id for f in fresh.features()] == ["f1@1"]
    ids = _ids(fresh)
    assert _by_x(fresh, "z", "f1") == {x: (z[ids[x]], None) for x in range(12)}
    fresh.backfill(["f1"]).run(spark)
    assert _by_x(wh.table(t.name), "f1") == {x: (x + 1,) for x in range(12)}

    with paused_at(
        spark, "register.before_commit", tmp_path / "b", _register(spark, catalog, t, "f2")
    ) as out:
        _add(wh.table(t.name), "f2")
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out.get("error")), out
    assert "column 'f2' was added by a concurrent commit" in str(out["error"])
    fresh = wh.table(t.name)
    assert [f.id for f in fresh.features()] == ["f1@1"]
    assert fresh.snapshot().column("f2").feature is None


def test_a_backfill_paused_while_add_columns_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = dml_table(wh)
    t.register(omnitable.sql_feature("f1", "x + 1", "bigint", "1"))
    statement = lambda: spark.sql(f"CALL {catalog}.system.backfill('{t.name}', 'f1')").collect()  # noqa: E731
    with paused_at(spark, "backfill.before_commit", tmp_path, statement) as out:
        z = _add(wh.table(t.name))
    assert "error" not in out, out
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["backfill", "add_columns"]
    ids = _ids(fresh)
    assert _by_x(fresh, "z", "f1") == {x: (z[ids[x]], x + 1) for x in range(12)}


def _branched(wh: omnitable.Warehouse) -> omnitable.Table:
    """A dml_table whose branch ``a`` set label of x 1 to 'A1'."""
    t = dml_table(wh)
    a = t.create_branch("a")
    a.update(pa.table({ROW_ID: [_ids(t)[1]], "label": ["A1"]}), ["label"])
    return t


def test_merge_branch_paused_while_add_columns_commits_on_the_target(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """The JVM merge plans again on the new head (as after any target commit) and lands: the
    branch's change and the target's new column both read. The same result as Python's merge
    of the new heads on a twin."""
    py, jv = _branched(wh), _branched(wh)
    _add(py)
    py.merge("a")
    statement = lambda: spark.sql(f"CALL {catalog}.system.merge_branch('{jv.name}', 'a')").collect()  # noqa: E731
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        z = _add(wh.table(jv.name))
    assert "error" not in out, out
    fresh = wh.table(jv.name)
    ids = _ids(fresh)
    got = _by_x(fresh, "label", "z")
    assert got == {x: ("A1" if x == 1 else "a", z[ids[x]]) for x in range(12)}
    expected = _by_x(wh.table(py.name), "label")
    assert {x: r[:1] for x, r in got.items()} == expected
    assert fresh.history(1)[0].op == wh.table(py.name).history(1)[0].op


def test_merge_branch_refuses_a_column_both_sides_added(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    """The branch added z; add_columns adds z on the target while the JVM merge waits: the
    merge plans again and refuses, as Python's merge of those heads does."""
    py, jv = _branched(wh), _branched(wh)
    for t in (py, jv):
        _add(t.branch("a"))
    _add(py)
    with pytest.raises(MergeConflict) as expected:
        py.merge("a")
    statement = lambda: spark.sql(f"CALL {catalog}.system.merge_branch('{jv.name}', 'a')").collect()  # noqa: E731
    v = None
    with paused_at(spark, "merge.before_commit", tmp_path, statement) as out:
        _add(wh.table(jv.name))
        v = wh.table(jv.name).version
    assert "OMNITABLE_MERGE_CONFLICT" in str(out.get("error")), out
    assert str(expected.value).replace(py.name, jv.name) in str(out["error"])  # Python's message
    assert wh.table(jv.name).version == v


def test_python_add_columns_paused_while_a_jvm_merge_lands(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = dml_table(wh)
    statement = _merge(spark, catalog, t, UPSERT)
    z: dict[int, str] = {}
    result = race("add_columns.before_commit", lambda: z.update(_add(wh.table(t.name))), statement)
    assert "error" not in result, result
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["add_columns", "upsert"]
    _check_merged(fresh, z, updated=True)


def test_python_add_columns_paused_while_a_jvm_backfill_lands(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = dml_table(wh)
    t.register(omnitable.sql_feature("f1", "x + 1", "bigint", "1"))
    z: dict[int, str] = {}
    result = race(
        "add_columns.before_commit",
        lambda: z.update(_add(wh.table(t.name))),
        lambda: spark.sql(f"CALL {catalog}.system.backfill('{t.name}', 'f1')").collect(),
    )
    assert "error" not in result, result
    fresh = wh.table(t.name)
    assert [h.op for h in fresh.history(2)] == ["add_columns", "backfill"]
    ids = _ids(fresh)
    assert _by_x(fresh, "z", "f1") == {x: (z[ids[x]], x + 1) for x in range(12)}


def test_python_add_columns_of_a_feature_name_loses_to_a_jvm_registration(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = dml_table(wh)
    result = race(
        "add_columns.before_commit",
        lambda: _add(wh.table(t.name), "f2"),
        _register(spark, catalog, t, "f2"),
    )
    assert isinstance(result.get("error"), omnitable.CommitConflict), result
    assert "column 'f2' was added by a concurrent commit" in str(result["error"])
    assert [f.id for f in wh.table(t.name).features()] == ["f2@1"]
