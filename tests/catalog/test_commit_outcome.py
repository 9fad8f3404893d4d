"""A lost connection during COMMIT: the writer asks the catalog (by the commit's token) whether
the commit landed before deleting any file it wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import omnitable
from omnitable.exceptions import CatalogError, CommitOutcomeUnknown


def data_files(t: omnitable.Table) -> set[Path]:
    root = Path(t.location.path)
    return {p for p in root.rglob("*") if p.is_file() and not {"errors", "_access"} & set(p.parts)}


def test_commit_that_landed_before_the_connection_dropped_keeps_its_files(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = wh.create_table("t", {"x": "double"})
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "commit.after_commit=disconnect")
    version = t.append(pa.table({"x": [1.0, 2.0, 3.0]}), "b", target_fragment_rows=2)
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert version == 1 == t.version
    assert t.read(columns=["x"]).column("x").to_pylist() == [1.0, 2.0, 3.0]
    assert len(data_files(t)) == 2
    assert wh.catalog.list_runs(t.record)[0]["status"] == "succeeded"


def test_commit_that_did_not_land_deletes_its_files(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = wh.create_table("t", {"x": "double"})
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "commit.before_end=disconnect")
    with pytest.raises(CatalogError, match="server closed the connection"):
        t.append(pa.table({"x": [1.0, 2.0, 3.0]}), "b")
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert t.version == 0
    assert data_files(t) == set()
    assert wh.catalog.list_runs(t.record)[0]["status"] == "failed"


@pytest.mark.parametrize(
    "also_lost",
    [
        "",
        # the catalog is still away when the append records its failed run: the caller must
        # still get CommitOutcomeUnknown (with its token), not the run bookkeeping's CatalogError
        ",run.finish=disconnect",
    ],
    ids=["lookup", "lookup-and-run"],
)
def test_unreachable_catalog_after_a_lost_commit_keeps_the_files(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch, also_lost: str
) -> None:
    t = wh.create_table("t", {"x": "double"})
    monkeypatch.setenv(
        "OMNITABLE_FAILPOINTS",
        "commit.after_commit=disconnect,commit.lookup=disconnect" + also_lost,
    )
    with pytest.raises(CommitOutcomeUnknown, match="files were kept") as err:
        t.append(pa.table({"x": [1.0, 2.0]}), "b")
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    # the commit did land: its files must still be there, and the token finds it
    assert t.version == 1
    assert t.read(columns=["x"]).column("x").to_pylist() == [1.0, 2.0]
    with wh.catalog.store.read() as conn:
        from omnitable.catalog.commit import find_commit

        assert find_commit(conn, t.record.table_id, err.value.token) == 1


def test_add_columns_whose_commit_landed_returns_its_version(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = wh.create_table("t", {"x": "double"})
    t.append(pa.table({"x": [1.0, 2.0]}), "b")
    ids = t.read(columns=["_ai_unique_id_"]).column(0)
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "commit.after_commit=disconnect")
    version = t.add_columns(pa.table({"_ai_unique_id_": ids, "y": [3.0, 4.0]}))
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert version == 2 == t.version
    assert t.read(columns=["y"]).column("y").to_pylist() == [3.0, 4.0]


def test_lookup_does_not_wait_forever_for_a_lost_transaction_the_server_still_holds(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL may keep a lost client's transaction (and its table lock) open until it notices
    the dead connection, possibly hours later: the lookup gives up with CommitOutcomeUnknown."""
    if wh.catalog.store.is_sqlite:
        pytest.skip("SQLite's lock wait is bounded by its busy timeout")
    import threading

    from sqlalchemy import text

    from omnitable._failpoints import hooked
    from omnitable.catalog import catalog as catalog_module

    monkeypatch.setattr(catalog_module, "LOOKUP_LOCK_TIMEOUT_S", 0.5, raising=False)
    t = wh.create_table("t", {"x": "double"})
    holder = wh.catalog.store.engine.connect()
    holder_tx = holder.begin()
    outcome: dict[str, object] = {}

    def hold_table_lock() -> None:  # what the server-side lost transaction would still hold
        wh.catalog.store.lock_table(holder, t.record.table_id)

    def append() -> None:
        try:
            outcome["version"] = t.append(pa.table({"x": [1.0]}), "b")
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc
        outcome["while_held"] = holder_tx.is_active

    monkeypatch.setenv("OMNITABLE_FAILPOINTS", "commit.after_commit=disconnect")
    with hooked("commit.after_commit", hold_table_lock):
        writer = threading.Thread(target=append)
        writer.start()
        writer.join(60)
        holder_tx.rollback()
        holder.close()
        writer.join()
    monkeypatch.delenv("OMNITABLE_FAILPOINTS")
    assert isinstance(outcome.get("error"), CommitOutcomeUnknown), outcome
    assert outcome["while_held"] is True
    assert t.version == 1  # it had landed: its files were kept
    assert t.read(columns=["x"]).column("x").to_pylist() == [1.0]
    with wh.catalog.store.read() as conn:
        assert conn.execute(text("SELECT count(*) FROM commits")).scalar() == 2
