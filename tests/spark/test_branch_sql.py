"""Spark reads of branches and tags (docs/spark.md): the catalog's ``<table>.branch_<name>`` and
``<table>.tag_<name>`` identifiers, ``VERSION AS OF '<ref>'`` and the ``branch`` read option all
read what the Python reader reads, removals of inherited rows included; main is unaffected."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS, warehouse_string

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A catalog name bound to this test's warehouse (catalogs can be added to a live session)."""
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r[ROW_ID])


def assert_same(df: Any, expected: pa.Table) -> None:
    """A Spark DataFrame holds exactly the rows (and columns, in order) of a Python read."""
    assert df.columns == expected.column_names
    assert _rows(df.toArrow()) == _rows(expected)


def _web(wh: omnitable.Warehouse) -> omnitable.Table:
    """Table ``web`` with batches b1 (10 rows) and b2 (5 rows) on main; lang cycles en, de, xx."""
    t = wh.create_table(
        "web", {"url": "string", "lang": "string", "score": "double"}, groups={"meta": ["score"]}
    )
    langs = ["en", "de", "xx"]
    t.append(
        pa.table(
            {
                "url": [f"u{i}" for i in range(10)],
                "lang": [langs[i % 3] for i in range(10)],
                "score": [i / 10 for i in range(10)],
            }
        ),
        "b1",
    )
    t.append(
        pa.table({"url": [f"v{i}" for i in range(5)], "lang": ["en"] * 5, "score": [0.5] * 5}),
        "b2",
    )
    return t


def _branch_x(t: omnitable.Table) -> omnitable.Table:
    """Branch ``x`` of main: every data operation changes rows it inherits from main."""
    x = t.create_branch("x")
    x.delete(pc.field("lang") == "xx")  # deletion vectors replace nothing of main's
    x.update(pa.table({ROW_ID: pa.array([0, 1], pa.int64()), "score": [9.0, 8.0]}), ["score"])
    x.append(
        pa.table({"url": ["w0", "w1"], "lang": ["fr", "fr"], "score": [0.1, 0.2]}), "b2", "replace"
    )
    x.rename_column("lang", "language")
    x.create_tag("tx")
    return x


def test_branch_and_tag_identifiers_read_like_python(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    main_before = t.read()
    t.create_tag("t")
    x = _branch_x(t)
    t.append(pa.table({"url": ["m0"], "lang": ["en"], "score": [0.3]}), "b3")  # main only

    branch = x.read()
    assert "language" in branch.column_names and "lang" not in branch.column_names
    by_url = {r["url"]: r for r in branch.to_pylist()}
    assert sorted(by_url) == ["u0", "u1", "u3", "u4", "u6", "u7", "u9", "w0", "w1"]
    assert by_url["u0"]["score"] == 9.0 and by_url["u1"]["score"] == 8.0

    assert_same(spark.sql(f"SELECT * FROM {catalog}.web.branch_x"), branch)
    assert_same(spark.table(f"{catalog}.web.tag_tx"), t.read(tag="tx"))
    assert_same(spark.table(f"{catalog}.web.tag_t"), t.read(tag="t"))
    assert_same(spark.sql(f"SELECT * FROM {catalog}.web VERSION AS OF 'x'"), branch)
    assert_same(spark.sql(f"SELECT * FROM {catalog}.web VERSION AS OF 'tx'"), branch)
    opts = spark.read.format("omnitable").option("warehouse", warehouse_string(wh))
    assert_same(opts.option("branch", "x").load("web"), branch)
    assert_same(x.to_spark(spark), branch)
    picked = spark.sql(f"SELECT url FROM {catalog}.web.branch_x WHERE score > 5 ORDER BY url")
    assert [r.url for r in picked.collect()] == ["u0", "u1"]

    # main: its own rows, none of the branch's removals, its later batch
    main = t.read()
    assert main.column_names[2:] == ["url", "lang", "score"]
    assert main.num_rows == 16 and _rows(t.read(tag="t")) == _rows(main_before)
    assert_same(spark.table(f"{catalog}.web"), main)
    assert_same(spark.table(f"{catalog}.web.branch_main"), main)
    assert_same(spark.table(f"{catalog}.web.tag_t"), main_before)


def test_a_branch_of_a_branch_inherits_its_removals(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    x = _branch_x(t)
    y = x.create_branch("y")
    assert_same(spark.table(f"{catalog}.web.branch_y"), x.read())
    y.delete(pc.field("url") == "u3")
    x.delete(pc.field("url") == "u4")  # after y forked: y still sees u4
    urls = sorted(r["url"] for r in y.read().to_pylist())
    assert urls == ["u0", "u1", "u4", "u6", "u7", "u9", "w0", "w1"]
    assert_same(spark.table(f"{catalog}.web.branch_y"), y.read())
    assert_same(spark.table(f"{catalog}.web.branch_x"), x.read())
    assert_same(spark.table(f"{catalog}.web"), t.read())


def test_unknown_refs_name_the_table_and_the_ref(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = _web(wh)
    t.create_branch("x")
    with pytest.raises(Exception, match=r"table 'web' has no branch 'nope' \(branches: main, x\)"):
        spark.sql(f"SELECT * FROM {catalog}.web.branch_nope").collect()
    with pytest.raises(Exception, match=r"table 'web' has no tag 'x' \(tags: none\)"):
        spark.sql(f"SELECT * FROM {catalog}.web.tag_x").collect()
    assert spark.catalog.tableExists(f"{catalog}.web.branch_x")
    assert not spark.catalog.tableExists(f"{catalog}.web.branch_nope")
