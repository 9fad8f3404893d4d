"""``CALL <catalog>.system.compact / fold / expire_versions / remove_orphan_files / maintain``
(docs/spark.md "Procedures", docs/governance.md "From Spark SQL"): each runs the job in the Python
engine on the driver, so a call does to a table what ``Table.maintain`` does to its twin and
returns the same figures; a failed call leaves the table unchanged, and a call governs the
warehouse of the catalog it names. On SQLite and PostgreSQL. (Argument validation:
OmniTableProceduresSuite.)"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from spark_tables import FAILPOINT_CONF, bind_catalog, data_files

import omnitable
from omnitable.catalog.lease import Lease, acquire, holder, release
from omnitable.governance.job import MaintenanceResult

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    return "g_" + hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:12]


def _twins(wh: omnitable.Warehouse, name: str) -> tuple[omnitable.Table, omnitable.Table]:
    """Two tables with the same history: 2 batches of 10 rows in fragments of 4, 3 rows
    deleted, one batch name rewritten by an update."""
    out = []
    for suffix in ("_py", "_sql"):
        t = wh.create_table(name + suffix, {"x": "bigint", "s": "string"})
        for b in range(2):
            xs = list(range(b * 100, b * 100 + 10))
            t.append(
                pa.table({"x": xs, "s": [f"s{x}" for x in xs]}), f"b{b}", target_fragment_rows=4
            )
        t.delete(pc.field("x") < 3)
        out.append(t)
    return out[0], out[1]


def _rows(spark: Any, sql: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.sql(sql).collect()]


def _same(results: list[MaintenanceResult], rows: list[dict[str, Any]]) -> None:
    """The CALL's rows say what ``Table.maintain``'s results say."""
    assert [
        {"job": r.job, "status": r.outcome, "branch": r.plan.branch,
         "base_version": r.plan.base_version, "version": r.version,
         "actions": len(r.plan.actions),
         "summary": {k: v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
                     for k, v in r.summary.items()}}
        for r in results
    ] == rows  # fmt: skip


def _data(t: omnitable.Table) -> list[dict[str, Any]]:
    return sorted(t.read(columns=["x", "s"]).to_pylist(), key=lambda r: r["x"])


def test_compact_and_fold_equal_maintain(
    spark: Any, wh: omnitable.Warehouse, catalog: str, name: str
) -> None:
    py, sql = _twins(wh, name)
    want = py.maintain(
        ["compact"], dry_run=True, options={"compact": {"target_fragment_rows": 100}}
    )
    got = _rows(spark, f"CALL {catalog}.system.compact('{sql.name}', 2, 100, NULL, NULL, true)")
    _same(want, got)
    assert got[0]["status"] == "dry_run" and got[0]["actions"] == 2
    assert sql.version == py.version  # a dry run commits nothing

    want = py.maintain(["compact"], options={"compact": {"target_fragment_rows": 100}})
    got = _rows(
        spark,
        f"CALL {catalog}.system.compact(table => '{sql.name}', target_fragment_rows => 100, "
        "batches => array('b0', 'b1'))",
    )
    _same(want, got)
    assert got[0]["status"] == "committed" and sql.version == got[0]["version"]
    assert _data(sql) == _data(py)

    sql.delete(pc.field("x") >= 105)
    py.delete(pc.field("x") >= 105)
    want = py.maintain(["fold"], options={"fold": {"min_deleted_fraction": 0.2}})
    got = _rows(spark, f"CALL {catalog}.system.fold('{sql.name}', min_deleted_fraction => 0.2)")
    _same(want, got)
    assert got[0]["status"] == "committed"
    assert _data(sql) == _data(py)


def test_maintain_expire_and_orphans_equal_maintain(
    spark: Any, wh: omnitable.Warehouse, catalog: str, name: str
) -> None:
    py, sql = _twins(wh, name)
    jobs = ["compact", "expire", "orphans"]
    options = {"expire": {"retain_last": 1}, "orphans": {"min_age_s": 0}}
    want = py.maintain(jobs, options=options)
    got = _rows(
        spark,
        f"CALL {catalog}.system.maintain('{sql.name}', array('compact', 'expire', 'orphans'), "
        f"options => '{json.dumps(options)}')",
    )
    _same(want, got)
    assert [r["status"] for r in got] == ["committed", "committed", "nothing_to_do"]
    assert int(got[1]["summary"]["files_deleted"]) > 0  # the compacted files are freed
    assert _data(sql) == _data(py)
    history = _rows(spark, f"SELECT version, expired FROM {catalog}.{sql.name}.history")
    assert history == [{"version": c.version, "expired": c.expired} for c in sql.history()]
    assert any(r["expired"] for r in history) and not history[0]["expired"]

    got = _rows(spark, f"CALL {catalog}.system.expire_versions('{sql.name}', '0 seconds', 1)")
    assert got[0]["job"] == "expire"
    got = _rows(spark, f"CALL {catalog}.system.remove_orphan_files('{sql.name}', older_than => 0)")
    assert got[0]["job"] == "orphans" and got[0]["status"] == "nothing_to_do"


def test_failed_call_leaves_the_table_unchanged(
    spark: Any, wh: omnitable.Warehouse, catalog: str, name: str
) -> None:
    _, t = _twins(wh, name)
    version, files, data = t.version, data_files(t), _data(t)
    spark.conf.set(FAILPOINT_CONF, "governance.before_commit=raise")
    with pytest.raises(Exception, match="OMNITABLE_PROCEDURE_FAILED") as info:
        spark.sql(
            f"CALL {catalog}.system.compact('{t.name}', target_fragment_rows => 100)"
        ).collect()
    assert "governance.before_commit" in str(info.value)
    spark.conf.unset(FAILPOINT_CONF)
    t = wh.table(t.name)
    assert (t.version, data_files(t), _data(t)) == (version, files, data)
    with pytest.raises(Exception, match="OMNITABLE_NOT_FOUND"):
        spark.sql(f"CALL {catalog}.system.compact('{t.name}_missing')").collect()


def test_call_governs_its_own_catalog(spark: Any, tmp_path: Path, name: str) -> None:
    whs = [omnitable.connect(str(tmp_path / w)) for w in ("one", "two")]
    tables = [_twins(w, name)[0] for w in whs]
    catalogs = [bind_catalog(spark, w) for w in whs]
    versions = [t.version for t in tables]
    got = _rows(
        spark, f"CALL {catalogs[1]}.system.compact('{tables[1].name}', target_fragment_rows => 100)"
    )
    assert got[0]["status"] == "committed"
    assert whs[1].table(tables[1].name).version == got[0]["version"] == versions[1] + 1
    assert whs[0].table(tables[0].name).version == versions[0]
    for w in whs:
        w.close()


def test_a_call_runs_each_job_under_its_lease(
    spark: Any, wh: omnitable.Warehouse, catalog: str, name: str
) -> None:
    """A service holds compact's lease: the CALL runs nothing (``leased``, the holder in the
    summary); once free the CALL takes it, commits and releases it. A NULL element of an array
    argument is refused before anything runs."""
    _, t = _twins(wh, name)
    store, tid = wh.catalog.store, t.record.table_id
    held = acquire(store, tid, "compact", "service-A", 60)
    assert isinstance(held, Lease)
    version, files = t.version, data_files(t)
    call = f"CALL {catalog}.system.maintain('{t.name}', array('compact', 'orphans'))"
    compact, orphans = _rows(spark, call)
    assert (compact["status"], compact["version"], compact["actions"]) == ("leased", None, 0)
    assert compact["summary"]["holder"] == "service-A" and compact["base_version"] == version
    assert orphans["status"] == "nothing_to_do"  # the other jobs still run
    t = wh.table(t.name)
    assert (t.version, data_files(t)) == (version, files)
    with pytest.raises(Exception, match="'batches' has a NULL element at position 2 of 2"):
        spark.sql(
            f"CALL {catalog}.system.compact('{t.name}', batches => array('b0', NULL))"
        ).collect()
    assert release(store, held)
    (got,) = _rows(spark, f"CALL {catalog}.system.compact('{t.name}')")
    assert got["status"] == "committed" and wh.table(t.name).version == version + 1
    assert holder(store, tid, "compact") is None  # released
