"""Metadata tables in Spark SQL (docs/spark.md, "Metadata tables"): ``omnitable.<table>.history``,
``.batches``, ``.fragments``, ``.files``, ``.features``, ``.lineage``, ``.status``, ``.errors``,
``.runs`` and ``.refs`` hold, row by row, what the Python API reports for the same table, at the
head of main, at ``VERSION AS OF <n>`` and on a branch or tag (``VERSION AS OF '<ref>'``).

One warehouse per backend for the module (``shared_warehouse``): the table ``web`` is built once
in it and only read by the tests that take it; the other tests make tables of their own names."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections import Counter
from typing import Any

import omt_metadata_features as feats
import pyarrow as pa
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

NAMES = [
    "history",
    "batches",
    "fragments",
    "files",
    "features",
    "lineage",
    "status",
    "errors",
    "runs",
    "refs",
]


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse (catalogs can be added to a live session)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def micros(iso: str | None) -> int | None:
    """A catalog time (ISO-8601 UTC text) as epoch microseconds (what ``unix_micros`` gives)."""
    if iso is None:
        return None
    at = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    return (at - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)) // dt.timedelta(microseconds=1)


def sql(spark: Any, query: str) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in spark.sql(query).collect()]


@pytest.fixture(scope="module")
def built() -> dict[str, dict[str, Any]]:
    """``web`` of each of the module's warehouses, by warehouse uri."""
    return {}


