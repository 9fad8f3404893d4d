"""Table locations are unique per table id: purging a dropped table never touches the files of
a table re-created under the same name."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import omnitable

POINT = "warehouse.before_purge"


def test_purge_of_a_dropped_table_keeps_a_concurrently_recreated_table(
    wh: omnitable.Warehouse, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    old = wh.create_table("t", {"x": "double"})
    old.append(pa.table({"x": [1.0]}), "old")
    monkeypatch.setenv("OMNITABLE_FAILPOINTS", f"{POINT}=pause:{tmp_path}")
    dropper = threading.Thread(target=wh.drop_table, args=("t",))
    dropper.start()
    deadline = time.monotonic() + 120
    while not (tmp_path / f"{POINT}.reached").exists():  # dropped in the catalog, not purged
        assert dropper.is_alive() and time.monotonic() < deadline
        time.sleep(0.02)
    new = wh.create_table("t", {"x": "double"})
    new.append(pa.table({"x": [2.0, 3.0]}), "new")
    (tmp_path / f"{POINT}.go").touch()
    dropper.join(120)
    assert wh.table("t").read(columns=["x"]).column("x").to_pylist() == [2.0, 3.0]
    assert new.record.location != old.record.location
    assert new.record.table_id in new.record.location
    assert not Path(old.location.path).exists()


def test_reader_holding_a_snapshot_of_a_dropped_table(wh: omnitable.Warehouse) -> None:
    kept = wh.create_table("kept", {"x": "double"})
    kept.append(pa.table({"x": [1.0]}), "b")
    kept_snap = kept.snapshot()
    purged = wh.create_table("purged", {"x": "double"})
    purged.append(pa.table({"x": [1.0]}), "b")
    purged_snap = purged.snapshot()
    wh.drop_table("kept", purge=False)
    wh.drop_table("purged")
    from omnitable.format.reader import FragmentReader

    # purge=False: a held snapshot still reads; purge=True: it fails (the files are gone)
    assert FragmentReader(kept.location, kept_snap).read(["x"])[0].num_rows == 1
    with pytest.raises(omnitable.CorruptInputError, match="No such file"):
        FragmentReader(purged.location, purged_snap).read(["x"])
