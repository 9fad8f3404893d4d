"""CREATE TABLE, CTAS and ALTER TABLE … ADD COLUMNS from Spark SQL (docs/spark.md, "Creating and
altering tables from Spark"): the JVM writes the catalog rows Python's create_table and
add_columns write, refuses what Python refuses with Python's messages, and conflicts with racing
Python commits as Python's add_columns does."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import text

import omnitable
from omnitable.exceptions import OmniTableError
from omnitable.spark.session import CATALOG_CLASS
from omnitable.vocabulary.types import to_arrow

pytestmark = pytest.mark.spark

APPEND_NAME_CONF = "spark.omnitable.write.appendName"
FAILPOINT_CONF = "spark.omnitable.test.failpoint"

SQL_COLUMNS = (
    "url STRING NOT NULL, score DOUBLE, title STRING, body STRING, n INT, small SMALLINT, "
    "tiny TINYINT, big BIGINT, f FLOAT, ok BOOLEAN, raw BINARY, tags ARRAY<STRING>, "
    "s STRUCT<a: INT, `b c`: STRING>, m MAP<STRING, BIGINT>, price DECIMAL(10,2), "
    "at TIMESTAMP, day DATE, ntz TIMESTAMP_NTZ"
)
PY_SCHEMA = pa.schema(
    [
        pa.field("url", pa.string(), nullable=False),
        ("score", pa.float64()),
        ("title", pa.string()),
        ("body", pa.string()),
        ("n", pa.int32()),
        ("small", pa.int16()),
        ("tiny", pa.int8()),
        ("big", pa.int64()),
        ("f", pa.float32()),
        ("ok", pa.bool_()),
        ("raw", pa.binary()),
        ("tags", pa.list_(pa.string())),
        ("s", pa.struct([("a", pa.int32()), ("b c", pa.string())])),
        ("m", pa.map_(pa.string(), pa.int64())),
        ("price", pa.decimal128(10, 2)),
        ("at", pa.timestamp("us", tz="UTC")),
        ("day", pa.date32()),
        ("ntz", pa.timestamp("us")),
    ]
)


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    """A catalog name bound to this test's warehouse; session write settings reset after."""
    name = f"omd_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    yield name
    spark.conf.unset(APPEND_NAME_CONF)
    spark.conf.unset(FAILPOINT_CONF)


def _rows(wh: omnitable.Warehouse, table: str) -> dict[str, Any]:
    """The catalog rows of ``table`` that do not depend on its id or on the clock."""
    ns, name = table.split(".") if "." in table else ("default", table)
    with wh.catalog.store.read() as conn:
        t = conn.execute(
            text("SELECT * FROM tables WHERE namespace = :ns AND name = :n"), {"ns": ns, "n": name}
        ).one()
        tid = t.table_id
        cols = conn.execute(
            text(
                "SELECT column_id, name, physical_name, data_type, nullable, position, state, "
                "group_name, feature, branch, added_version, removed_version FROM columns "
                "WHERE table_id = :t ORDER BY column_id, added_version"
            ),
            {"t": tid},
        ).all()
        commits = conn.execute(
            text(
                "SELECT version, parent_version, branch, op, summary FROM commits "
                "WHERE table_id = :t ORDER BY version"
            ),
            {"t": tid},
        ).all()
        refs = conn.execute(
            text(
                "SELECT name, kind, version, parent_branch, fork_version, max_age_s FROM refs "
                "WHERE table_id = :t"
            ),
            {"t": tid},
        ).all()
    return {
        "table": (t.namespace, t.next_row_id, t.next_column_id, t.properties),
        "location": t.location == f"{table}-{tid}",
        "columns": [tuple(c) for c in cols],
        "commits": [tuple(c) for c in commits],
        "refs": [tuple(r) for r in refs],
    }


