"""Hot column-group views through Spark: the ``views`` job (governance/views.py) refreshes a
view's Delta table per batch, and the optimizer rule UseFreshColumnViews answers covered reads
from a fresh view only (docs/governance.md "Hot column-group views", docs/optimizer.md)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable._failpoints import hooked

pytestmark = pytest.mark.spark

SWITCH = "spark.omnitable.optimizer.views.enabled"
_WHERE = (pc.field("a") > 10) & (pc.field("b") != "s20")  # Table.read's filter in the checks


@pytest.fixture(scope="module")
def wh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[omnitable.Warehouse]:
    warehouse = omnitable.connect(tmp_path_factory.mktemp("views") / "wh")
    yield warehouse
    warehouse.close()


def _make(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(
        name,
        {"a": "bigint", "b": "string", "c": "double", "d": "string"},
        groups={"hot": ["a", "b"], "cold": ["c", "d"]},
    )
    for i, batch in enumerate(["b1", "b2"]):
        n = range(i * 50, i * 50 + 50)
        t.append(
            pa.table({"a": list(n), "b": [f"s{k}" for k in n], "c": [k / 2 for k in n],
                      "d": ["x" * (k % 7) for k in n]}),
            batch, target_fragment_rows=20,
        )  # fmt: skip
    return t


def _query(spark: Any, t: omnitable.Table, version: int | None = None) -> Any:
    df = t.to_spark(spark, version)
    return df.where("a % 3 = 0").select("_ai_unique_id_", "a", "b")


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def _uses_view(df: Any) -> bool:
    return "ColumnViewRead" in _plan(df)


def _check(spark: Any, t: omnitable.Table, *, fresh: bool, version: int | None = None) -> None:
    """The query reads the view exactly when ``fresh``, and equals the zip read either way; so
    does ``Table.read`` where the refresh recorded the view's files (:func:`_check_python`)."""
    got = _query(spark, t, version)
    assert _uses_view(got) == fresh
    spark.conf.set(SWITCH, "false")
    try:
        zipped = _query(spark, t, version)
        assert not _uses_view(zipped)
        assert _rows(got) == _rows(zipped)
    finally:
        spark.conf.unset(SWITCH)
    (view,) = t.views()
    answers = view["name"] if fresh and view["data_files"] is not None else None
    _check_python(t, ["_ai_unique_id_", "a", "b"], answers, version)


def _zip(t: omnitable.Table) -> omnitable.Warehouse:
    """The table's warehouse, connected with the setting ``read.views`` off."""
    return omnitable.connect(t.warehouse.uri, settings={"read.views": False})


def _check_python(
    t: omnitable.Table,
    columns: list[str],
    view: str | None,
    version: int | None = None,
    where: Any = _WHERE,
) -> None:
    """``Table.read`` of ``columns`` under ``where`` is answered by ``view`` (None: the zip) and
    returns the zip read's schema and rows (in another order)."""
    got = t.scan(columns, where=where, version=version)
    assert got.stats.view == view
    with _zip(t) as wh_zip:
        zipped = wh_zip.table(t.name).scan(columns, where=where, version=version)
    assert zipped.stats.view is None
    assert got.table.schema == zipped.table.schema
    assert _sorted(got.table) == _sorted(zipped.table)


def _sorted(table: pa.Table) -> list[str]:
    """The rows as sorted texts (NaN equals NaN there)."""
    return sorted(repr(row) for row in zip(*(c.to_pylist() for c in table.columns), strict=True))


def _refresh(t: omnitable.Table, spark: Any) -> Any:
    (res,) = t.maintain(["views"], options={"views": {"spark": spark}})
    return res


