"""``CALL <catalog>.system.revert`` of a keyed table in the JVM against Python's ``Table.revert``
(docs/spark.md, "Procedures"; revert.py ``_check_revived_keys``), on SQLite and PostgreSQL
(``wh``) with the shared local session: twin keyed tables built by the same Python steps, one
reverted by Python and one by the CALL, end equal (rows, keys, fragments and deleted rows,
history) or fail with Python's message and commit nothing; a Python upsert landing while the CALL
is paused before its commit makes it check the keys again (another key: it commits; the key it
brings back: it conflicts)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import omnitable
from omnitable.spark.session import CATALOG_CLASS, warehouse_string

pytestmark = [pytest.mark.spark, pytest.mark.shared_warehouse]

Steps = Callable[[omnitable.Table], int]  # builds the history, returns the version to revert


def _catalog(spark: Any, wh: omnitable.Warehouse) -> str:
    name = f"omt_{uuid.uuid4().hex[:8]}"
    spark.conf.set(f"spark.sql.catalog.{name}", CATALOG_CLASS)
    spark.conf.set(f"spark.sql.catalog.{name}.warehouse", warehouse_string(wh))
    return name


def _keyed(wh: omnitable.Warehouse, prefix: str) -> omnitable.Table:
    t = wh.create_table(
        f"{prefix}_{uuid.uuid4().hex[:8]}", {"url": "string", "label": "bigint"}, key="url"
    )
    t.upsert(pa.table({"url": ["a", "b", "c"], "label": [1, 2, 3]}), append_name="u0")
    return t


def _upsert(t: omnitable.Table, **kv: int) -> None:
    t.upsert(pa.table({"url": list(kv), "label": list(kv.values())}), append_name=f"u{t.version}")


def _delete(t: omnitable.Table, url: str) -> int:
    version = t.delete(pc.field("url") == url).version
    assert version is not None
    return version


def _state(t: omnitable.Table) -> dict[str, Any]:
    snap = t.snapshot()
    urls = sorted(r["url"] for r in t.read(["url"]).to_pylist())
    return {
        "rows": sorted((r["url"], r["label"]) for r in t.read(["url", "label"]).to_pylist()),
        "count": t.count(),
        "lookup": t.lookup(urls, ["url", "label"]).to_pylist() if urls else [],
        "fragments": [_fragment(snap, f) for f in snap.fragments],
        "history": [(c.version, c.op, c.summary) for c in t.history()],
    }


def _fragment(snap: Any, f: Any) -> tuple[Any, ...]:
    dv = snap.deletion(f.fragment_id)
    return (f.batch_name, f.seq, f.row_count, None if dv is None else dv.vector)


def _revert_a_delete(t: omnitable.Table) -> int:
    v = _delete(t, "b")
    _upsert(t, d=4)
    return v


def _revert_a_delete_of_a_key_upserted_again(t: omnitable.Table) -> int:
    v = _delete(t, "b")
    _upsert(t, b=20)  # b is live again: the revert would duplicate it
    return v


def _revert_an_upsert(t: omnitable.Table) -> int:
    _upsert(t, d=4, a=10)
    return t.version


def _revert_a_delete_after_an_insert(t: omnitable.Table) -> int:
    t.upsert(pa.table({"url": ["e"], "label": [5]}), append_name="u1")
    _delete(t, "a")
    return t.version


STEPS: dict[str, Steps] = {
    "delete": _revert_a_delete,
    "delete_upserted_again": _revert_a_delete_of_a_key_upserted_again,
    "upsert": _revert_an_upsert,
    "delete_after_insert": _revert_a_delete_after_an_insert,
}


def _outcome(run: Callable[[], object]) -> str | None:
    try:
        run()
    except Exception as exc:  # the message is compared
        return str(exc)
    return None


@pytest.mark.parametrize("name", sorted(STEPS))
def test_a_keyed_revert_by_call_equals_python(
    spark: Any, wh: omnitable.Warehouse, name: str
) -> None:
    py, jv = _keyed(wh, "py"), _keyed(wh, "jv")
    version = STEPS[name](py)
    assert STEPS[name](jv) == version
    c = _catalog(spark, wh)
    before = _state(jv)
    expected = _outcome(lambda: py.revert(version))
    got = _outcome(lambda: spark.sql(f"CALL {c}.system.revert('{jv.name}', {version})").collect())
    if expected is None:
        assert got is None
        assert _state(jv) == _state(py)
    else:
        assert got is not None and expected.replace(py.name, jv.name) in got, (expected, got)
        assert "OMNITABLE_COMMIT_CONFLICT" in got
        assert _state(jv) == before
    assert (expected is not None) == (name == "delete_upserted_again")


@pytest.mark.parametrize("racer", ["other_key", "same_key"])
def test_an_upsert_during_the_call_makes_it_check_the_keys_again(
    spark: Any, wh: omnitable.Warehouse, tmp_path: Path, pause_call: Any, racer: str
) -> None:
    """The CALL checked its keys and paused before its commit; a Python upsert commits; the
    CALL's commit finds rows changed since the version it checked and checks again: an upsert of
    another key lets it commit, one of the key it brings back makes it conflict (Python's
    message), nothing committed."""
    t = _keyed(wh, "jv")
    deleted = _delete(t, "c")
    c = _catalog(spark, wh)
    try:
        thread, out = pause_call(
            spark,
            f"CALL {c}.system.revert('{t.name}', {deleted})",
            "revert.before_commit",
        )
        _upsert(t, **({"d": 4} if racer == "other_key" else {"c": 30}))
        (tmp_path / "revert.before_commit.go").touch()
        thread.join(120)
    finally:
        spark.conf.unset("spark.omnitable.test.failpoint")
    rows = sorted((r["url"], r["label"]) for r in t.read(["url", "label"]).to_pylist())
    if racer == "other_key":
        assert "error" not in out, out
        assert out["row"]["op"] == "revert" and t.history(limit=1)[0].op == "revert"
        assert rows == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
        assert t.lookup(["d", "c"], ["url"]).column("url").to_pylist() == ["d", "c"]
    else:
        assert "OMNITABLE_COMMIT_CONFLICT" in out.get("error", ""), out
        assert "bring back 1 row(s) whose keys live rows hold again (e.g. key 'c'," in out["error"]
        assert rows == [("a", 1), ("b", 2), ("c", 30)] and t.history(limit=1)[0].op == "upsert"
