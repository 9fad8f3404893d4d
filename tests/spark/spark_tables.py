"""Setup shared by the Spark write tests (test_spark_write.py, test_spark_write_ids.py,
test_spark_update_sql.py, test_spark_merge_sql.py): the session settings they set, a Spark
catalog bound to a test warehouse (the ``catalog`` fixture of tests/spark/conftest.py), the
12-row table the SQL UPDATE and MERGE tests change, what a table's files hold, and a JVM statement
held at a failpoint while a concurrent commit lands."""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

APPEND_NAME_CONF = "spark.omnitable.write.appendName"
FAILPOINT_CONF = "spark.omnitable.test.failpoint"
_names = itertools.count()


def bind_catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    """A new Spark catalog name bound to ``wh``."""
    name = f"omw_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


# the session settings a Spark test may change; the ``catalog`` fixture unsets them after the test
TEST_SETTINGS = (
    APPEND_NAME_CONF,
    FAILPOINT_CONF,
    "spark.sql.caseSensitive",
    "spark.sql.optimizer.excludedRules",
    "spark.omnitable.read.max_rows_per_partition",
    "spark.sql.files.maxPartitionBytes",
)


def reset_write_settings(spark: Any) -> None:
    """Unsets the session settings a test may have left (``TEST_SETTINGS``)."""
    for key in TEST_SETTINGS:
        spark.conf.unset(key)


def data_files(t: omnitable.Table) -> set[str]:
    """Every Parquet file under the table's directory (local warehouses only)."""
    return {str(p) for p in Path(t.location.path).rglob("*.parquet")}


def dml_table(wh: omnitable.Warehouse) -> omnitable.Table:
    """A new table of 12 rows (x 0-11) in fragments of 4, columns in groups ``meta`` (label,
    quality) and ``payload`` (text)."""
    t = wh.create_table(
        f"m{next(_names)}",
        {"x": "bigint", "label": "string", "quality": "double", "text": "string"},
        groups={"meta": ["label", "quality"], "payload": ["text"]},
    )
    t.append(
        pa.table({"x": list(range(12)), "label": ["a"] * 12,
                  "quality": [float(i) for i in range(12)], "text": [f"t{i}" for i in range(12)]}),
        "b1", target_fragment_rows=4,
    )  # fmt: skip
    return t


def keyed_table(wh: omnitable.Warehouse, prefix: str = "km") -> omnitable.Table:
    """A new table keyed by x holding x 0..11 (label 'a', quality x, text t<x>), upserted as
    batch ``b1`` (one fragment), columns in groups ``meta`` (label, quality) and ``payload``
    (text): the table the keyed MERGE tests change."""
    t = wh.create_table(
        f"{prefix}{next(_names)}",
        {"x": "bigint", "label": "string", "quality": "double", "text": "string"},
        groups={"meta": ["label", "quality"], "payload": ["text"]},
        key="x",
    )
    t.upsert(
        pa.table({"x": list(range(12)), "label": ["a"] * 12,
                  "quality": [float(i) for i in range(12)], "text": [f"t{i}" for i in range(12)]}),
        append_name="b1",
    )  # fmt: skip
    return t


def dml_rows(t: omnitable.Table) -> list[dict[str, Any]]:
    """A :func:`dml_table`'s rows (with their ids), by x."""
    return t.read([ROW_ID, "x", "label", "quality", "text"]).sort_by("x").to_pylist()


def fragmented_table(wh: omnitable.Warehouse, prefix: str) -> omnitable.Table:
    """Three batches of unequal fragments (7..40 rows), some rows deleted: 61 fragments (the
    table the streaming UPDATE and MERGE tests change)."""
    import pyarrow.compute as pc

    t = wh.create_table(
        f"{prefix}{next(_names)}",
        {"x": "bigint", "label": "string", "quality": "double"},
        groups={"meta": ["label"], "q": ["quality"]},
    )
    start = 0
    for batch, (n, per) in enumerate(((400, 7), (300, 40), (250, 13))):
        xs = list(range(start, start + n))
        t.append(
            pa.table({"x": xs, "label": [f"l{x % 7}" for x in xs], "quality": [x / 4 for x in xs]}),
            f"b{batch}", target_fragment_rows=per,
        )  # fmt: skip
        start += n
    t.delete(pc.field("x").isin(pa.array(range(3, 950, 11))))
    return t


def fragmented_rows(t: omnitable.Table) -> list[dict[str, Any]]:
    """A :func:`fragmented_table`'s rows (with their ids), by x."""
    return t.read([ROW_ID, "x", "label", "quality"]).sort_by("x").to_pylist()


def file_columns(t: omnitable.Table, version: int) -> list[set[str]]:
    """The column names of each file that ``version`` of ``t`` added."""
    snap = t.snapshot()
    names = {c.column_id: c.name for c in snap.columns}
    files = [f for fs in snap.files_by_fragment.values() for f in fs if f.added_version == version]
    return [{names[c] for c in f.columns} for f in files]


@contextmanager
def raising_at(spark: Any, point: str) -> Iterator[None]:
    """The JVM statement run inside fails at failpoint ``point`` (which the block must reach:
    the error names it); the failpoint is unset after."""
    import re

    import pytest

    spark.conf.set(FAILPOINT_CONF, f"{point}=raise")
    try:
        with pytest.raises(Exception, match=re.escape(point)):
            yield
    finally:
        spark.conf.unset(FAILPOINT_CONF)


@contextmanager
def paused_at(
    spark: Any, point: str, gate: Path, statement: Callable[[], Any]
) -> Iterator[dict[str, Any]]:
    """Runs ``statement`` (a JVM write of ``spark``) in a thread until it reaches failpoint
    ``point`` (paused, gate directory ``gate``), runs the ``with`` block (the concurrent commit),
    then lets the statement go on and waits for it.

    Yields:
        The statement's outcome: ``{"error": exception}`` once it raised (a conflict comes
        through py4j), else empty.
    """
    spark.conf.set(FAILPOINT_CONF, f"{point}=pause:{gate}")
    out: dict[str, Any] = {}

    def go() -> None:
        try:
            statement()
        except Exception as exc:
            out["error"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not (gate / f"{point}.reached").exists():
            assert thread.is_alive(), out
            assert time.monotonic() < deadline, f"the statement never reached {point}"
            thread.join(0.05)
        yield out
    finally:
        (gate / f"{point}.go").touch()
        thread.join(120)
        spark.conf.unset(FAILPOINT_CONF)
