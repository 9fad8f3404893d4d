"""The JVM's row-level commits racing a Python compaction (governance/compact.py), on SQLite and
PostgreSQL: a Spark SQL UPDATE or DELETE paused at its ``*.before_commit`` failpoint while the
compaction commits conflicts cleanly (the DELETE: its fragments were removed; the UPDATE: its
read set is gone; run again, either plans on the new fragments), and the compaction paused between Execute and Commit while the JVM statement
commits conflicts, prepares again and keeps the statement's change (never resurrecting a
deleted row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from spark_tables import dml_table, paused_at

import omnitable
from omnitable._failpoints import hooked

pytest.importorskip("pyspark")

pytestmark = pytest.mark.spark

STATEMENTS = {
    "update": ("update.before_commit", "UPDATE {t} SET label = 'u' WHERE x = 5"),
    "delete": ("delete.before_commit", "DELETE FROM {t} WHERE x = 5 OR quality > 10.5"),
}

REFUSAL = {
    "update": "fragment(s) it read were removed by a concurrent commit",
    "delete": "fragment(s) were removed by a concurrent commit",
}


def _check(kind: str, t: omnitable.Table) -> None:
    rows = {r["x"]: r["label"] for r in t.read(columns=["x", "label"]).to_pylist()}
    if kind == "update":
        assert len(rows) == 12 and rows[5] == "u" and rows[4] == "a"
    else:
        assert sorted(rows) == [x for x in range(11) if x != 5]


@pytest.mark.parametrize("kind", sorted(STATEMENTS))
def test_a_jvm_statement_paused_while_a_compaction_commits(
    kind: str, spark: Any, wh: omnitable.Warehouse, catalog: str, tmp_path: Path
) -> None:
    t = dml_table(wh)
    point, sql = STATEMENTS[kind]
    statement = lambda: spark.sql(sql.format(t=f"{catalog}.{t.name}"))  # noqa: E731
    with paused_at(spark, point, tmp_path, statement) as out:
        (result,) = wh.table(t.name).maintain(["compact"])
        assert result.outcome == "committed"
    error = str(out.get("error"))
    assert "OMNITABLE_COMMIT_CONFLICT" in error, out
    # the JVM's UPDATE checks its read set first: the compacted fragments no longer provide x
    assert REFUSAL[kind] in error, error[:600]
    fresh = wh.table(t.name)
    assert len(fresh.snapshot().fragments_of(["b1"])) == 1
    statement()  # run again: it plans on the compacted fragment
    _check(kind, wh.table(t.name))


@pytest.mark.parametrize("kind", sorted(STATEMENTS))
def test_a_compaction_paused_while_a_jvm_statement_commits(
    kind: str, spark: Any, wh: omnitable.Warehouse, catalog: str
) -> None:
    t = dml_table(wh)
    _, sql = STATEMENTS[kind]
    with hooked("governance.before_commit", lambda: spark.sql(sql.format(t=f"{catalog}.{t.name}"))):
        (result,) = t.maintain(["compact"])
    assert result.outcome == "committed"
    fresh = wh.table(t.name)
    assert fresh.history(1)[0].op == "compact"
    assert len(fresh.snapshot().fragments_of(["b1"])) == 1
    _check(kind, fresh)
