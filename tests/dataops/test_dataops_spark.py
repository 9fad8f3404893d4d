"""Deletes, renames and retires seen through Spark (``to_spark``, the data source, SQL), and
backfills that never compute deleted rows; SQLite and PostgreSQL catalogs."""

from __future__ import annotations

import itertools
import uuid

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

from . import omt_dataops_features as feats
from .upsert_model import append_like_the_model, upsert_like_the_model

pytestmark = pytest.mark.spark
_names = itertools.count()


def _spark_rows(spark, t: omnitable.Table, cols: list[str], **kw: object) -> list[tuple]:  # type: ignore[no-untyped-def]
    df = t.to_spark(spark, **kw).select(*cols)  # type: ignore[arg-type]
    return sorted(tuple(r) for r in df.collect())


def _py_rows(t: omnitable.Table, cols: list[str], **kw: object) -> list[tuple]:
    got = t.read(cols, **kw).to_pydict()  # type: ignore[arg-type]
    return sorted(zip(*(got[c] for c in cols), strict=True))


def test_spark_sees_deletes_renames_and_retires(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table(f"d{next(_names)}", {"x": "bigint", "s": "string", "old": "double"})
    t.append(pa.table({"x": list(range(30)), "s": [f"s{i}" for i in range(30)],
                       "old": [i / 2 for i in range(30)]}), "a", target_fragment_rows=10)  # fmt: skip
    v0 = t.version
    t.delete(pc.field("x") < 10)  # a whole fragment
    t.delete(pc.field("x").isin([12, 13, 25]))
    t.rename_column("s", "label")
    t.retire("old")
    cols = [ROW_ID, "x", "label"]
    assert _spark_rows(spark, t, cols) == _py_rows(t, cols)
    assert len(_spark_rows(spark, t, cols)) == 17
    assert "old" not in t.to_spark(spark).columns and "s" not in t.to_spark(spark).columns
    assert _spark_rows(spark, t, ["x"], version=v0) == [(i,) for i in range(30)]
    assert t.to_spark(spark).where("x > 11 AND x < 15").count() == 1
    catalog = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{catalog}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{catalog}.warehouse", wh.uri)
    got = spark.sql(f"SELECT count(*), sum(x) FROM {catalog}.{t.name}").collect()[0]
    assert (got[0], got[1]) == (17, sum(x for x in range(10, 30) if x not in (12, 13, 25)))


def test_backfills_never_compute_deleted_rows(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    """A pandas feature that raises on a poisoned record and an SQL feature that divides by
    zero under ANSI both succeed once those records are deleted; outputs stay aligned, NULL at
    the deleted offsets."""
    t = wh.create_table(f"b{next(_names)}", {"x": "bigint", "text": "string"})
    texts = ["ok", "fine", "POISON", "good", "also POISON", "end"]
    t.append(pa.table({"x": [1, 2, 3, 4, 5, 6], "text": texts}), "a", target_fragment_rows=3)
    t.register(feats.n_chars, omnitable.sql_feature("inv", "10 DIV (x - 3)", "bigint", "1"))
    t.delete(pc.field("text").isin(["POISON", "also POISON"]))  # x = 3 and 5
    result = t.backfill(["n_chars", "inv"]).run(spark, isolation="off")
    assert not result.skipped
    got = t.read(["x", "n_chars", "inv"]).to_pydict()
    assert got == {"x": [1, 2, 4, 6], "n_chars": [2, 4, 4, 3], "inv": [-5, -10, 10, 3]}
    assert t.status().state("a", "n_chars") == "done"
    snap = t.snapshot()
    for frag in snap.fragments:
        col = snap.column("n_chars").column_id
        f = snap.resolve(frag.fragment_id, [col])[col]
        assert f is not None and f.row_count == frag.row_count  # aligned with the fragment
        values = pq.read_table(t.location.child_path(f.path)).column(0).to_pylist()
        deleted = snap.deletion(frag.fragment_id)
        assert deleted is not None and deleted.deleted_count == 1
        nulls = [v is None for v in values]
        assert nulls == deleted.mask().tolist()  # NULL exactly at the deleted offset
    assert t.backfill(["n_chars", "inv"]).steps == []  # nothing left to do


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 9), st.integers(1, 4)),
        st.tuples(st.just("delete_mod"), st.integers(2, 4), st.integers(0, 3)),
        st.tuples(st.just("delete_batch"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("upsert"), st.integers(0, 2**16), st.integers(1, 6)),
    ),
    min_size=2,
    max_size=5,
)


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(ops=OPS, keyed=st.booleans())
def test_spark_reads_like_the_pandas_model(spark, wh: omnitable.Warehouse, ops, keyed) -> None:  # type: ignore[no-untyped-def]
    """On a table keyed by x, appends are upserts of new keys and upserts (of live, deleted and
    new keys, random built-in policy) join in."""
    t = wh.create_table(f"m{next(_names)}", {"x": "bigint", "y": "string"},
                        key="x" if keyed else None)  # fmt: skip
    model = pd.DataFrame({"x": pd.Series([], dtype="int64"), "y": pd.Series([], dtype=str),
                          "batch": pd.Series([], dtype=str)})  # fmt: skip
    seen: set[int] = set()
    for i, (op, a, b) in enumerate(ops):
        if op == "append":
            model = append_like_the_model(t, model, i, a, b, keyed, with_batch=True)
        elif op == "upsert":
            if not keyed:
                continue
            xs = sorted(seen) + [i * 100 + k for k in range(3)]
            model = upsert_like_the_model(t, model, xs, i, a, b, batch=f"u{i}")
        elif op == "delete_mod":
            t.delete((pc.field("x") - (pc.field("x") / a) * a) == b)  # x % a == b
            model = model[~((model.x % a) == b)]
        elif t.batches():
            name = t.batches()[a % len(t.batches())].name
            t.delete(pc.field(omnitable.APPEND_NAME) == name)
            model = model[model.batch != name]
        seen |= set(model.x)
    expected = sorted((int(x), y) for x, y in zip(model.x, model.y, strict=True))
    assert _spark_rows(spark, t, ["x", "y"]) == expected == _py_rows(t, ["x", "y"])


