"""Updates committed by the JVM (jvm/.../write/ColumnUpdate.scala: ColumnRewriter writes the
files, CatalogWriter.commitUpdate commits) on SQLite and PostgreSQL: the same rows, files and
commit as Python's ``Table.update``; only the updated columns' files are written; a concurrent
update of the same cells conflicts, of other cells lands; a failed commit leaves nothing."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

FAILPOINT_CONF = "spark.omnitable.test.failpoint"
_names = itertools.count()


def _table(wh: omnitable.Warehouse, rows: int = 12, fragment_rows: int = 4) -> omnitable.Table:
    t = wh.create_table(
        f"u{next(_names)}",
        {"x": "bigint", "label": "string", "score": "double", "text": "string"},
        groups={"meta": ["label", "score"], "payload": ["text"]},
    )
    t.append(
        pa.table({"x": list(range(rows)), "label": ["a"] * rows, "score": [0.5] * rows,
                  "text": [f"{i}" * 30 for i in range(rows)]}),
        "b1", target_fragment_rows=fragment_rows,
    )  # fmt: skip
    return t


def _ids(t: omnitable.Table) -> list[int]:
    return t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()


def jvm_update(spark: Any, wh: omnitable.Warehouse, t: omnitable.Table, data: pa.Table,
               columns: list[str]) -> Any:  # fmt: skip
    """``Table.update`` done by the JVM (driver-side entry of the update path)."""
    df = spark.createDataFrame(data.to_pandas())
    run = spark._jvm.io.omnitable.spark.write.ColumnUpdate.run
    return run(spark._jsparkSession, wh.uri, t.name, df._jdf, columns)


def _parquet(t: omnitable.Table) -> set[str]:
    return {str(p) for p in Path(t.location.path).rglob("*.parquet")}


def _sorted(t: omnitable.Table) -> list[dict[str, Any]]:
    return t.read([ROW_ID, "x", "label", "score", "text"]).sort_by("x").to_pylist()


def test_a_jvm_update_reads_like_python_update(spark: Any, wh: omnitable.Warehouse) -> None:
    py, jv = _table(wh), _table(wh)
    ids = _ids(py)
    assert ids == _ids(jv)
    py.delete(pc.field("x") == 5)
    jv.delete(pc.field("x") == 5)
    data = pa.table({ROW_ID: [ids[1], ids[9], ids[10]], "label": ["B", None, "K"],
                     "score": [1.5, 9.0, None]})  # fmt: skip
    before = jv.snapshot()
    expected = py.update(data, columns=["label", "score"])
    got = jvm_update(spark, wh, jv, data, ["label", "score"])
    assert (got.rows(), got.fragments(), got.files()) == (expected.rows, expected.fragments, 2)
    assert got.version() == jv.version == py.version
    assert _sorted(jv) == _sorted(py)
    after = jv.snapshot()
    label, score = after.column("label").column_id, after.column("score").column_id
    text = after.column("text").column_id
    for frag in after.fragments:
        old = before.resolve(frag.fragment_id, [label, score, text])
        new = after.resolve(frag.fragment_id, [label, score, text])
        assert new[text] == old[text]
        if new[label] != old[label]:  # a rewritten file: exactly the updated columns, every row
            assert new[label] == new[score] and set(new[label].columns) == {label, score}
            assert new[label].row_count == frag.row_count
    head, pyhead = jv.history(1)[0], py.history(1)[0]
    assert head.op == pyhead.op == "update"
    for key in ("columns", "rows", "fragments", "files"):
        assert head.summary[key] == pyhead.summary[key]
    # the rewritten files' statistics are those Python computes
    assert _stats(jv) == _stats(py)
    # time travel before the update shows the old values
    assert jv.read(["label"], version=got.version() - 1)["label"].to_pylist() == ["a"] * 11
    # Spark reads the JVM-written files like Python does
    catalog = f"omu_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{catalog}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", wh.uri)
    rows = spark.sql(f"SELECT x, label, score FROM {catalog}.{jv.name} ORDER BY x").collect()
    assert [r.asDict() for r in rows] == [
        {k: r[k] for k in ("x", "label", "score")} for r in _sorted(py)
    ]


def _stats(t: omnitable.Table) -> list[Any]:
    snap = t.snapshot()
    ids = [snap.column(n).column_id for n in ("label", "score")]
    out = []
    for frag in snap.fragments:
        f = snap.resolve(frag.fragment_id, ids)[ids[0]]
        assert f is not None
        out.append(sorted((cid, repr(f.stats(cid))) for cid in ids))
    return out


def test_only_the_updated_column_is_written(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    before = _parquet(t)
    got = jvm_update(spark, wh, t, pa.table({ROW_ID: ids, "score": [2.0] * 12}), ["score"])
    assert (got.rows(), got.fragments(), got.files()) == (12, 3, 3)
    new = _parquet(t) - before
    assert len(new) == 3
    snap = t.snapshot()
    score = snap.column("score").column_id
    for frag in snap.fragments:
        f = snap.resolve(frag.fragment_id, [score])[score]
        assert f is not None and set(f.columns) == {score} and f.group_name == "meta"
    assert t.read(["label", "score"]).to_pydict() == {"label": ["a"] * 12, "score": [2.0] * 12}
    assert got.bytesWritten() == sum(Path(p).stat().st_size for p in new)


def test_bad_updates_commit_nothing(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    t.delete(pc.field("x") == 3)
    v, files = t.version, _parquet(t)
    cases = [
        (pa.table({ROW_ID: [ids[0]], ROW_ID + "x": [1]}), [ROW_ID], "system column"),
        (pa.table({ROW_ID: [ids[0]], "_ai_append_name_": ["x"]}), ["_ai_append_name_"],
         "system column"),
        (pa.table({ROW_ID: [ids[0]], "nope": ["x"]}), ["nope"], "unknown column"),
        (pa.table({ROW_ID: [ids[0]], "label": ["x"]}), [], "found none"),
        (pa.table({ROW_ID: [ids[0], ids[0]], "label": ["x", "y"]}), ["label"], "duplicate"),
        (pa.table({ROW_ID: [ids[3]], "label": ["x"]}), ["label"], "not live rows"),
        (pa.table({ROW_ID: [ids[0], 10**9], "label": ["x", "y"]}), ["label"], "1 of the 2"),
    ]  # fmt: skip
    for data, columns, pattern in cases:
        with pytest.raises(Exception, match=pattern):
            jvm_update(spark, wh, t, data, columns)
    assert t.version == v
    assert _parquet(t) == files  # nothing written by a failed update is left behind


def test_a_jvm_update_killed_mid_commit_leaves_nothing(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _table(wh)
    ids = _ids(t)
    v, files = t.version, _parquet(t)
    spark.conf.set(FAILPOINT_CONF, "commit.mid_insert=raise")
    try:
        with pytest.raises(Exception, match="failpoint 'commit.mid_insert'"):
            jvm_update(spark, wh, t, pa.table({ROW_ID: [ids[0]], "label": ["z"]}), ["label"])
    finally:
        spark.conf.unset(FAILPOINT_CONF)
    assert t.version == v and wh.table(t.name).read(["label"])["label"].to_pylist() == ["a"] * 12
    assert _parquet(t) == files


def _racing(spark: Any, wh: omnitable.Warehouse, t: omnitable.Table, data: pa.Table,
            columns: list[str], tmp: Path, concurrent: Any) -> Any:  # fmt: skip
    """The JVM update of ``data`` with ``concurrent()`` committing between its snapshot and its
    commit (failpoint ``update.before_commit`` paused); its result or error."""
    spark.conf.set(FAILPOINT_CONF, f"update.before_commit=pause:{tmp}")
    out: dict[str, Any] = {}

    def job() -> None:
        try:
            out["result"] = jvm_update(spark, wh, t, data, columns)
        except Exception as exc:
            out["error"] = exc

    th = threading.Thread(target=job)
    th.start()
    try:
        deadline = time.monotonic() + 120
        while not (tmp / "update.before_commit.reached").exists() and "error" not in out:
            assert time.monotonic() < deadline, "the JVM update never reached its commit"
            time.sleep(0.05)
        concurrent()
    finally:
        (tmp / "update.before_commit.go").touch()
        th.join()
        spark.conf.unset(FAILPOINT_CONF)
    return out


def test_concurrent_python_update_of_the_same_cells_conflicts(
    spark: Any, wh: omnitable.Warehouse, tmp_path: Path
) -> None:
    t = _table(wh)
    ids = _ids(t)

    def racing() -> None:
        other = wh.table(t.name)
        other.update(pa.table({ROW_ID: [ids[1]], "label": ["B"]}))
        other.update(pa.table({ROW_ID: [ids[2]], "score": [2.0]}))  # another column: fine

    out = _racing(spark, wh, t, pa.table({ROW_ID: [ids[0]], "label": ["A"]}), ["label"],
                  tmp_path, racing)  # fmt: skip
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out.get("error"))
    assert "wrote column(s) label in 1 of the same fragment" in str(out.get("error"))
    got = t.read(["label", "score"]).to_pydict()
    assert got["label"][:3] == ["a", "B", "a"] and got["score"][2] == 2.0


def test_concurrent_python_update_of_other_cells_both_land(
    spark: Any, wh: omnitable.Warehouse, tmp_path: Path
) -> None:
    t = _table(wh)
    ids = _ids(t)

    def racing() -> None:
        wh.table(t.name).update(pa.table({ROW_ID: [ids[0]], "score": [7.0]}))

    out = _racing(spark, wh, t, pa.table({ROW_ID: [ids[0]], "label": ["A"]}), ["label"],
                  tmp_path, racing)  # fmt: skip
    assert "result" in out, out
    row = t.read(["label", "score"], where=pc.field("x") == 0).to_pylist()[0]
    assert row == {"label": "A", "score": 7.0}


def test_a_python_update_racing_a_jvm_update_of_the_same_cells_conflicts(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    from omnitable._failpoints import hooked

    t = _table(wh)
    ids = _ids(t)

    def racing() -> None:
        jvm_update(spark, wh, t, pa.table({ROW_ID: [ids[1]], "label": ["J"]}), ["label"])

    with hooked("update.before_commit", racing), pytest.raises(omnitable.CommitConflict):
        t.update(pa.table({ROW_ID: [ids[0]], "label": ["P"]}))
    assert t.read(["label"])["label"].to_pylist()[:2] == ["a", "J"]


UPDATES = st.lists(
    st.tuples(
        st.integers(0, 9),  # row (by x)
        st.one_of(st.none(), st.text("ab", max_size=3)),
        st.one_of(st.none(), st.floats(-5, 5, allow_nan=False)),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda u: u[0],
)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    updates=UPDATES,
    columns=st.sampled_from([["label"], ["score"], ["label", "score"], ["score", "text"]]),
    deleted=st.sets(st.integers(0, 9), max_size=2),
    fragment_rows=st.integers(2, 6),
)
def test_jvm_updates_of_random_tables_equal_a_pandas_model(
    spark: Any,
    wh: omnitable.Warehouse,
    updates: list[tuple[int, str | None, float | None]],
    columns: list[str],
    deleted: set[int],
    fragment_rows: int,
) -> None:
    t = _table(wh, rows=10, fragment_rows=fragment_rows)
    if deleted:
        t.delete(pc.field("x").isin(sorted(deleted)))
    model = t.read([ROW_ID, "x", "label", "score", "text"]).to_pandas().set_index("x")
    live = [u for u in updates if u[0] not in deleted]
    if not live:
        return
    data = pd.DataFrame(
        {
            ROW_ID: [int(model.loc[x, ROW_ID]) for x, _, _ in live],
            "label": [lab for _, lab, _ in live],
            "score": [s for _, _, s in live],
            "text": [f"t{x}" for x, _, _ in live],
        }
    )
    got = jvm_update(spark, wh, t, pa.Table.from_pandas(data, preserve_index=False), columns)
    for (x, lab, s), row in zip(live, data.itertuples(), strict=True):
        new = {"label": lab, "score": s, "text": row.text}
        for c in columns:
            model.loc[x, c] = new[c]
    assert got.rows() == len(live)
    read = t.read([ROW_ID, "x", "label", "score", "text"]).to_pandas().set_index("x").sort_index()
    expect = model.sort_index()
    assert read.index.tolist() == expect.index.tolist()
    for c in (ROW_ID, "label", "score", "text"):
        assert [None if pd.isna(v) else v for v in read[c]] == [
            None if pd.isna(v) else v for v in expect[c]
        ], c


def test_a_jvm_update_of_a_feature_output_records_lineage_and_stales_its_readers(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """As Python's update (tests/dataops/test_dataops_spark.py): the rewritten file keeps the
    feature version, lineage says engine ``update``, the features reading it become stale."""
    tables = []
    for _ in range(2):
        t = wh.create_table(f"f{next(_names)}", {"x": "bigint"})
        t.append(pa.table({"x": [1, 2, 3, 4]}), "a", target_fragment_rows=2)
        t.register(
            omnitable.sql_feature("twice", "x * 2", "bigint", "1"),
            omnitable.sql_feature("plus", "twice + 1", "bigint", "1"),
        )
        t.backfill("plus").run(spark)
        tables.append(t)
    py, jv = tables
    ids = py.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    data = pa.table({ROW_ID: [ids[0]], "twice": [100]})
    py.update(data)
    jvm_update(spark, wh, jv, data, ["twice"])
    assert jv.status().state("a", "twice") == "done"
    assert jv.status().state("a", "plus") == "partial"  # stale where its input changed
    assert jv.status().to_pandas().equals(py.status().to_pandas())
    (fixed,) = [r for r in jv.lineage("twice") if r.engine == "update"]
    (pyfixed,) = [r for r in py.lineage("twice") if r.engine == "update"]
    assert (fixed.inputs, fixed.feature, fixed.feature_version) == (
        pyfixed.inputs,
        pyfixed.feature,
        pyfixed.feature_version,
    )
    snap, pysnap = jv.snapshot(), py.snapshot()
    twice = snap.column("twice").column_id
    for frag, pyfrag in zip(snap.fragments, pysnap.fragments, strict=True):
        f = snap.resolve(frag.fragment_id, [twice])[twice]
        g = pysnap.resolve(pyfrag.fragment_id, [twice])[twice]
        assert f is not None and g is not None
        assert f.columns[twice].feature_version == g.columns[twice].feature_version == "1"
    assert [s.features[0].name for s in jv.backfill("plus").steps] == ["plus"]
    jv.backfill("plus").run(spark)
    got = jv.read(["x", "twice", "plus"]).sort_by("x").to_pydict()
    assert got == {"x": [1, 2, 3, 4], "twice": [100, 4, 6, 8], "plus": [101, 5, 7, 9]}
