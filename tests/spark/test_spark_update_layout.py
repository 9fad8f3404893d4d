"""SQL ``UPDATE`` on many fragments read and rewritten by several Spark tasks (jvm/.../write/
ColumnChanges.scala streams each fragment's rows, clustered by fragment and sorted by offset, into
ColumnRewriter's FragmentRewriteStream): every new value lands in its own row (fragment and
offset), the rows not updated and the deleted ones keep their values, and the files equal those of
Python's ``Table.update`` of the same rows, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import omnitable
from omnitable import ROW_ID
from omnitable.spark.session import CATALOG_CLASS

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

_names = itertools.count()
ROWS_PER_BATCH = 100
FRAGMENT_ROWS = 25  # 4 fragments per batch, 8 in all


@pytest.fixture
def catalog(spark: Any, wh: omnitable.Warehouse) -> Any:
    name = f"oml_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", wh.uri)
    return name


def _table(wh: omnitable.Warehouse) -> omnitable.Table:
    """8 fragments in 2 batches; the scan packs at most 30 rows per task (several tasks), and
    rows 7, 30..32 and 140 are deleted (their offsets stay in the fragments' files)."""
    t = wh.create_table(
        f"l{next(_names)}",
        {"x": "bigint", "label": "string", "quality": "double", "text": "string"},
        groups={"meta": ["label", "quality"], "payload": ["text"]},
        properties={"read.max_rows_per_partition": 30},
    )
    for b in range(2):
        xs = list(range(b * ROWS_PER_BATCH, (b + 1) * ROWS_PER_BATCH))
        t.append(
            pa.table({"x": xs, "label": [f"l{x}" for x in xs], "quality": [x / 4 for x in xs],
                      "text": [f"t{x}" for x in xs]}),
            f"b{b}", target_fragment_rows=FRAGMENT_ROWS,
        )  # fmt: skip
    t.delete(pc.is_in(pc.field("x"), pa.array([7, 30, 31, 32, 140])))
    return t


def _rows(t: omnitable.Table) -> list[dict[str, Any]]:
    return t.read([ROW_ID, "x", "label", "quality", "text"]).sort_by("x").to_pylist()


def _python_update(t: omnitable.Table, new: dict[int, tuple[str, float]]) -> None:
    """``Table.update`` of ``label`` and ``quality`` of the rows ``x`` → (label, quality)."""
    ids = {r["x"]: r[ROW_ID] for r in _rows(t)}
    xs = sorted(new)
    t.update(pa.table({ROW_ID: [ids[x] for x in xs], "label": [new[x][0] for x in xs],
                       "quality": [new[x][1] for x in xs]}), columns=["label", "quality"])  # fmt: skip


def _parquet(t: omnitable.Table) -> set[Path]:
    return set(Path(t.location.path).rglob("*.parquet"))


def _contents(files: set[Path]) -> list[list[tuple[Any, ...]]]:
    """Each file's rows in order (values only, by column position), files sorted."""
    out = []
    for f in files:
        table = pq.read_table(f)
        out.append(
            list(zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True))
        )
    return sorted(out)


def test_update_of_many_fragments_in_many_tasks_lands_in_place(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    sql, py = _table(wh), _table(wh)
    fragments = spark.sql(
        f"SELECT count(DISTINCT _ai_fragment_) AS n FROM {catalog}.{sql.name}"
    ).first()
    assert fragments.n == 8
    before_sql, before_py = _parquet(sql), _parquet(py)
    # values derived from each row's own x: a row written at another offset or fragment shows
    spark.sql(
        f"UPDATE {catalog}.{sql.name} SET quality = x * 10 + 0.5, label = concat('u', CAST(x AS STRING)) "
        "WHERE x % 3 <> 0"
    )
    live = [x for x in range(2 * ROWS_PER_BATCH) if x not in (7, 30, 31, 32, 140)]
    _python_update(py, {x: (f"u{x}", x * 10 + 0.5) for x in live if x % 3 != 0})
    got = _rows(sql)
    assert got == _rows(py)
    assert [r["x"] for r in got] == live
    for r in got:
        updated = r["x"] % 3 != 0
        assert r["quality"] == (r["x"] * 10 + 0.5 if updated else r["x"] / 4)
        assert r["label"] == (f"u{r['x']}" if updated else f"l{r['x']}")
        assert r["text"] == f"t{r['x']}"
    head = sql.history(1)[0]
    assert head.op == "update" and head.summary["rows"] == len([x for x in live if x % 3 != 0])
    assert head.summary["fragments"] == 8 and head.summary["files"] == 8  # one meta file each
    # the new files, row by row (deleted rows included), are Python's
    assert _contents(_parquet(sql) - before_sql) == _contents(_parquet(py) - before_py)


def test_update_of_every_row_keeps_deleted_rows_and_offsets(
    spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    """Every live row updated: fragments without deletions are written without reading their old
    files; those with deleted rows carry the deleted rows' old values at their offsets."""
    sql, py = _table(wh), _table(wh)
    before_sql, before_py = _parquet(sql), _parquet(py)
    spark.sql(f"UPDATE {catalog}.{sql.name} SET quality = x + 0.25, label = 'all'")
    live = [x for x in range(2 * ROWS_PER_BATCH) if x not in (7, 30, 31, 32, 140)]
    _python_update(py, {x: ("all", x + 0.25) for x in live})
    assert _rows(sql) == _rows(py)
    assert [(r["x"], r["quality"], r["label"]) for r in _rows(sql)] == [
        (x, x + 0.25, "all") for x in live
    ]
    # the new files, row by row: the deleted rows (offsets 7, 30..32 and 140) keep their values
    new = _contents(_parquet(sql) - before_sql)
    assert new == _contents(_parquet(py) - before_py)
    cells = sorted(c for f in new for c in f)
    assert len(cells) == 2 * ROWS_PER_BATCH
    assert {c for c in cells if c[0] != "all"} == {(f"l{x}", x / 4) for x in (7, 30, 31, 32, 140)}
    rows = spark.sql(
        f"SELECT x, quality, _ai_fragment_ AS f, _ai_row_offset_ AS o FROM {catalog}.{sql.name} ORDER BY x"
    ).collect()
    assert [(r.x, r.quality) for r in rows] == [(x, x + 0.25) for x in live]
    by_fragment: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        by_fragment.setdefault(r.f, []).append((r.o, r.x))
    for pairs in by_fragment.values():  # offsets follow x within a fragment: rows stayed in place
        pairs.sort()
        assert [x - pairs[0][1] for _, x in pairs] == [o - pairs[0][0] for o, _ in pairs]
