"""``CALL <catalog>.system.register_feature(...)`` (docs/spark.md, "Registering SQL features"):
the JVM writes the catalog rows Python's ``Table.register(sql_feature(...))`` writes, Python
reads and backfills the feature as its own, the JVM refuses what Python refuses with Python's
messages, and its ``register`` commit races Python commits with commit.py's rules; killed
mid-commit, it leaves nothing visible."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.exceptions import OmniTableError

pytestmark = pytest.mark.spark

FAILPOINT_CONF = "spark.omnitable.test.failpoint"
DATA = pa.table(
    {"url": ["a", "bb", "ccc", None], "Title": ["x", "Yy", "", "zzz"], "n": [1, 2, 3, 4]}
)


def _table(wh: omnitable.Warehouse, name: str) -> omnitable.Table:
    t = wh.create_table(name, {"url": "string", "Title": "string", "n": "int"})
    t.append(DATA, "b1")
    return t


def _rows(wh: omnitable.Warehouse, table: str) -> dict[str, Any]:
    """The catalog rows registering writes, without table ids and times."""
    with wh.catalog.store.read() as conn:
        tid = conn.execute(text("SELECT table_id FROM tables WHERE name = :n"), {"n": table}).one()[
            0
        ]
        q = {"t": tid}
        features = conn.execute(
            text(
                "SELECT name, version, kind, definition, fingerprint, registered_version, branch "
                "FROM features WHERE table_id = :t ORDER BY registered_version, name"
            ),
            q,
        ).all()
        columns = conn.execute(
            text(
                "SELECT column_id, name, physical_name, data_type, nullable, position, state, "
                "group_name, feature, branch, added_version, removed_version FROM columns "
                "WHERE table_id = :t ORDER BY column_id, added_version"
            ),
            q,
        ).all()
        commits = conn.execute(
            text(
                "SELECT version, parent_version, branch, op, summary FROM commits "
                "WHERE table_id = :t ORDER BY version"
            ),
            q,
        ).all()
        removals = conn.execute(
            text("SELECT kind, row_id, branch, version FROM removals WHERE table_id = :t"), q
        ).all()
        times_differ = conn.execute(  # a feature's registered_at is its commit's time
            text(
                "SELECT COUNT(*) FROM features f JOIN commits c ON c.table_id = f.table_id AND "
                "c.version = f.registered_version WHERE f.table_id = :t AND "
                "f.registered_at <> c.committed_at"
            ),
            q,
        ).scalar_one()
        counters = conn.execute(
            text("SELECT next_row_id, next_column_id FROM tables WHERE table_id = :t"), q
        ).one()
    return {
        "features": [tuple(r) for r in features],
        "columns": [tuple(r) for r in columns],
        "commits": [tuple(r) for r in commits],
        "removals": sorted(tuple(r) for r in removals),
        "counters": tuple(counters),
        "times_differ": times_differ,
    }


def _call(spark: Any, sql: str) -> Any:
    rows = spark.sql(sql).collect()
    assert len(rows) == 1
    return rows[0]


def _error(spark: Any, sql: str) -> str:
    with pytest.raises(Exception) as info:
        spark.sql(sql).collect()
    return str(info.value)


def _python_error(fn: Callable[[], Any]) -> str:
    with pytest.raises(OmniTableError) as info:
        fn()
    return str(info.value)


def _features(t: omnitable.Table) -> list[tuple[Any, ...]]:
    return [
        (f.name, f.version, f.kind, f.inputs, f.outputs, f.expr, f.code_fingerprint)
        for f in t.features()
    ]


def test_register_writes_the_rows_python_writes_and_python_backfills_it(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    py = _table(wh, "py")
    _table(wh, "jvm")
    steps = [
        ("n_len", "LENGTH(URL) + n", "bigint", "1"),  # case-insensitive inputs, in mention order
        ("label", "concat(`Title`, '-url-', url)", "string", "1"),  # quoted; literal skipped
        ("twice", "n_len * 2", "double", "1"),  # reads another feature's output
        ("n_len", "length(url) + n", "bigint", "2"),  # a new version supersedes
        ("twice", "n_len * 2", "bigint", "2"),  # a new output type: a new column replaces it
    ]
    for name, expr, typ, version in steps:
        v = py.register(omnitable.sql_feature(name, expr, typ, version))
        row = _call(
            spark,
            f"CALL {catalog}.system.register_feature('jvm', '{name}', \"{expr}\", '{typ}', "
            f"'{version}')",
        )
        assert row["table_version"] == v
        f = next(f for f in py.features() if f.name == name)
        assert (row["feature"], row["version"], tuple(row["inputs"]), row["output_type"]) == (
            name,
            version,
            f.inputs,
            f.outputs[name],
        )
    assert _rows(wh, "jvm") == _rows(wh, "py")
    assert [f[1:] for f in _features(wh.table("jvm"))] == [f[1:] for f in _features(py)]
    assert dict((f[0], f[3]) for f in _features(py))["label"] == ("Title", "url")

    # Python computes the JVM-registered features as its own
    for name in ("py", "jvm"):
        wh.table(name).backfill(["n_len", "label", "twice"]).run(spark)
    got = wh.table("jvm").read().sort_by("_ai_unique_id_")
    want = py.read().sort_by("_ai_unique_id_")
    for col in ("n_len", "label", "twice"):
        assert got.column(col).equals(want.column(col)), col
    assert want.column("twice").to_pylist() == [4, 8, 12, None]
    grid = wh.table("jvm").status()
    assert {c: grid.state("b1", c) for c in grid.columns} == {
        "n_len": "done",
        "label": "done",
        "twice": "done",
    }


def test_named_arguments_explicit_inputs_a_branch_and_the_same_version_again(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh, "web")
    t.create_branch("dev")
    call = (
        f"CALL {catalog}.system.register_feature(table => 'web', name => 'score', "
        "expression => 'n * 10', type => 'int', version => '1', inputs => ' n ', branch => 'dev')"
    )
    row = _call(spark, call)
    assert row["inputs"] == ["n"] and row["table_version"] is not None
    head = len(t.branch("dev").history())
    again = _call(spark, call)  # the same version again: nothing changes
    assert again["table_version"] is None and len(t.branch("dev").history()) == head
    assert t.features() == []  # main has none
    assert [f.id for f in t.branch("dev").features()] == ["score@1"]
    # Python agrees: the same version again is a no-op there too
    f = omnitable.sql_feature("score", "n * 10", "int", "1", inputs=["n"])
    assert t.branch("dev").register(f) is None


def test_refusals_carry_pythons_messages(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = _table(wh, "web")
    t.register(omnitable.sql_feature("f1", "n + 1", "int", "1"))
    cases = [
        ("f2", "1 + 1", "int", "1"),  # mentions no column
        ("f1", "n + 2", "int", "1"),  # version 1 registered with another expression
        ("url", "upper(Title)", "string", "1"),  # clashes with a raw column
        ("f3", "n", "int", ""),  # empty version
        ("_ai_x", "n", "int", "1"),  # reserved name
        ("f4", "   ", "int", "1"),  # empty expression
        ("f5", "n", "varchar(3)", "1"),  # not an OmniTable type
    ]
    for name, expr, typ, version in cases:
        expected = _python_error(
            lambda n=name, e=expr, ty=typ, v=version: t.register(  # type: ignore[misc]
                omnitable.sql_feature(n, e, ty, v)
            )
        )
        sql = (
            f"CALL {catalog}.system.register_feature('web', '{name}', '{expr}', '{typ}', "
            f"'{version}')"
        )
        msg = _error(spark, sql)
        if typ == "varchar(3)":  # the type's parser differs: the start of the message agrees
            expected = expected.split(":")[0]
        assert expected in msg, (name, msg)
    unknown = _python_error(
        lambda: t.register(omnitable.sql_feature("f6", "n", "int", "1", inputs=["nope"]))
    )
    msg = _error(
        spark, f"CALL {catalog}.system.register_feature('web', 'f6', 'n', 'int', '1', 'nope')"
    )
    assert unknown in msg and "OMNITABLE_INVALID_OPERATION" in msg
    missing = _error(
        spark, f"CALL {catalog}.system.register_feature('nope', 'f7', 'n', 'int', '1')"
    )
    assert "TABLE_OR_VIEW_NOT_FOUND" in missing and "nope" in missing
    assert "is NULL" in _error(
        spark, f"CALL {catalog}.system.register_feature('web', 'f7', NULL, 'int', '1')"
    )
    # a dependency cycle through a feature registered from SQL
    _call(spark, f"CALL {catalog}.system.register_feature('web', 'c2', 'f1 + 1', 'int', '1')")
    cycle = _python_error(lambda: t.register(omnitable.sql_feature("f1", "c2 + 1", "int", "2")))
    msg = _error(
        spark, f"CALL {catalog}.system.register_feature('web', 'f1', 'c2 + 1', 'int', '2')"
    )
    assert "dependency cycle" in cycle and cycle in msg
    assert sorted(f.id for f in t.features()) == ["c2@1", "f1@1"]
    assert len(t.history()) == 4


def test_inputs_honour_spark_case_sensitivity_as_python_does(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh, "web")
    spark.conf.set("spark.sql.caseSensitive", "true")
    expected = _python_error(lambda: t.register(omnitable.sql_feature("t1", "title", "int", "1")))
    msg = _error(spark, f"CALL {catalog}.system.register_feature('web', 't1', 'title', 'int', '1')")
    assert "mentions no column" in expected and expected in msg
    row = _call(
        spark, f"CALL {catalog}.system.register_feature('web', 't1', 'Title', 'string', '1')"
    )
    assert row["inputs"] == ["Title"]


def _paused(spark: Any, gate: Path, sql: str) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``sql`` in a thread until the JVM reaches register.before_commit."""
    spark.conf.set(FAILPOINT_CONF, f"register.before_commit=pause:{gate}")
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            out["row"] = spark.sql(sql).collect()[0]
        except Exception as exc:  # the conflict, raised through py4j
            out["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    while not (gate / "register.before_commit.reached").exists():
        assert thread.is_alive(), out
        thread.join(0.05)
    return thread, out


def _release(spark: Any, gate: Path, thread: threading.Thread) -> None:
    (gate / "register.before_commit.go").touch()
    thread.join(120)
    spark.conf.unset(FAILPOINT_CONF)
    for f in gate.iterdir():
        f.unlink()


def test_a_jvm_registration_races_python_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = _table(wh, "web")
    gate = tmp_path / "gate"
    gate.mkdir()
    call = f"CALL {catalog}.system.register_feature('web', '{{}}', 'n + 1', 'int', '1')"

    # another feature registered by Python meanwhile: commit.py's feature conflict
    thread, out = _paused(spark, gate, call.format("a1"))
    t.register(omnitable.sql_feature("p1", "n * 3", "int", "1"))
    _release(spark, gate, thread)
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert "feature(s) p1@1 were registered by a concurrent commit" in str(out["error"])

    # the same feature registered by Python meanwhile: its output column was added concurrently
    thread, out = _paused(spark, gate, call.format("a2"))
    t.register(omnitable.sql_feature("a2", "n + 1", "int", "1"))
    _release(spark, gate, thread)
    assert "column 'a2' was added by a concurrent commit" in str(out["error"])

    # an append meanwhile does not conflict
    thread, out = _paused(spark, gate, call.format("a3"))
    t.append(DATA, "b2")
    _release(spark, gate, thread)
    assert "error" not in out, out
    assert sorted(f.id for f in t.features()) == ["a2@1", "a3@1", "p1@1"]


def test_python_registration_loses_to_a_jvm_one(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = _table(wh, "web")
    result = race(
        "register.before_commit",
        lambda: wh.table("web").register(omnitable.sql_feature("g", "n + 1", "int", "1")),
        lambda: spark.sql(
            f"CALL {catalog}.system.register_feature('web', 'h', 'n + 2', 'int', '1')"
        ).collect(),
    )
    assert "feature(s) h@1 were registered by a concurrent commit" in str(result["error"])
    assert [f.id for f in t.features()] == ["h@1"]


def test_a_jvm_registration_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _table(wh, "web")
    before = _rows(wh, "web")
    for point in ("register.before_commit", "commit.mid_insert", "commit.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        sql = f"CALL {catalog}.system.register_feature('web', 'k', 'n + 1', 'int', '1')"
        assert point in _error(spark, sql)
    spark.conf.unset(FAILPOINT_CONF)
    assert _rows(wh, "web") == before
    assert t.features() == [] and len(t.history()) == 2