def _columns(wh: omnitable.Warehouse, table: str) -> dict[str, tuple[str, str]]:
    """Active columns of ``table`` at its head: name -> (data type, group), in position order."""
    cols = [c for c in _rows(wh, table)["columns"] if c[6] == "active" and c[11] is None]
    return {c[1]: (c[3], c[7]) for c in sorted(cols, key=lambda c: c[5])}


def _schema_only_add(
    wh: omnitable.Warehouse, table: str, columns: dict[str, str], group: str
) -> int:
    """Python's add_columns of no rows: the columns only, in ``group``."""
    data = {"_ai_unique_id_": pa.array([], pa.int64())}
    data.update({n: pa.array([], to_arrow(t)) for n, t in columns.items()})
    return wh.table(table).add_columns(pa.table(data), group=group)


def _error(spark: Any, sql: str) -> str:
    with pytest.raises(Exception) as info:
        spark.sql(sql).collect()
    return str(info.value)


def _python_error(fn: Any) -> str:
    with pytest.raises(OmniTableError) as info:
        fn()
    return str(info.value)


def test_create_table_writes_the_rows_python_writes(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    props = "'write.compression' = 'snappy', 'write.row_group_size' = '1000', 'team' = 'é\"x'"
    spark.sql(
        f"CREATE TABLE {catalog}.web ({SQL_COLUMNS}) USING omnitable TBLPROPERTIES "
        f"('groups.text' = 'title, body', 'groups.meta' = 'score,n', 'key' = 'url', {props})"
    ).collect()
    wh.create_table(
        "py",
        PY_SCHEMA,
        groups={"meta": ["score", "n"], "text": ["title", "body"]},
        properties={"write.compression": "snappy", "write.row_group_size": "1000", "team": 'é"x'},
        key="url",
    )
    assert _rows(wh, "web") == _rows(wh, "py")
    web = wh.table("web")
    assert web.schema == wh.table("py").schema
    assert web.key == ["url"]
    assert [c.op for c in web.history()] == ["create"]
    # no USING, no properties, a namespace: the same as Python too
    spark.sql(f"CREATE NAMESPACE {catalog}.ns").collect()
    spark.sql(f"CREATE TABLE {catalog}.ns.plain (a BIGINT, b STRING)").collect()
    wh.create_table("ns.plain_py", {"a": "bigint", "b": "string"})
    assert _rows(wh, "ns.plain") == _rows(wh, "ns.plain_py")
    assert wh.tables("ns") == ["ns.plain", "ns.plain_py"]


def test_tables_created_by_sql_take_appends_both_ways(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    spark.sql(
        f"CREATE TABLE {catalog}.web (url STRING NOT NULL, score DOUBLE, title STRING) "
        "USING omnitable TBLPROPERTIES ('groups.text' = 'title')"
    ).collect()
    wh.table("web").append(
        pa.table(
            {"url": ["p"], "score": [0.5], "title": ["py"]},
            schema=pa.schema([PY_SCHEMA.field(i) for i in range(3)]),
        ),
        "py",
    )
    spark.conf.set(APPEND_NAME_CONF, "sql")
    spark.sql(f"INSERT INTO {catalog}.web VALUES ('s', 1.5, 'spark')").collect()
    expected = {("p", 0.5, "py"), ("s", 1.5, "spark")}
    py_rows = wh.table("web").read(columns=["url", "score", "title"]).to_pylist()
    assert {(r["url"], r["score"], r["title"]) for r in py_rows} == expected
    spark_rows = spark.sql(f"SELECT url, score, title FROM {catalog}.web").collect()
    assert {tuple(r) for r in spark_rows} == expected
    assert [b.name for b in wh.table("web").batches()] == ["py", "sql"]
    assert {n: g for n, (_, g) in _columns(wh, "web").items()} == {
        "_ai_unique_id_": "base", "url": "base", "score": "base", "title": "text"
    }  # fmt: skip


def test_create_in_a_missing_namespace_and_twice(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    assert "SCHEMA_NOT_FOUND" in _error(spark, f"CREATE TABLE {catalog}.nope.web (a INT)")
    assert wh.namespaces() == ["default"]
    spark.sql(f"CREATE TABLE {catalog}.web (a INT)").collect()
    assert "TABLE_OR_VIEW_ALREADY_EXISTS" in _error(spark, f"CREATE TABLE {catalog}.web (b INT)")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {catalog}.web (b INT)").collect()
    assert list(_columns(wh, "web")) == ["_ai_unique_id_", "a"]
    assert len(wh.table("web").history()) == 1


@pytest.mark.parametrize(
    ("ddl", "python"),
    [
        (
            "(a INT, b INT) TBLPROPERTIES ('groups.g' = 'a,zz')",
            lambda wh: wh.create_table("t", {"a": "int", "b": "int"}, groups={"g": ["a", "zz"]}),
        ),
        (
            "(a INT, b INT) TBLPROPERTIES ('groups.g' = 'a', 'groups.h' = 'a')",
            lambda wh: wh.create_table(
                "t", {"a": "int", "b": "int"}, groups={"g": ["a"], "h": ["a"]}
            ),
        ),
        (
            "(a INT) TBLPROPERTIES ('groups.bad/name' = 'a')",
            lambda wh: wh.create_table("t", {"a": "int"}, groups={"bad/name": ["a"]}),
        ),
        ("(_ai_x INT)", lambda wh: wh.create_table("t", {"_ai_x": "int"})),
        ("(`a b` INT)", lambda wh: wh.create_table("t", {"a b": "int"})),
        ("(_ai_unique_id_ INT)", lambda wh: wh.create_table("t", {"_ai_unique_id_": "int"})),
        (
            "(a INT) TBLPROPERTIES ('write.row_group_size' = '-3')",
            lambda wh: wh.create_table(
                "t", {"a": "int"}, properties={"write.row_group_size": "-3"}
            ),
        ),
        (
            "(a INT) TBLPROPERTIES ('write.rowgroup' = '3')",
            lambda wh: wh.create_table("t", {"a": "int"}, properties={"write.rowgroup": "3"}),
        ),
        (
            "(a INT) TBLPROPERTIES ('backfill.on_corrupt' = 'maybe')",
            lambda wh: wh.create_table(
                "t", {"a": "int"}, properties={"backfill.on_corrupt": "maybe"}
            ),
        ),
        (
            "(a DOUBLE) TBLPROPERTIES ('key' = 'a')",
            lambda wh: wh.create_table("t", {"a": "double"}, key="a"),
        ),
        (
            "(a INT) TBLPROPERTIES ('key' = 'b')",
            lambda wh: wh.create_table("t", {"a": "int"}, key="b"),
        ),
    ],
)
def test_create_refuses_what_python_refuses_with_its_message(
    spark: Any, wh: omnitable.Warehouse, catalog: str, ddl: str, python: Any
) -> None:
    message = _python_error(lambda: python(wh))
    got = _error(spark, f"CREATE TABLE {catalog}.t {ddl}")
    assert "OMNITABLE_INVALID_TABLE_DEFINITION" in got
    assert message in got
    assert wh.tables() == []


@pytest.mark.parametrize(
    ("ddl", "code", "says"),
    [
        ("(a INT) USING parquet", "OMNITABLE_UNSUPPORTED_DDL", "USING parquet"),
        (
            "(a INT) USING omnitable PARTITIONED BY (a)",
            "OMNITABLE_UNSUPPORTED_DDL",
            "PARTITIONED BY",
        ),
        ("(a INT) USING omnitable LOCATION '/tmp/x'", "OMNITABLE_UNSUPPORTED_DDL", "LOCATION"),
        ("(a INT DEFAULT 3)", "UNSUPPORTED_FEATURE", "does not support column default"),
        ("(a INTERVAL DAY)", "OMNITABLE_UNSUPPORTED_TYPE", "column 'a' has type interval day"),
        ("(a VARCHAR(3))", "OMNITABLE_UNSUPPORTED_TYPE", "column 'a' has type varchar(3)"),
        ("(a ARRAY<INTERVAL DAY>)", "OMNITABLE_UNSUPPORTED_TYPE", "column 'a' has type"),
    ],
)
def test_create_refuses_clauses_and_types(
    spark: Any, wh: omnitable.Warehouse, catalog: str, ddl: str, code: str, says: str
) -> None:
    got = _error(spark, f"CREATE TABLE {catalog}.t {ddl}")
    assert code in got and says in got
    assert wh.tables() == []


def _warehouse_files(wh: omnitable.Warehouse) -> set[str]:
    return {str(p) for p in Path(wh.root.path).rglob("*") if p.is_file()}


def test_ctas_creates_and_appends_one_batch(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    spark.conf.set(APPEND_NAME_CONF, "first")
    spark.sql(
        f"CREATE TABLE {catalog}.web2 USING omnitable TBLPROPERTIES ('groups.meta' = 'score') "
        "AS SELECT concat('u', id) AS url, id * 0.5D AS score FROM range(0, 5, 1, 2)"
    ).collect()
    t = wh.table("web2")
    assert [b.name for b in t.batches()] == ["first"]
    assert [c.op for c in reversed(t.history())] == ["create", "append"]
    assert sorted(r["url"] for r in t.read().to_pylist()) == [f"u{i}" for i in range(5)]
    assert _columns(wh, "web2") == {
        "_ai_unique_id_": ("bigint", "base"),
        "url": ("string", "base"),
        "score": ("double", "meta"),
    }
    # the DataFrame API's create() is a CTAS too
    spark.range(3).selectExpr("id AS a").writeTo(f"{catalog}.web3").option(
        "append_name", "df"
    ).create()
    assert [b.name for b in wh.table("web3").batches()] == ["df"]


def test_failed_ctas_leaves_no_table_and_no_files(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_table("keep", {"a": "int"}).append(pa.table({"a": pa.array([1], pa.int32())}), "k")
    before = _warehouse_files(wh)
    spark.conf.set(APPEND_NAME_CONF, "b")
    got = _error(
        spark,
        f"CREATE TABLE {catalog}.bad USING omnitable AS "
        "SELECT id, CAST(10 / (id - 7) AS INT) AS q FROM range(0, 10, 1, 2)",
    )
    assert "DIVIDE_BY_ZERO" in got
    assert wh.tables() == ["keep"]
    assert [r.tableName for r in spark.sql(f"SHOW TABLES IN {catalog}").collect()] == ["keep"]
    assert _warehouse_files(wh) == before
    # no batch name: refused before anything is created
    spark.conf.unset(APPEND_NAME_CONF)
    assert "OMNITABLE_MISSING_APPEND_NAME" in _error(
        spark, f"CREATE TABLE {catalog}.bad USING omnitable AS SELECT 1 AS a"
    )
    assert wh.tables() == ["keep"]
    assert _warehouse_files(wh) == before


def test_replace_table_is_refused(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("web", {"a": "int"})
    t.append(pa.table({"a": pa.array([1], pa.int32())}), "k")
    spark.conf.set(APPEND_NAME_CONF, "b")
    for sql in (
        f"REPLACE TABLE {catalog}.web USING omnitable AS SELECT 2 AS a",
        f"CREATE OR REPLACE TABLE {catalog}.web (a INT)",
    ):
        got = _error(spark, sql)
        assert "OMNITABLE_UNSUPPORTED_DDL" in got and "replace table" in got
    assert [r["a"] for r in wh.table("web").read().to_pylist()] == [1]


def test_add_columns_is_python_add_columns_without_data(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    for name in ("web", "py"):
        t = wh.create_table(name, {"url": "string"})
        t.append(pa.table({"url": ["a", "b"]}), "b1")
    spark.sql(f"ALTER TABLE {catalog}.web ADD COLUMNS (lang STRING, views BIGINT)").collect()
    _schema_only_add(wh, "py", {"lang": "string", "views": "bigint"}, "lang")
    web, py = _rows(wh, "web"), _rows(wh, "py")
    assert web["columns"] == py["columns"]
    assert web["commits"] == py["commits"]
    assert web["table"] == py["table"]
    assert wh.table("web").history()[0].summary == {
        "columns": ["lang", "views"], "group": "lang", "rows": 0, "files": 0
    }  # fmt: skip
    rows = spark.sql(f"SELECT url, lang, views FROM {catalog}.web ORDER BY url").collect()
    assert [tuple(r) for r in rows] == [("a", None, None), ("b", None, None)]
    # new rows fill the new columns, both ways; a second ALTER gets its own group
    spark.conf.set(APPEND_NAME_CONF, "b2")
    spark.sql(f"INSERT INTO {catalog}.web VALUES ('c', 'en', 3)").collect()
    wh.table("web").append(pa.table({"url": ["d"], "lang": ["fr"]}), "b3")
    spark.sql(f"ALTER TABLE {catalog}.web ADD COLUMN lang2 INT").collect()
    got = {r["url"]: (r["lang"], r["views"]) for r in wh.table("web").read().to_pylist()}
    assert got == {"a": (None, None), "b": (None, None), "c": ("en", 3), "d": ("fr", None)}
    groups = {n: g for n, (_, g) in _columns(wh, "web").items()}
    assert groups["lang2"] == "lang2" and groups["views"] == "lang"


def test_add_columns_refusals(spark: Any, wh: omnitable.Warehouse, catalog: str) -> None:
    t = wh.create_table("web", {"url": "string"})
    t.append(pa.table({"url": ["a"]}), "b1")
    t.retire("url")
    spark.sql(f"ALTER TABLE {catalog}.web ADD COLUMNS (x INT)").collect()
    got = _error(spark, f"ALTER TABLE {catalog}.web ADD COLUMNS (url STRING)")
    assert "OMNITABLE_COLUMN_EXISTS" in got
    assert "a retired column has that name; restore it (Table.restore)" in got
    got = _error(spark, f"ALTER TABLE {catalog}.web ADD COLUMNS (y INT NOT NULL)")
    assert "OMNITABLE_UNSUPPORTED_DDL" in got and "NOT NULL" in got
    got = _error(spark, f"ALTER TABLE {catalog}.web ADD COLUMNS (_ai_y INT)")
    assert "prefix '_ai_' is reserved" in got
    for sql, says in (
        (f"ALTER TABLE {catalog}.web DROP COLUMN x", "retire("),
        (f"ALTER TABLE {catalog}.web RENAME COLUMN x TO z", "rename_column("),
        (f"ALTER TABLE {catalog}.web SET TBLPROPERTIES ('a' = 'b')", "TBLPROPERTIES of CREATE"),
    ):
        got = _error(spark, sql)
        assert "OMNITABLE_UNSUPPORTED_DDL" in got and says in got
    assert list(_columns(wh, "web")) == ["_ai_unique_id_", "x"]
    assert len(wh.table("web").history()) == 4


def _alter_paused(spark: Any, catalog: str, gate: Path, sql: str) -> tuple[threading.Thread, dict]:
    """Run ``sql`` in a thread until the JVM reaches add_columns.before_commit."""
    spark.conf.set(FAILPOINT_CONF, f"add_columns.before_commit=pause:{gate}")
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            spark.sql(sql).collect()
        except Exception as exc:  # the conflict, raised through py4j
            out["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    while not (gate / "add_columns.before_commit.reached").exists():
        assert thread.is_alive(), out
        thread.join(0.05)
    return thread, out


def _release(spark: Any, gate: Path, thread: threading.Thread) -> None:
    (gate / "add_columns.before_commit.go").touch()
    thread.join(120)
    spark.conf.unset(FAILPOINT_CONF)
    for f in gate.iterdir():
        f.unlink()


def test_alter_races_python_commits(
    spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = wh.create_table("web", {"url": "string"})
    t.append(pa.table({"url": ["a"]}), "b1")
    gate = tmp_path / "gate"
    gate.mkdir()

    # the same column added by Python in between: a conflict, Python's message
    thread, out = _alter_paused(
        spark, catalog, gate, f"ALTER TABLE {catalog}.web ADD COLUMNS (lang STRING)"
    )
    _schema_only_add(wh, "web", {"lang": "string"}, "g1")
    _release(spark, gate, thread)
    assert "OMNITABLE_COMMIT_CONFLICT" in str(out["error"])
    assert "column 'lang' was added by a concurrent commit" in str(out["error"])

    # Python creates the group the JVM chose (named after the JVM's first column): a conflict
    thread, out = _alter_paused(
        spark, catalog, gate, f"ALTER TABLE {catalog}.web ADD COLUMNS (topic STRING)"
    )
    _schema_only_add(wh, "web", {"other": "string"}, "topic")
    _release(spark, gate, thread)
    assert "column group 'topic' was created by a concurrent commit" in str(out["error"])

    # an append in between does not conflict
    thread, out = _alter_paused(
        spark, catalog, gate, f"ALTER TABLE {catalog}.web ADD COLUMNS (views INT)"
    )
    wh.table("web").append(pa.table({"url": ["b"]}), "b2")
    _release(spark, gate, thread)
    assert "error" not in out, out
    # a feature registered in between with the same output column (and group): a conflict
    sql = f"ALTER TABLE {catalog}.web ADD COLUMNS (n_len INT)"
    thread, out = _alter_paused(spark, catalog, gate, sql)
    wh.table("web").register(omnitable.sql_feature("n_len", "length(url)", "int", "1"))
    _release(spark, gate, thread)
    assert "column 'n_len' was added by a concurrent commit" in str(out["error"])
    cols = ["_ai_unique_id_", "url", "lang", "other", "views", "n_len"]
    assert list(_columns(wh, "web")) == cols
    assert _columns(wh, "web")["n_len"] == ("int", "n_len")
    assert {r["url"]: r["views"] for r in wh.table("web").read().to_pylist()} == {
        "a": None,
        "b": None,
    }


def test_python_add_columns_loses_to_a_jvm_alter(
    spark: Any, wh: omnitable.Warehouse, catalog: str, race: Any
) -> None:
    t = wh.create_table("web", {"url": "string"})
    t.append(pa.table({"url": ["a"]}), "b1")
    ids = pa.array([r["_ai_unique_id_"] for r in t.read().to_pylist()], pa.int64())
    result = race(
        "add_columns.before_commit",
        lambda: wh.table("web").add_columns(pa.table({"_ai_unique_id_": ids, "lang": ["x"]})),
        lambda: spark.sql(f"ALTER TABLE {catalog}.web ADD COLUMNS (lang STRING)").collect(),
    )
    assert "column 'lang' was added by a concurrent commit" in str(result["error"])
    assert [r["lang"] for r in wh.table("web").read().to_pylist()] == [None]


def test_a_jvm_alter_killed_mid_commit_leaves_nothing(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    wh.create_table("web", {"url": "string"})
    for point in ("commit.mid_insert", "commit.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        assert point in _error(spark, f"ALTER TABLE {catalog}.web ADD COLUMNS (lang STRING)")
    for point in ("create.before_insert", "create.before_end"):
        spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
        assert point in _error(spark, f"CREATE TABLE {catalog}.web2 (a INT)")
    spark.conf.unset(FAILPOINT_CONF)
    assert wh.tables() == ["web"]
    assert list(_columns(wh, "web")) == ["_ai_unique_id_", "url"]
    assert len(wh.table("web").history()) == 1