def test_refresh_per_batch_and_fall_back_when_stale(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _make(wh, "incr")
    t.create_view("hot", ["a", "b"])
    _check(spark, t, fresh=False)  # never refreshed
    res = _refresh(t, spark)
    assert res.outcome == "committed" and res.summary["batches_written"] == 2
    assert _refresh(t, spark).outcome == "nothing_to_do"
    _check(spark, t, fresh=True)

    ids = t.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()
    t.update(pa.table({"_ai_unique_id_": ids[:3], "c": [0.0] * 3}), ["c"])  # not covered
    _check(spark, t, fresh=True)

    t.append(pa.table({"a": [999], "b": ["new"], "c": [1.0], "d": ["n"]}), "b3")
    _check(spark, t, fresh=False)
    assert _refresh(t, spark).summary["batches_written"] == 1
    _check(spark, t, fresh=True)

    t.delete(ids=ids[:4])  # rows of b1 (fingerprints: tests/governance/test_views.py)
    t.update(pa.table({"_ai_unique_id_": ids[60:62], "a": [3000, 3003]}), ["a"])  # b2, covered
    _check(spark, t, fresh=False)
    res = _refresh(t, spark)
    assert (res.summary["batches_written"], res.summary["batches_dropped"]) == (2, 0)
    _check(spark, t, fresh=True)

    t.append(pa.table({"a": [5], "b": ["r"], "c": [1.0], "d": ["r"]}), "b3", mode="replace")
    _check(spark, t, fresh=False)
    res = _refresh(t, spark)
    assert (res.summary["batches_written"], res.summary["batches_dropped"]) == (1, 1)
    _check(spark, t, fresh=True)


def test_crash_before_record_leaves_view_stale(spark: Any, wh: omnitable.Warehouse) -> None:
    t = _make(wh, "crash")
    t.create_view("hot", ["a", "b"])
    _refresh(t, spark)
    old = t._ctx.head_version()
    ids = t.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()
    t.update(pa.table({"_ai_unique_id_": ids[:2], "a": [-3, -6]}), ["a"])

    def boom() -> None:
        raise RuntimeError("crash after the Delta commit")

    with hooked("views.before_record", boom), pytest.raises(RuntimeError):
        _refresh(t, spark)
    # the Delta table moved on, the record did not: stale at the head, and the old version,
    # whose fingerprints the record still names, reads the recorded Delta version (old rows)
    _check(spark, t, fresh=False)
    _check(spark, t, fresh=True, version=old)
    assert _refresh(t, spark).plan.actions[0]["full"]  # rewritten whole
    _check(spark, t, fresh=True)


def test_writes_and_refreshes_racing_a_refresh(spark: Any, wh: omnitable.Warehouse) -> None:
    """A delete landing between a refresh's Delta commit and its record: the record names the
    plan's version, so the head reads the zip (stale), the plan's version the view. A second
    refresh committing meanwhile makes the first one conflict (its Delta commit no longer sits
    on the recorded version); the next refresh rewrites the view whole and serves again."""
    from omnitable.governance.job import run_job
    from omnitable.governance.views import ViewsJob

    t = _make(wh, "race")
    t.create_view("hot", ["a", "b"])
    ids = t.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()
    other = wh.table("race")
    planned: list[int] = []

    def delete() -> None:
        planned.append(t._ctx.head_version())
        other.delete(ids=ids[:3])

    with hooked("views.before_record", delete):
        assert _refresh(t, spark).outcome == "committed"
    _check(spark, t, fresh=False)
    _check(spark, t, fresh=True, version=planned[0])
    assert _refresh(t, spark).summary["batches_written"] == 1  # only b1 changed
    _check(spark, t, fresh=True)

    other.update(pa.table({"_ai_unique_id_": ids[60:61], "a": [3003]}), ["a"])
    with hooked("views.before_record", lambda: _refresh(other, spark)):
        lost = run_job(t._ctx, ViewsJob(spark=spark), attempts=1)
    assert lost.outcome == "skipped"
    assert "changed while it was being refreshed" in lost.summary["conflict"]
    _check(spark, t, fresh=True)  # the racing refresh's record stands
    assert _refresh(t, spark).outcome == "nothing_to_do"


def test_unrecorded_delta_commit_is_never_served(spark: Any, wh: omnitable.Warehouse) -> None:
    """A Delta commit after the recorded version (a crashed refresh, a stray writer) is not
    read: the fresh view answers at exactly its recorded version."""
    from pyspark.sql.functions import lit

    t = _make(wh, "pin")
    path = t._ctx.location.child_path(t.create_view("hot", ["a", "b"])["path"])
    _refresh(t, spark)
    _check(spark, t, fresh=True)
    stray = (
        spark.read.format("delta")
        .load(path)
        .limit(1)
        .withColumn("a", lit(3_000_000).cast("bigint"))
    )
    stray.write.format("delta").mode("append").save(path)
    # fresh by the freshness answer the first read left; equal to the zip read: the stray row
    # (a % 3 == 0, the query would keep it) is not served
    _check(spark, t, fresh=True)


def test_filters_and_udfs_see_the_rows_spark_gives_them(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    from pyspark.sql.functions import col, udf

    t = _make(wh, "udf")
    t.create_view("hot", ["a", "b"])
    _refresh(t, spark)

    @udf("int")
    def strict(a):  # type: ignore[no-untyped-def]
        if a < 90:
            raise ValueError(f"ran on a filtered row: {a}")
        return a * 2

    df = t.to_spark(spark).where(col("a") >= 90).select(strict(col("a")).alias("x"), "b")
    assert _uses_view(df)
    assert sorted(r.x for r in df.collect()) == [k * 2 for k in range(90, 100)]
    assert t.to_spark(spark).where(col("a") >= 90).count() == 10


def test_explain_names_the_view_and_switch_turns_it_off(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    t = _make(wh, "explain")
    path = t.create_view("hot", ["a", "b"])["path"]
    _refresh(t, spark)
    assert "ColumnViewRead explain.hot" in _plan(_query(spark, t))
    spark.conf.set(SWITCH, "false")
    try:
        assert not _uses_view(_query(spark, t))
    finally:
        spark.conf.unset(SWITCH)
    # a column the view lacks: the zip read
    assert not _uses_view(t.to_spark(spark).select("a", "c"))
    t.drop_view("hot")
    assert not Path(t._ctx.location.child_path(path)).exists()
    assert not _uses_view(_query(spark, t))


def test_auto_declares_views_from_the_access_log(spark: Any, wh: omnitable.Warehouse) -> None:
    """``auto``: the co-read set (a, b) becomes a view in the job's commit, filled by the same
    refresh, and serves the query; run again, it has nothing to do."""
    t = _make(wh, "auto")
    for _ in range(2):
        t.read(columns=["a", "b"])
    opts = {"views": {"spark": spark, "auto": True, "min_scans": 2}}
    (res,) = t.maintain(["views"], options=opts)
    assert res.outcome == "committed" and len(res.summary["declared"]) == 1
    (view,) = t.views()
    assert view["name"] == res.summary["declared"][0] and view["delta_version"] is not None
    assert view["columns"] == ["_ai_unique_id_", "a", "b"]
    _check(spark, t, fresh=True)
    (again,) = t.maintain(["views"], options=opts)
    assert again.outcome == "nothing_to_do"


def test_a_refresh_writes_one_sorted_file_per_batch(spark: Any, wh: omnitable.Warehouse) -> None:
    """The view's layout: one data file per batch partition (not one per fragment: each batch
    here has 3), rows sorted by the first declared column; reads still equal the table's."""
    import pyarrow.parquet as pq

    t = _make(wh, "layout")
    t.create_view("hot", ["a", "b"])
    assert _refresh(t, spark).outcome == "committed"
    root = Path(t.location.child_path(t.views()[0]["path"]))
    parts = sorted(p for p in root.iterdir() if p.name.startswith("_view_batch_="))
    assert len(parts) == 2
    for part in parts:
        (file,) = [f for f in part.iterdir() if f.suffix == ".parquet"]
        a = pq.read_table(file, columns=["a"]).column("a").to_pylist()
        assert a == sorted(a) and len(a) == 50
    _check(spark, t, fresh=True)


def _scan(df: Any) -> str:
    """The executed plan's leaf scan line(s) under ColumnViewRead."""
    return "\n".join(
        line for line in _plan(df).splitlines() if "FileScan" in line or "Scan " in line
    )


def test_a_fresh_view_reads_the_files_its_refresh_recorded(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """The refresh records the Delta version's data files and schema; the rule reads exactly
    those files as Parquet (no Delta scan): a file another Delta commit adds is not read, and a
    recorded file that disappears fails the query instead of silently dropping its rows."""
    import json

    from pyspark.sql.functions import lit

    t = _make(wh, "files")
    path = t.create_view("hot", ["a", "b"])["path"]
    _refresh(t, spark)
    with t._ctx.catalog.store.read() as conn:
        from omnitable.catalog.views import read_views

        rec = read_views(conn, t._ctx.record.table_id)["hot"]
    assert rec.files is not None and len(rec.files) == 2  # one file per batch partition
    assert t.views()[0]["data_files"] == 2
    root = Path(t.location.child_path(path))
    for rel, size in rec.files:
        assert rel.startswith("_view_batch_=") and (root / rel).stat().st_size == size
    names = [f["name"] for f in json.loads(str(rec.schema))["fields"]]
    assert names == ["_ai_unique_id_", "a", "b", "_ai_append_name_"]
    got = _query(spark, t)
    scan = _scan(got)
    assert "parquet" in scan.lower() and "delta" not in scan.lower(), scan
    _check(spark, t, fresh=True)

    stray = spark.read.format("delta").load(str(root)).limit(1)
    stray.withColumn("a", lit(3).cast("bigint")).write.format("delta").mode("append").save(
        str(root)
    )
    _check(spark, t, fresh=True)  # the stray file (a row with a % 3 == 0) is not read

    (root / rec.files[0][0]).unlink()
    with pytest.raises(Exception, match=r"(?i)not exist|FileNotFound|No such file"):
        _query(spark, t).collect()
    # Table.read cannot open the files either: it answers from the zip
    _check_python(t, ["_ai_unique_id_", "a", "b"], None)


def test_a_view_without_recorded_files_reads_its_delta_version(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """A record without files (written before they were recorded, or a Delta table whose files
    are not plain Parquet of its rows: deletion vectors enabled) is read through Delta at the
    recorded version; the answer is the same."""
    from omnitable.catalog.views import read_views, write_views

    t = _make(wh, "nofiles")
    path = t.create_view("hot", ["a", "b"])["path"]
    _refresh(t, spark)
    store, table_id = t._ctx.catalog.store, t._ctx.record.table_id
    with store.write() as conn:
        records = read_views(conn, table_id)
        records["hot"] = records["hot"].refreshed(
            int(records["hot"].delta_version or 0), records["hot"].batches,
            int(records["hot"].refreshed_version or 0), str(records["hot"].branch),
        )  # fmt: skip
        write_views(conn, table_id, records)
    assert "delta" in _scan(_query(spark, t)).lower()
    _check(spark, t, fresh=True)

    uri = t._ctx.location.child_uri(path)
    spark.sql(
        f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    t.append(pa.table({"a": [999], "b": ["new"], "c": [1.0], "d": ["n"]}), "b3")
    _refresh(t, spark)
    with store.read() as conn:
        rec = read_views(conn, table_id)["hot"]
    assert rec.files is None and rec.schema is None
    assert t.views()[0]["data_files"] is None
    assert "delta" in _scan(_query(spark, t)).lower()
    _check(spark, t, fresh=True)


def test_table_read_answers_from_the_smallest_fresh_view_covering_it(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """``Table.read`` answers from the fresh view with the fewest columns that covers its
    columns and its filter's (the batch name comes from the view's files); a column or filter
    column no view covers, a list of batches, no columns named, or a renamed column read the
    zip. ``_check_python`` also reads with the setting ``read.views`` off."""
    t = _make(wh, "pyread")
    t.create_view("hot", ["a", "b"])
    t.create_view("wide", ["a", "b", "c"])
    _refresh(t, spark)
    _check_python(t, ["a"], "hot", where=None)
    _check_python(t, ["_ai_append_name_", "b"], "hot", where=pc.field("a") >= 45)
    _check_python(t, ["a", "c"], "wide", where=None)
    _check_python(t, ["a"], "wide", where=pc.field("c") > 20)
    _check_python(t, ["a", "d"], None, where=None)
    _check_python(t, ["a"], None, where=pc.field("d") == "xx")
    assert t.scan(["a"], batches=["b1", "b2"]).stats.view is None
    assert t.scan().stats.view is None
    # a branch and a tag of the refreshed state share its fingerprints; a delete on the branch
    # makes the view stale there only
    t.create_tag("refreshed")
    exp = t.create_branch("exp")
    _check_python(exp, ["a", "b"], "hot")
    assert t.scan(["a"], tag="refreshed").stats.view == "hot"
    exp.delete(ids=exp.to_pandas(["_ai_unique_id_"])["_ai_unique_id_"].tolist()[:5])
    _check_python(exp, ["a", "b"], None)
    assert t.scan(["a"], branch="exp").stats.view is None
    _check_python(t, ["a", "b"], "hot")
    t.rename_column("b", "bb")  # both views name b: stale until re-created
    _check_python(t, ["a"], None, where=None)


def test_table_read_from_a_view_comes_batch_by_batch_in_append_order(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """The view's files are read in the snapshot's batch order (not their ids' order), each
    batch's rows sorted by the view's first column."""
    t = wh.create_table("pyorder", {"a": "bigint", "b": "string"})
    names = [f"n{k}" for k in range(6)]
    for k, name in enumerate(names):
        t.append(pa.table({"a": [30 - k, 10 - k, 20 - k], "b": ["x", "y", "z"]}), name)
    t.create_view("hot", ["a", "b"])
    _refresh(t, spark)
    got = t.scan(["_ai_append_name_", "a"])
    assert got.stats.view == "hot"
    assert got.table.column(0).to_pylist() == [n for n in names for _ in range(3)]
    assert got.table.column(1).to_pylist() == [
        v for k in range(6) for v in (10 - k, 20 - k, 30 - k)
    ]


def test_table_read_fails_as_the_zip_read_fails(spark: Any, wh: omnitable.Warehouse) -> None:
    """A filter the view's rows cannot evaluate, or bad columns, get the zip read's error."""
    t = _make(wh, "pyerr")
    t.create_view("hot", ["a", "b"])
    _refresh(t, spark)
    cases: list[tuple[Any, Any]] = [
        (["a"], pc.field("b") > 5),  # a string against a number
        (["a"], pc.field("nope") > 1),
        (["a", "a"], None),
        ("a", None),
        (["a"], "a > 1"),
    ]
    for columns, where in cases:
        with _zip(t) as wh_zip, pytest.raises(Exception) as want:
            wh_zip.table(t.name).read(columns, where=where)
        with pytest.raises(type(want.value)) as got:
            t.read(columns, where=where)
        assert str(got.value) == str(want.value)


def test_table_read_from_a_view_keeps_every_type(spark: Any, wh: omnitable.Warehouse) -> None:
    """Every type a view stores reads back from its files as the table's type (timestamps are
    written as TIMESTAMP_MICROS, not Spark's INT96), equal to the zip read."""
    import datetime as dt
    import decimal

    types = {"i64": "bigint", "i32": "int", "i16": "smallint", "i8": "tinyint", "f64": "double",
             "f32": "float", "flag": "boolean", "s": "string", "bin": "binary", "day": "date",
             "ts": "timestamp", "dec": "decimal(10,2)", "vec": "array<float>"}  # fmt: skip
    t = wh.create_table("pytypes", types)
    values = {
        "i64": [1, 2, 3, None, 5], "i32": [1, 2, 3, 4, None], "i16": [1, 2, 3, 4, 5],
        "i8": [1, 2, 3, 4, 5], "f64": [0.1, float("nan"), None, 0.4, 0.5],
        "f32": [0.1, 0.2, 0.3, 0.4, 0.5], "flag": [True, False, None, True, False],
        "s": ["a", "b", None, "d", "e"], "bin": [b"a", b"b", b"c", None, b"e"],
        "day": [dt.date(1000, 1, 1)] + [dt.date(2020, 1, k) for k in range(1, 5)],
        "ts": [dt.datetime(1200, 6, 1, tzinfo=dt.UTC)]
        + [dt.datetime(2020, 1, 1, k, tzinfo=dt.UTC) for k in range(4)],
        "dec": [decimal.Decimal("1.25")] * 5, "vec": [[1.0, 2.0]] * 5,
    }  # fmt: skip
    t.append(pa.table({k: pa.array(v, t.schema.field(k).type) for k, v in values.items()}), "b1")
    t.create_view("all", list(types))
    with _session(spark, _OLD_WAYS):  # what the refresh must not follow
        _refresh(t, spark)
        assert {k: spark.conf.get(k) for k in _OLD_WAYS} == _OLD_WAYS  # restored
        assert spark.conf.get("parquet.block.row.count.limit", None) is None
    _check_python(t, ["_ai_unique_id_", *types], "all", where=None)
    _check_python(t, ["s", "ts"], "all", where=pc.field("i64") > 1)
    _check_python(t, ["i64"], "all", where=pc.field("day") < pa.scalar(dt.date(1000, 1, 3)))
    _check_python(t, ["i64"], "all", where=pc.field("f64") != 0.4)


_OLD_WAYS = {  # INT96 timestamps, dates and timestamps rebased to Spark's legacy calendar
    "spark.sql.parquet.outputTimestampType": "INT96",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
    "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY",
}


@contextlib.contextmanager
def _session(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    before = {k: spark.conf.get(k, None) for k in settings}
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            spark.conf.unset(k) if v is None else spark.conf.set(k, v)


_REBASE = [
    "spark.sql.parquet.datetimeRebaseModeInWrite",
    "spark.sql.parquet.int96RebaseModeInWrite",
]


@pytest.mark.parametrize(
    ("columns", "unpinned"),
    [
        ({"day": "date"}, _REBASE),  # written in the legacy calendar: the footer says so
        ({"ts": "timestamp"}, ["spark.sql.parquet.outputTimestampType"]),  # INT96: another type
    ],
)
def test_view_files_table_read_cannot_trust_are_not_read(
    spark: Any,
    wh: omnitable.Warehouse,
    monkeypatch: pytest.MonkeyPatch,
    columns: dict[str, str],
    unpinned: list[str],
) -> None:
    """Files written the old ways (by a refresh that did not pin those settings): dates in
    Spark's legacy calendar or timestamps as INT96 leave Table.read to the zip, which gives
    the true values."""
    import datetime as dt

    from omnitable.governance import views

    for key in unpinned:
        monkeypatch.delitem(views._VIEW_WRITE_SETTINGS, key)
    name = f"pyold_{next(iter(columns))}"
    t = wh.create_table(name, {"k": "bigint", **columns})
    value = {"day": dt.date(1000, 1, 1), "ts": dt.datetime(1200, 6, 1, tzinfo=dt.UTC)}
    col = next(iter(columns))
    t.append(
        pa.table({"k": [1, 2], col: pa.array([value[col]] * 2, t.schema.field(col).type)}), "b"
    )
    t.create_view("old", ["k", col])
    with _session(spark, _OLD_WAYS):
        _refresh(t, spark)
    _check_python(t, ["k", col], None, where=None)
    assert t.read([col]).column(0).to_pylist() == [value[col]] * 2


def test_overlapping_blocks_share_the_session_settings(spark: Any) -> None:
    """Two blocks overlapping on one session (two refreshes on threads): the settings hold until
    the last one leaves, then the session's values come back; other settings are refused while
    they are held, and a block that raises still gives them back."""
    from omnitable.spark.scoped_conf import session_settings

    key, extra = "spark.sql.parquet.outputTimestampType", "spark.omnitable.test.scoped"
    wanted = {key: "TIMESTAMP_MICROS", extra: "1"}
    with _session(spark, {key: "INT96"}):
        first, second = session_settings(spark, wanted), session_settings(spark, wanted)
        first.__enter__()
        second.__enter__()
        with pytest.raises(ValueError, match="held"), session_settings(spark, {key: "INT96"}):
            pass
        first.__exit__(None, None, None)  # the first leaves while the second still writes
        assert spark.conf.get(key) == "TIMESTAMP_MICROS" and spark.conf.get(extra) == "1"
        second.__exit__(None, None, None)
        assert spark.conf.get(key) == "INT96" and spark.conf.get(extra, None) is None
        with pytest.raises(RuntimeError), session_settings(spark, wanted):
            raise RuntimeError("the write failed")
        assert spark.conf.get(key) == "INT96" and spark.conf.get(extra, None) is None


def test_view_files_hold_small_row_groups_a_filter_skips(
    spark: Any, wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh writes row groups of at most ``VIEW_ROW_GROUP_ROWS`` rows, sorted by the first
    column, so a filter on it reads few of them (the scan's stats count the files and column
    chunks read); the answer is still the zip read's."""
    import pyarrow.parquet as pq

    from omnitable.governance import views

    monkeypatch.setitem(views._VIEW_WRITE_SETTINGS, "parquet.block.row.count.limit", "10")
    t = _make(wh, "rowgroups")
    t.create_view("hot", ["a", "b"])
    _refresh(t, spark)
    root = Path(t.location.child_path(t.views()[0]["path"]))
    for file in root.glob("_view_batch_=*/*.parquet"):
        meta = pq.ParquetFile(file).metadata
        assert meta.num_rows == 50 and meta.num_row_groups == 5
    _check_python(t, ["a", "b"], "hot", where=pc.field("a") < 3)
    whole, few = t.scan(["a", "b"]).stats, t.scan(["a", "b"], where=pc.field("a") < 3).stats
    assert whole.view == few.view == "hot"
    assert (whole.files_opened, few.files_opened) == (2, 1)  # batch b2 holds no a < 3
    assert 0 < few.bytes_read < whole.bytes_read / 4  # 1 row group of 10
    assert t.scan(["a", "b"], where=pc.field("a") > 1000).stats.bytes_read == 0


def test_python_reads_of_a_view_with_nans_and_nulls_equal_the_zip(
    spark: Any, wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row groups of 3 rows that Spark wrote, sorted by a double column holding NULLs, NaNs,
    signed zeros and infinities: every filter, pruned by the row groups' statistics (Spark's
    Parquet writer counts NaN as the largest value there) or not, reads the zip's rows."""
    from omnitable.governance import views

    monkeypatch.setitem(views._VIEW_WRITE_SETTINGS, "parquet.block.row.count.limit", "3")
    t = wh.create_table("pynan", {"x": "double", "y": "bigint"})
    nan, inf = math.nan, math.inf
    xs = [None, nan, 0.0, -0.0, 1.5, nan, -inf, inf, 2.0, None, 0.25, nan, 7.0, -3.0]
    t.append(pa.table({"x": pa.array(xs, pa.float64()), "y": range(len(xs))}), "b1")
    t.append(pa.table({"x": pa.array([nan, 0.0, nan], pa.float64()), "y": [20, 21, 22]}), "b2")
    t.create_view("hot", ["x", "y"])
    assert _refresh(t, spark).outcome == "committed"
    x = pc.field("x")
    for where in (x < 0.5, x != 0.0, x == 0.0, ~(x == 0.0), x > 1e300, x >= -inf, x.is_nan(),
                  x != 0, (x > 0.1) & (pc.field("y") < 9), x.is_null() | (x > 5.0)):  # fmt: skip
        _check_python(t, ["x", "y"], "hot", where=where)
    import pyarrow.parquet as pq

    root = Path(t.location.child_path(t.views()[0]["path"]))
    maxes = []
    for file in root.glob("_view_batch_=*/*.parquet"):
        meta = pq.ParquetFile(file).metadata
        index = meta.schema.names.index("x")
        maxes += [
            meta.row_group(g).column(index).statistics.max for g in range(meta.num_row_groups)
        ]
    assert any(m != m for m in maxes)  # NaN as the largest value
    whole = t.scan(["x", "y"]).stats.bytes_read
    assert 0 < t.scan(["x", "y"], where=x > 1e300).stats.bytes_read < whole  # some groups pruned


def test_a_view_led_by_a_map_column_sorts_by_the_next_orderable_one(
    spark: Any, wh: omnitable.Warehouse
) -> None:
    """Spark cannot order a map: a view declared with a map column first sorts each batch by its
    next column instead (here ``a``), and reads still equal the zip's."""
    import pyarrow.parquet as pq

    t = wh.create_table("pymap", {"m": "map<string,int>", "a": "bigint"})
    maps = pa.array([[("k", i)] for i in range(5)], t.schema.field("m").type)
    t.append(pa.table({"m": maps, "a": [3, 1, 4, 0, 5]}), "b1")
    t.create_view("hot", ["m", "a"])
    assert _refresh(t, spark).outcome == "committed"
    root = Path(t.location.child_path(t.views()[0]["path"]))
    (file,) = root.glob("_view_batch_=*/*.parquet")
    assert pq.read_table(file, columns=["a"]).column("a").to_pylist() == [0, 1, 3, 4, 5]
    _check_python(t, ["m", "a"], "hot", where=pc.field("a") > 0)


class _FlakyConf:
    """A session's conf whose first unset of ``key`` fails (a Connect call that times out)."""

    def __init__(self, conf: Any, key: str) -> None:
        self._conf, self._fail = conf, {key}

    def get(self, key: str, default: Any = None) -> Any:
        return self._conf.get(key, default)

    def set(self, key: str, value: str) -> None:
        self._conf.set(key, value)

    def unset(self, key: str) -> None:
        if key in self._fail:
            self._fail.discard(key)
            raise RuntimeError(f"unset {key} timed out")
        self._conf.unset(key)


class _Flaky:
    """The real session seen through :class:`_FlakyConf`."""

    def __init__(self, spark: Any, key: str) -> None:
        self.conf = _FlakyConf(spark.conf, key)


def test_a_failed_restore_is_reported_and_retried_by_the_next_block(spark: Any) -> None:
    """A restore that fails leaves the setting behind and says so (raised, or logged when the
    block itself raised, whose error then stands); the next block on the session records the
    session's own value, not the leftover, and puts it back."""
    from omnitable.spark.scoped_conf import session_settings

    key = "spark.omnitable.test.flaky"
    session = _Flaky(spark, key)
    with (
        pytest.raises(RuntimeError, match="could not restore"),
        session_settings(session, {key: "1"}),
    ):
        pass
    assert spark.conf.get(key) == "1"  # left behind
    with session_settings(session, {key: "2"}):
        assert spark.conf.get(key) == "2"
    assert spark.conf.get(key, None) is None  # the session's own state is back

    session = _Flaky(spark, key)
    with pytest.raises(KeyError, match="the write failed"), session_settings(session, {key: "1"}):
        raise KeyError("the write failed")
    with session_settings(session, {key: "3"}):
        pass
    assert spark.conf.get(key, None) is None