def test_updating_a_feature_output_records_lineage_and_stales_its_readers(
    spark, wh: omnitable.Warehouse
) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table(f"f{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2, 3, 4]}), "a", target_fragment_rows=2)
    t.register(
        omnitable.sql_feature("twice", "x * 2", "bigint", "1"),
        omnitable.sql_feature("plus", "twice + 1", "bigint", "1"),
    )
    t.backfill("plus").run(spark)
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    t.update(pa.table({ROW_ID: [ids[0]], "twice": [100]}), why="manual fix")
    assert t.status().state("a", "twice") == "done"
    assert t.status().state("a", "plus") == "partial"  # stale where its input changed
    (fixed,) = [r for r in t.lineage("twice") if r.engine == "update"]
    assert fixed.inputs == [] and fixed.feature == "twice"
    assert [s.features[0].name for s in t.backfill("plus").steps] == ["plus"]  # twice is done
    t.backfill("plus").run(spark)
    got = t.read(["x", "twice", "plus"]).sort_by("x").to_pydict()
    assert got == {"x": [1, 2, 3, 4], "twice": [100, 4, 6, 8], "plus": [101, 5, 7, 9]}
    assert _spark_rows(spark, t, ["x", "twice", "plus"]) == _py_rows(t, ["x", "twice", "plus"])


def test_spark_reads_a_rolled_back_table_like_its_target(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table(f"r{next(_names)}", {"x": "bigint", "s": "string"})
    t.append(pa.table({"x": list(range(12)), "s": [f"s{i}" for i in range(12)]}), "a",
             target_fragment_rows=4)  # fmt: skip
    good = t.version
    ids = t.read([ROW_ID]).column(ROW_ID).to_pylist()
    t.delete(pc.field("x") > 7)  # a whole fragment and more
    t.update(pa.table({ROW_ID: ids[:2], "s": ["u0", "u1"]}))
    t.append(pa.table({"x": [99], "s": ["new"]}), "a", mode="replace")
    t.rename_column("s", "text")
    t.rollback(good)
    cols = [ROW_ID, "x", "s"]
    assert _spark_rows(spark, t, cols) == _spark_rows(spark, t, cols, version=good)
    assert _spark_rows(spark, t, cols) == _py_rows(t, cols)
    assert len(_spark_rows(spark, t, cols)) == 12


def test_revert_names_the_features_that_read_what_it_wrote(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    t = wh.create_table(f"v{next(_names)}", {"x": "bigint"})
    t.append(pa.table({"x": [1, 2, 3]}), "a")
    t.register(omnitable.sql_feature("twice", "x * 2", "bigint", "1"))
    ids = t.read([ROW_ID, "x"]).sort_by("x")[ROW_ID].to_pylist()
    fix = t.update(pa.table({ROW_ID: [ids[0]], "x": [10]})).version
    t.backfill("twice").run(spark)  # reads the updated x
    with pytest.raises(omnitable.CommitConflict, match=r"feature\(s\) twice"):
        t.revert(fix)
    t.revert(fix, dependents="stale")
    assert t.history(1)[0].summary["stale"] == ["twice"]
    assert t.status().state("a", "twice") == "stale"
    t.backfill("twice").run(spark)
    assert t.read(["x", "twice"]).sort_by("x").to_pydict() == {"x": [1, 2, 3], "twice": [2, 4, 6]}


def test_spark_reads_an_upserted_table_like_python(spark, wh: omnitable.Warehouse) -> None:  # type: ignore[no-untyped-def]
    """Inserted batches (from a Spark DataFrame, which ``append`` refuses on a keyed table),
    merged (rewritten) column files and a delete, through ``to_spark`` and
    ``format("omnitable")``."""
    t = wh.create_table(f"k{next(_names)}", {"url": "string", "n": "bigint",
                                              "tags": "array<string>"}, key="url")  # fmt: skip
    rows = [(f"u{i}", i, [f"t{i}"]) for i in range(10)]
    df = spark.createDataFrame(rows, "url string, n bigint, tags array<string>")
    with pytest.raises(omnitable.ValidationError, match="it is keyed by"):
        t.append(df, "a")
    assert t.upsert(df).inserted == 10
    t.upsert(pa.table({"url": ["u1", "u5", "new"], "n": [100, None, 7],
                       "tags": [["x"], None, []]}), policy="append_list")  # fmt: skip
    t.upsert(pa.table({"url": ["u2", "u3"], "n": [20, 30]}))
    t.delete(pc.field("url") == "u3")
    cols = [ROW_ID, "url", "n", "tags"]
    python = _py_rows(t, cols)
    source = spark.read.format("omnitable").option("warehouse", wh.uri).load(t.name)
    for df in (t.to_spark(spark), source):
        assert sorted(tuple(r) for r in df.select(*cols).collect()) == python
    assert len(python) == 10 and {r[1]: r[2:] for r in python}["u1"] == (100, ["t1", "x"])