@pytest.fixture
def web(spark: Any, wh: omnitable.Warehouse, built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``_build_web`` in the module's warehouse of the backend, once (the tests only read it)."""
    if wh.uri not in built:
        built[wh.uri] = _build_web(spark, wh)
    return built[wh.uri]


def _build_web(spark: Any, wh: omnitable.Warehouse) -> dict[str, Any]:
    """Table ``web``: appends b1 (two fragments, two records failing ``shout``) and b2, a SQL
    feature and a pandas feature registered and backfilled, then b3 (not backfilled), a delete,
    tag ``t1`` (with a retention), branch ``audit`` with its own batch b4 and a delete of its
    own, and tag ``t0`` on an early version. Returns the table and the versions the test reads."""
    t = wh.create_table("web", {"text": "string", "lang": "string"})
    texts = ["alpha", "RAISE beta", "gamma", "delta", "RAISE eps", "zeta"]
    t.append(pa.table({"text": texts, "lang": ["en", "de"] * 3}), "b1", target_fragment_rows=3)
    t.append(pa.table({"text": ["eta", "theta"], "lang": ["en", "en"]}), "b2")
    early = t.version
    t.register(omnitable.sql_feature("n_len", "length(text)", "int", "1"))
    t.backfill("n_len").run(spark)
    t.register(feats.shout)
    t.backfill("shout").run(spark, max_error_ratio=0.5)
    t.append(pa.table({"text": ["iota"], "lang": ["xx"]}), "b3")
    ids = t.read(columns=[ROW_ID]).column(ROW_ID).to_pylist()
    t.delete(ids=[ids[0]])
    t.create_tag("t1", max_age=3600)
    t.create_tag("t0", early)
    audit = t.create_branch("audit")
    audit.append(pa.table({"text": ["kappa"], "lang": ["en"]}), "b4")
    audit.delete(ids=[ids[1]])  # replaces main's deletion vector on audit only (a removal)
    return {"table": t, "early": early}


def test_history_batches_and_refs_equal_the_python_api(
    spark: Any, catalog: str, web: dict[str, Any]
) -> None:
    t: omnitable.Table = web["table"]
    name = f"{catalog}.web"

    def history(suffix: str = "") -> list[tuple[Any, ...]]:
        rows = sql(
            spark,
            "SELECT version, parent_version, branch, op, run_id, summary, "
            f"unix_micros(committed_at) AS at, expired FROM {name}.history {suffix}",
        )
        return [tuple(r.values()) for r in rows]

    def expected_history(table: omnitable.Table, upto: int | None = None) -> list[tuple[Any, ...]]:
        return [
            (
                c.version,
                c.parent_version,
                c.branch,
                c.op,
                c.run_id,
                c.summary_json,
                micros(c.time),
                c.expired,
            )
            for c in table.history()
            if upto is None or c.version <= upto
        ]

    assert history() == expected_history(t)
    assert history(f"VERSION AS OF {web['early']}") == expected_history(t, web["early"])
    assert history("VERSION AS OF 'audit'") == expected_history(t.branch("audit"))
    assert history("VERSION AS OF 'audit'")[0][0] == t.branch("audit").version

    def batches(suffix: str = "") -> list[tuple[Any, ...]]:
        q = f"SELECT name, rows, fragments, unix_micros(created_at) FROM {name}.batches {suffix}"
        return [tuple(r.values()) for r in sql(spark, q)]

    def expected_batches(infos: list[Any]) -> list[tuple[Any, ...]]:
        return [(b.name, b.rows, b.fragments, micros(b.created)) for b in infos]

    assert batches() == expected_batches(t.batches())
    assert batches()[0][1] == 5  # b1 lost its first row to the delete
    assert batches(f"VERSION AS OF {web['early']}") == expected_batches(t.batches(web["early"]))
    assert batches("VERSION AS OF 'audit'") == expected_batches(t.branch("audit").batches())
    assert [b[0] for b in batches("VERSION AS OF 't0'")] == ["b1", "b2"]

    refs = sql(
        spark,
        "SELECT name, kind, version, parent_branch, fork_version, unix_micros(created_at) AS c, "
        f"max_age_s, unix_micros(expires_at) AS e FROM {name}.refs",
    )
    expected = [
        {
            "name": r.name,
            "kind": r.kind,
            "version": r.version,
            "parent_branch": r.parent,
            "fork_version": r.fork_version,
            "c": micros(r.created_at),
            "max_age_s": r.max_age_s,
            "e": micros(r.expires_at),
        }
        for r in [*t.branches(), *t.tags()]
    ]
    assert refs == expected
    assert {r["name"] for r in refs} == {"main", "audit", "t0", "t1"}


def _fragments(snap: Any) -> list[tuple[Any, ...]]:
    """The snapshot's fragments as rows of ``.fragments``; ``seq`` is the fragment's place in its
    batch (the Python snapshot orders fragments by it without loading it)."""
    out, seen = [], Counter[str]()
    for f in snap.fragments:
        live = snap.live_rows(f)
        out.append(
            (f.fragment_id, f.batch_name, f.batch_id, seen[f.batch_id], f.row_count,
             f.row_count - live, live, f.path, f.added_version)
        )  # fmt: skip
        seen[f.batch_id] += 1
    return out


def _files(snap: Any) -> list[tuple[Any, ...]]:
    names = {c.column_id: c.name for c in snap.columns}
    batch_of = {f.fragment_id: f.batch_name for f in snap.fragments}
    out = []
    for frag, files in snap.files_by_fragment.items():
        for f in files:
            ids = sorted(f.columns)
            versions = {
                names[i]: c.feature_version for i, c in f.columns.items() if c.feature_version
            }
            out.append(
                (f.file_id, frag, batch_of[frag], f.group_name, f.path, f.row_count, f.size_bytes,
                 f.added_version, ids, [names[i] for i in ids], versions)
            )  # fmt: skip
    return sorted(out)


def test_fragments_and_files_equal_the_snapshot(
    spark: Any, catalog: str, web: dict[str, Any]
) -> None:
    t: omnitable.Table = web["table"]
    name = f"{catalog}.web"
    cols = (
        "file_id, fragment_id, batch, group_name, path, row_count, size_bytes, added_version, "
        "column_ids, columns, feature_versions"
    )
    for suffix, snap in [
        ("", t.snapshot()),
        (f"VERSION AS OF {web['early']}", t.snapshot(version=web["early"])),
        ("VERSION AS OF 'audit'", t.snapshot(branch="audit")),
        ("VERSION AS OF 't1'", t.snapshot(tag="t1")),
    ]:
        fragments = sql(spark, f"SELECT * FROM {name}.fragments {suffix}")
        assert [tuple(r.values()) for r in fragments] == _fragments(snap), suffix
        files = sql(spark, f"SELECT {cols} FROM {name}.files {suffix} ORDER BY file_id")
        assert [tuple(r.values()) for r in files] == _files(snap), suffix
    deleted = sql(spark, f"SELECT deleted_rows FROM {name}.fragments WHERE deleted_rows > 0")
    assert deleted == [{"deleted_rows": 1}]
    on_audit = (
        f"SELECT deleted_rows FROM {name}.fragments VERSION AS OF 'audit' WHERE deleted_rows > 0"
    )
    assert sql(spark, on_audit) == [{"deleted_rows": 2}]
    shout = sql(
        spark, f"SELECT count(*) AS n FROM {name}.files WHERE array_contains(columns, 'shout')"
    )
    assert shout == [{"n": 3}]  # one per fragment of b1 and b2; b3 is not backfilled


PAGE_SIZE = "spark.omnitable.metadata.page_size"


def test_files_page_through_the_catalog(spark: Any, catalog: str, wh: omnitable.Warehouse) -> None:
    """More fragments and files than fit one page of the catalog listing: 120 fragments in pages of
    50 (the session's ``spark.omnitable.metadata.page_size``; 10,000 by default), so the last
    page is partial and two keyset pages follow the first."""
    t = wh.create_table(f"wide_{uuid.uuid4().hex[:8]}", {"x": "int"})
    t.append(pa.table({"x": list(range(120))}), "b1", target_fragment_rows=1)
    spark.conf.set(PAGE_SIZE, "50")
    try:
        snap = t.snapshot()
        fragments = sql(spark, f"SELECT * FROM {catalog}.{t.name}.fragments")
        assert len(fragments) == 120 and len({r["fragment_id"] for r in fragments}) == 120
        assert [tuple(r.values()) for r in fragments] == _fragments(snap)  # in table order
        cols = (
            "file_id, fragment_id, batch, group_name, path, row_count, size_bytes, "
            "added_version, column_ids, columns, feature_versions"
        )
        files = sql(spark, f"SELECT {cols} FROM {catalog}.{t.name}.files ORDER BY file_id")
        assert len(files) == 120 and [tuple(r.values()) for r in files] == _files(snap)
        spark.conf.set(PAGE_SIZE, "0")  # the setting is read (and checked) when a scan is built
        with pytest.raises(Exception, match=f"{PAGE_SIZE}.*expected an integer in 1"):
            spark.sql(f"SELECT * FROM {catalog}.{t.name}.files").collect()
    finally:
        spark.conf.unset(PAGE_SIZE)


def test_features_lineage_and_status_equal_the_python_api(
    spark: Any, catalog: str, web: dict[str, Any]
) -> None:
    t: omnitable.Table = web["table"]
    name = f"{catalog}.web"
    features = sql(
        spark,
        f"SELECT name, version, kind, inputs, outputs, fingerprint, definition FROM {name}.features",
    )
    assert [(r["name"], r["version"], r["kind"], r["inputs"], r["outputs"], r["fingerprint"])
            for r in features] == [
        (f.name, f.version, f.kind, list(f.inputs), dict(f.outputs), f.code_fingerprint)
        for f in sorted(t.features(), key=lambda f: f.name)
    ]  # fmt: skip
    assert [json.loads(r["definition"])["name"] for r in features] == ["n_len", "shout"]

    for column in ["n_len", "shout"]:
        got = sql(spark, f"SELECT * FROM {name}.lineage WHERE column = '{column}'")
        expected = [
            {
                "column": r.column,
                "batch": r.batch,
                "fragment_id": r.fragment_id,
                "file": r.file,
                "version": r.version,
                "feature": r.feature,
                "feature_version": r.feature_version,
                "inputs": r.inputs,
                "run_id": r.run_id,
                "engine": r.engine,
            }
            for r in t.lineage(column)
        ]
        decoded = [{**r, "inputs": json.loads(r["inputs"])} for r in got]
        assert [{k: v for k, v in r.items() if k != "error_count"} for r in decoded] == expected
        assert len(got) == 3

    errors = sql(spark, f"SELECT sum(error_count) AS n FROM {name}.lineage WHERE column = 'shout'")
    assert errors == [{"n": 2}]

    grid = t.status()
    status = sql(spark, f"SELECT * FROM {name}.status")
    assert [tuple(r.values()) for r in status] == [
        (b, c, grid.feature_of[c], grid.cells[(b, c)], grid.errors.get((b, c), 0))
        for b in grid.batches
        for c in grid.columns
    ]
    cells = {(r["batch"], r["column"]): (r["state"], r["errors"]) for r in status}
    assert cells[("b1", "shout")] == ("done", 2)
    assert cells[("b3", "n_len")] == ("missing", 0)
    early = sql(spark, f"SELECT * FROM {name}.status VERSION AS OF {web['early']}")
    assert early == []  # no feature was registered yet


def test_errors_and_runs_equal_the_python_api(
    spark: Any, catalog: str, web: dict[str, Any]
) -> None:
    t: omnitable.Table = web["table"]
    name = f"{catalog}.web"
    got = spark.sql(f"SELECT * FROM {name}.errors").collect()
    expected = t.errors(spark=spark).collect()
    assert sorted(map(tuple, got)) == sorted(map(tuple, expected))
    assert spark.sql(f"SELECT * FROM {name}.errors").columns == t.errors(spark=spark).columns
    assert sorted(r.message for r in got) == [
        "cannot shout 'RAISE beta'",
        "cannot shout 'RAISE eps'",
    ]
    assert spark.sql(f"SELECT * FROM {name}.errors VERSION AS OF {web['early']}").count() == 0

    runs = sql(
        spark,
        "SELECT run_id, kind, status, plan, metrics, message, unix_micros(started_at) AS s, "
        f"unix_micros(finished_at) AS f, host, pid FROM {name}.runs",
    )
    expected_runs = [
        {
            "run_id": r["run_id"],
            "kind": r["kind"],
            "status": r["status"],
            "plan": r["plan"],
            "metrics": r["metrics"],
            "message": r["message"],
            "s": micros(r["started_at"]),
            "f": micros(r["finished_at"]),
            "host": r["host"],
            "pid": r["pid"],
        }
        for r in t.runs()
    ]
    decoded = [
        {**r, "plan": json.loads(r["plan"] or "{}"), "metrics": json.loads(r["metrics"] or "{}")}
        for r in runs
    ]
    assert decoded == expected_runs
    assert {r["kind"] for r in runs} >= {"backfill"}


def test_a_table_without_error_table_has_no_errors(
    spark: Any, catalog: str, wh: omnitable.Warehouse
) -> None:
    t = wh.create_table(f"plain_{uuid.uuid4().hex[:8]}", {"x": "int"})
    t.append(pa.table({"x": [1, 2]}), "b1")
    plain = f"{catalog}.{t.name}"
    assert spark.sql(f"SELECT * FROM {plain}.errors").count() == 0
    assert sql(spark, f"SELECT * FROM {plain}.status") == []
    assert sql(spark, f"SELECT * FROM {plain}.lineage") == []


def test_unknown_metadata_table_lists_the_valid_names(
    spark: Any, catalog: str, wh: omnitable.Warehouse
) -> None:
    t = wh.create_table(f"plain_{uuid.uuid4().hex[:8]}", {"x": "int"})
    plain = f"{catalog}.{t.name}"
    with pytest.raises(Exception, match="is not a metadata table") as err:
        spark.sql(f"SELECT * FROM {plain}.snapshots").collect()
    for n in NAMES:
        assert n in str(err.value)
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        spark.sql(f"SELECT * FROM {catalog}.nosuch.history").collect()
    # the metadata tables are tables of the catalog with their documented columns
    described = spark.sql(f"DESCRIBE TABLE {plain}.history").collect()
    assert [r.col_name for r in described][:3] == ["version", "parent_version", "branch"]
    assert spark.sql(f"SELECT * FROM {plain}.refs").collect()[0].name == "main"
