"""``CALL <catalog>.system.backfill(...)`` (docs/spark.md, "Procedures"): SQL features computed
entirely in the JVM, planned as Python plans (missing or stale fragments only, SQL features they
read first), with the values, files, lineage and commits of Python's backfill; a pandas feature
is refused (values that do not convert: test_procedures_backfill_errors.py); a concurrent recompute of an input conflicts and a later call plans again; a backfill
killed before or during its commit leaves nothing visible and no files."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import omt_metadata_features as feats
import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.spark.session import CATALOG_CLASS

pytestmark = pytest.mark.spark

FAILPOINT_CONF = "spark.omnitable.test.failpoint"
DATA = pa.table(
    {"url": ["a", "bb", "ccc", None], "Title": ["x", "Yy", "", "zzz"], "n": [1, 2, 3, 4]}
)
MORE = pa.table({"url": ["dddd", "e"], "Title": ["q", None], "n": [5, None]})
FEATURES = [
    ("n_len", "LENGTH(url) + n", "bigint", "1"),
    ("label", "concat(`Title`, '-', url)", "string", "1"),
    ("twice", "n_len * 2", "double", "1"),  # reads another SQL feature's output
]


def _table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"url": "string", "Title": "string", "n": "int"})
    t.append(DATA, "b1")
    t.append(MORE, "b2")
    for f, expr, typ, version in FEATURES:
        t.register(omnitable.sql_feature(f, expr, typ, version))
    return t


def _backfill(spark: Any, catalog: str, features: str, table: str = "web") -> list[tuple[Any, ...]]:
    rows = spark.sql(f"CALL {catalog}.system.backfill('{table}', '{features}')").collect()
    return [(r["feature"], r["fragments"], r["rows"], r["version"]) for r in rows]


def _error(spark: Any, sql: str) -> str:
    with pytest.raises(Exception) as info:
        spark.sql(sql).collect()
    return str(info.value)


def _facts(wh: omnitable.Warehouse, table: str) -> dict[str, Any]:
    """What a backfill commits, without ids and times: commits, lineage, file groups, runs."""
    with wh.catalog.store.read() as conn:
        tid = conn.execute(text("SELECT table_id FROM tables WHERE name = :n"), {"n": table}).one()[
            0
        ]
        q = {"t": tid}
        commits = conn.execute(
            text(
                "SELECT version, parent_version, branch, op, summary, run_id IS NOT NULL FROM "
                "commits WHERE table_id = :t ORDER BY version"
            ),
            q,
        ).all()
        lineage = conn.execute(
            text(
                "SELECT l.column_id, l.feature, l.feature_version, l.engine, l.error_count, "
                "fi.added_version, fi.group_name, fi.removed_version, fi.run_id = l.run_id, "
                "l.inputs "
                "FROM lineage l JOIN files fi ON fi.table_id = l.table_id AND fi.file_id = "
                "l.file_id WHERE l.table_id = :t"
            ),
            q,
        ).all()
        runs = conn.execute(
            text("SELECT kind, status FROM runs WHERE table_id = :t ORDER BY started_at"), q
        ).all()
        files = conn.execute(text("SELECT COUNT(*) FROM files WHERE table_id = :t"), q).scalar_one()
    return {
        "commits": [tuple(r) for r in commits],
        "lineage": sorted((*r[:-1], _read_set(r[-1])) for r in lineage),
        "runs": [tuple(r) for r in runs],
        "files": files,
    }


def _read_set(inputs: str) -> tuple[tuple[str, bool, int | None], ...]:
    """A lineage row's inputs without file ids: (column, had a file, its version)."""
    return tuple((i["column"], i["file_id"] is not None, i["version"]) for i in json.loads(inputs))


def _values(t: omnitable.Table) -> dict[str, list[Any]]:
    data = t.read().sort_by("_ai_unique_id_")
    return {c: data.column(c).to_pylist() for c in ("n_len", "label", "twice")}


def _states(t: omnitable.Table) -> dict[tuple[str, str], str]:
    grid = t.status()
    return {(b, c): grid.state(b, c) for b in grid.batches for c in grid.columns}


def _parquet_files(root: Path) -> set[Path]:
    """Every data file under the test's directory (the warehouse's data lives there)."""
    return set(root.rglob("*.parquet"))


def test_backfill_equals_pythons_and_plans_only_what_is_missing_or_stale(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py, jvm = _table(wh, "py"), _table(wh, "web")
    py.delete(ids=[1])  # deleted rows stay NULL, in both
    jvm.delete(ids=[1])
    py.backfill(["twice"]).run(spark)
    got = _backfill(spark, catalog, "twice")  # n_len first: twice reads it
    head = max(c[0] for c in _facts(wh, "web")["commits"])
    assert got == [("n_len@1", 2, 6, head - 1), ("twice@1", 2, 6, head)]
    assert _values(jvm) == _values(py)
    assert _values(jvm)["twice"] == [4.0, 12.0, None, 18.0, None]  # row 1 deleted
    assert _facts(wh, "web") == _facts(wh, "py")
    assert _states(jvm) == _states(py)
    assert {s for (_, c), s in _states(jvm).items() if c != "label"} == {"done"}

    assert _backfill(spark, catalog, "twice") == []  # nothing missing or stale: nothing to do
    # a new batch and a new version of n_len: label (never computed), n_len (stale) and twice
    # (its input is recomputed) in every fragment
    for t in (py, jvm):
        t.append(pa.table({"url": ["ff"], "Title": ["t"], "n": [7]}), "b3")
        t.register(omnitable.sql_feature("n_len", "length(url) * n", "bigint", "2"))
    py.backfill(["label"]).run(spark)
    py.backfill(["twice"]).run(spark)
    assert [g[:3] for g in _backfill(spark, catalog, "label")] == [("label@1", 3, 7)]
    assert [g[:3] for g in _backfill(spark, catalog, "twice")] == [
        ("n_len@2", 3, 7),
        ("twice@1", 3, 7),
    ]
    assert _values(jvm) == _values(py)
    assert _facts(wh, "web") == _facts(wh, "py")
    assert set(_states(jvm).values()) == {"done"}
    for t in (py, jvm):  # only the new batch's fragment is missing
        t.append(pa.table({"url": ["g"], "Title": ["u"], "n": [1]}), "b4")
    py.backfill(["label"]).run(spark)
    assert [g[:3] for g in _backfill(spark, catalog, "label")] == [("label@1", 1, 1)]
    assert _values(jvm) == _values(py) and _facts(wh, "web") == _facts(wh, "py")
    assert _states(jvm) == _states(py) and _states(jvm)[("b4", "label")] == "done"


def test_named_arguments_on_a_branch(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = _table(wh, "web")
    t.create_branch("dev")
    rows = spark.sql(
        f"CALL {catalog}.system.backfill(features => ' label ,n_len', branch => 'dev', "
        "table => 'web')"
    ).collect()
    assert sorted((r["feature"], r["fragments"]) for r in rows) == [
        ("label@1", 2),
        ("n_len@1", 2),
    ]
    dev = t.branch("dev")
    grid = dev.status()
    assert {grid.state(b, c) for b in grid.batches for c in ("label", "n_len")} == {"done"}
    assert dev.read().sort_by("_ai_unique_id_").column("n_len").to_pylist() == [
        2,
        4,
        6,
        None,
        9,
        None,
    ]
    assert set(_states(t).values()) == {"missing"}  # main untouched


def test_checkpoint_fragments_commit_as_pythons_checkpoints_do(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """``checkpoint_fragments => 1``: one commit per fragment of each step, as Python's
    ``run(checkpoint_fragments=1)``; the result rows sum a feature's chunks."""
    py, jvm = _table(wh, "py"), _table(wh, "web")
    py.backfill(["twice"]).run(spark, checkpoint_fragments=1)
    before = len(jvm.history())
    rows = spark.sql(
        f"CALL {catalog}.system.backfill(table => 'web', features => 'twice', "
        "checkpoint_fragments => 1)"
    ).collect()
    got = [(r["feature"], r["fragments"], r["rows"], r["version"]) for r in rows]
    assert len(jvm.history()) == before + 4  # 2 steps x 2 fragments
    assert got == [("n_len@1", 2, 6, before + 1), ("twice@1", 2, 6, before + 3)]
    assert _values(jvm) == _values(py)
    assert _facts(wh, "web") == _facts(wh, "py")
    for t in (py, jvm):
        plans = [r["plan"] for r in t.runs() if r["kind"] == "backfill"]
        assert [p["options"]["checkpoint_fragments"] for p in plans] == [1], plans
        assert [p["steps"] for p in plans] == [[["n_len@1"], ["twice@1"]]]
    # the run's plan and metrics are JSON of lists and objects (they were beans of Scala collections)
    assert jvm.runs()[0]["metrics"]["versions"] == list(range(before, before + 4))
    for bad in ("0", "-2"):
        msg = _error(
            spark,
            f"CALL {catalog}.system.backfill(table => 'web', features => 'label', "
            f"checkpoint_fragments => {bad})",
        )
        assert "checkpoint_fragments" in msg and "positive" in msg
    assert len(jvm.history()) == before + 4  # nothing committed


def test_refusals(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("words", {"text": "string"})
    t.append(pa.table({"text": ["a", "b"]}), "b1")
    t.register(feats.shout)
    t.register(omnitable.sql_feature("loud", "concat(shout, '!')", "string", "1"))
    msg = _error(spark, f"CALL {catalog}.system.backfill('words', 'loud')")  # needs shout
    assert "shout@1" in msg and "Table.backfill" in msg and "pandas feature" in msg
    assert "shout@1" in _error(spark, f"CALL {catalog}.system.backfill('words', 'shout')")
    assert len(t.history()) == 4  # nothing committed
    t.register(omnitable.sql_feature("num", "text", "int", "1"))  # 'a' is no int
    msg = _error(spark, f"CALL {catalog}.system.backfill('words', 'num')")
    assert "OMNITABLE_ERROR_RATIO_EXCEEDED" in msg and "2 of 2 records failed" in msg
    assert len(t.history()) == 5 and t.runs()[0]["status"] == "aborted"
    _table(wh, "web")
    msg = _error(spark, f"CALL {catalog}.system.backfill('web', 'nope')")
    assert "no registered feature or output column of that name" in msg
    assert "registered features: label, n_len, twice" in msg


def test_batches_limit_the_backfill_as_pythons_batches_do(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py, jvm = _table(wh, "py"), _table(wh, "web")
    py.backfill(["n_len"], batches=["b2"]).run(spark)
    rows = spark.sql(
        f"CALL {catalog}.system.backfill(table => 'web', features => 'n_len', batches => 'b2')"
    ).collect()
    assert [(r["feature"], r["fragments"], r["rows"]) for r in rows] == [("n_len@1", 1, 2)]
    assert _states(jvm) == _states(py)
    assert _states(jvm)[("b1", "n_len")] != "done" and _states(jvm)[("b2", "n_len")] == "done"
    assert _values(jvm)["n_len"] == _values(py)["n_len"] == [None] * 4 + [9, None]
    assert _facts(wh, "web")["lineage"] == _facts(wh, "py")["lineage"]
    versions = len(jvm.history())
    with pytest.raises(omnitable.NotFoundError) as py_error:
        py.backfill(["n_len"], batches=["b1", "nope"])
    msg = _error(spark, f"CALL {catalog}.system.backfill('web', 'n_len', 'main', 'b1, nope')")
    assert "OMNITABLE_NOT_FOUND" in msg
    assert str(py_error.value).replace("'py'", "'web'").split(" at version")[0] in msg
    msg = _error(spark, f"CALL {catalog}.system.backfill('web', 'n_len', 'main', 'b1,')")
    assert "give append names separated by commas" in msg
    assert len(jvm.history()) == versions  # nothing committed


def _paused(spark: Any, gate: Path, sql: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``sql`` in a thread until the JVM reaches backfill.before_commit."""
    spark.conf.set(FAILPOINT_CONF, f"backfill.before_commit=pause:{gate}")
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["rows"] = spark.sql(sql).collect()
        except Exception as exc:  # the conflict, raised through py4j
            out["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    while not (gate / "backfill.before_commit.reached").exists():
        assert thread.is_alive(), out
        thread.join(0.05)
    spark.conf.unset(FAILPOINT_CONF)
    return thread, out


def _release(gate: Path, thread: threading.Thread) -> None:
    (gate / "backfill.before_commit.go").touch()
    thread.join(120)
    for f in gate.iterdir():
        f.unlink()


def test_a_concurrent_recompute_conflicts_and_the_next_call_plans_again(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh, "web")
    gate = tmp_path / "gate"
    gate.mkdir()
    _backfill(spark, catalog, "n_len")
    files = _parquet_files(tmp_path)

    # Python recomputes the input n_len (a new version) while the JVM computes twice
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.backfill('web', 'twice')")
    t.register(omnitable.sql_feature("n_len", "length(url) * n", "bigint", "2"))
    t.backfill(["n_len"]).run(spark)
    _release(gate, thread)
    msg = str(out["error"])
    assert "OMNITABLE_COMMIT_CONFLICT" in msg
    assert "its input column(s) n_len were recomputed in 2 fragment(s)" in msg
    assert all(s == "missing" for (_, c), s in _states(t).items() if c == "twice")
    assert (
        len(_parquet_files(tmp_path) - files) == 2
    )  # Python's n_len files only: the JVM's deleted

    # the same feature backfilled by Python meanwhile: the same cells were written
    thread, out = _paused(spark, gate, f"CALL {catalog}.system.backfill('web', 'label')")
    t.backfill(["label"]).run(spark)
    _release(gate, thread)
    assert "wrote column(s) label in 2 of the same fragment(s)" in str(out["error"])

    # the next call plans again on the new head
    assert [g[:3] for g in _backfill(spark, catalog, "twice")] == [("twice@1", 2, 6)]
    assert _values(t)["twice"] == [2.0, 8.0, 18.0, None, 40.0, None]
    assert set(_states(t).values()) == {"done"}


def test_python_backfill_loses_to_a_jvm_one(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = _table(wh, "web")
    result = race(
        "backfill.before_commit",
        lambda: wh.table("web").backfill(["label"]).run(spark),
        lambda: _backfill(spark, catalog, "label"),
    )
    assert "wrote column(s) label" in str(result["error"])
    assert all(s == "done" for (_, c), s in _states(t).items() if c == "label")


def test_a_backfill_killed_before_or_during_its_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh, "web")
    before, files = _facts(wh, "web"), _parquet_files(tmp_path)
    for point in ("backfill.before_commit", "commit.mid_insert", "commit.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        assert point in _error(spark, f"CALL {catalog}.system.backfill('web', 'label')")
    spark.conf.unset(FAILPOINT_CONF)
    after = _facts(wh, "web")
    assert after["runs"] == before["runs"] + [("backfill", "failed")] * 3
    assert {**after, "runs": []} == {**before, "runs": []}
    assert _parquet_files(tmp_path) == files
    assert set(_states(t).values()) == {"missing"}
    # killed right after its commit: the commit and its files stay
    spark.conf.set(FAILPOINT_CONF, "backfill.after_commit=raise")
    assert "backfill.after_commit" in _error(
        spark, f"CALL {catalog}.system.backfill('web', 'label')"
    )
    spark.conf.unset(FAILPOINT_CONF)
    assert all(s == "done" for (_, c), s in _states(t).items() if c == "label")
    assert _values(t)["label"] == ["x-a", "Yy-bb", "-ccc", None, "q-dddd", None]
    assert len(_parquet_files(tmp_path) - files) == 2


def _as_localhost(uri: str) -> str:
    """``uri`` with its host 127.0.0.1 written ``localhost``: the same server (loopback), named so
    that the session's static configuration does not name it."""
    assert "@127.0.0.1:" in uri, f"the test server is expected at 127.0.0.1: {uri}"
    return uri.replace("@127.0.0.1:", "@localhost:", 1)


@pytest.mark.postgres
def test_a_catalog_bound_at_run_time_backfills_a_server_with_an_env_password(
    spark: Any, pg_databases: Any, tmp_path: Path
) -> None:
    """A catalog added with ``spark.conf.set`` on a PostgreSQL warehouse whose password is
    ``env:NAME`` reads its fragments through its own catalog, not a ``warehouse`` read option
    (which the session's static configuration would have to name)."""
    wh = omnitable.connect(pg_databases.create(), root=str(tmp_path / "data"))
    try:
        uri = _as_localhost(wh.uri)
        assert ":env:" in uri
        t = _table(wh, "web")
        py = _table(wh, "py")
        # the precondition: a read option naming this server is refused
        with pytest.raises(Exception, match="OMNITABLE_CREDENTIAL_NOT_ALLOWED"):
            spark.read.format("omnitable").option("warehouse", uri).load("web").collect()
        name = f"omw_rt_{tmp_path.name[-8:]}".replace("-", "_")
        spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
        spark.conf.set(f"spark.sql.catalog.{name}.warehouse", uri)
        try:
            assert [g[:3] for g in _backfill(spark, name, "twice")] == [
                ("n_len@1", 2, 6),
                ("twice@1", 2, 6),
            ]
            py.backfill(["twice"]).run(spark)
            assert _values(t) == _values(py)
        finally:
            spark.conf.unset(f"spark.sql.catalog.{name}.warehouse")
    finally:
        wh.close()
