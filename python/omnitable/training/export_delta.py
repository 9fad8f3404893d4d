"""``Table.export_delta``: the incremental, exactly-once export to a Delta table (deltalake).

The export's version is a Delta transaction (app id ``omnitable:<table id>``, version) in the
commit that writes its rows, so a re-run of a finished export finds it and does nothing. An
incremental export that deletes rows commits twice: the delete of the affected rows, then the
append with the transaction; a crash between them leaves the target resumable (the next export
deletes nothing more and appends the rows).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import OmniTableError
from omnitable.format.fs import Location
from omnitable.training.export import (
    BRANCH_KEY,
    TABLE_ID_KEY,
    TABLE_NAME_KEY,
    VERSION_KEY,
    ExportResult,
    check_owner,
    check_version,
    local_target,
    plan_changes,
    require,
    stream,
)
from omnitable.vocabulary.names import ROW_ID

_DELETE_CHUNK = 10_000
# the table id is in the description from the creating commit on (deltalake cannot create a
# table with custom properties); the properties follow in the next commit
_DESCRIPTION = "OmniTable export of table id "  # row ids per delete predicate


def export_delta(
    location: Location,
    snap: Snapshot,
    load_snapshot: Callable[[int], Snapshot],
    path: object,
    storage_options: dict[str, str] | None = None,
) -> ExportResult:
    """Bring the Delta table at ``path`` to ``snap`` (create it, or apply the changes since the
    version it holds).

    Raises:
        ValidationError: the target holds another table, a newer version, or is not Delta.
        ImportError: deltalake is not installed.
    """
    deltalake = require("deltalake")
    table, table_id = snap.table.name, snap.table.table_id
    uri = local_target(path, table)
    app = f"omnitable:{table_id}"
    existing = _open(deltalake, uri, storage_options)
    previous: int | None = None
    if existing is not None:
        check_owner(_owner(existing), table_id, uri, table)
        previous = existing.transaction_version(app)
    check_version(previous, snap.version, uri, table)
    if previous == snap.version:
        return ExportResult(uri, snap.version, previous, "unchanged", 0, 0)
    old = _old_snapshot(load_snapshot, previous)
    plan = plan_changes(location, old, snap)
    meta = {VERSION_KEY: str(snap.version), TABLE_ID_KEY: table_id, BRANCH_KEY: snap.branch or ""}
    props = deltalake.CommitProperties(
        custom_metadata=meta, app_transactions=[deltalake.Transaction(app, snap.version)]
    )
    data, produced = stream(location, snap, plan.write)
    deleted = 0
    if existing is None:
        deltalake.write_deltalake(uri, data, mode="error", name=table,
                                  description=f"{_DESCRIPTION}{table_id}",
                                  commit_properties=props, storage_options=storage_options)  # fmt: skip
        created = deltalake.DeltaTable(uri, storage_options=storage_options)
        config = {TABLE_ID_KEY: table_id, TABLE_NAME_KEY: table}
        created.alter.set_table_properties(config, raise_if_not_exists=False)
    elif plan.full:
        deltalake.write_deltalake(existing, data, mode="overwrite", schema_mode="overwrite",
                                  commit_properties=props)  # fmt: skip
    else:
        deleted = _delete(deltalake, existing, plan.delete_ids, meta)
        deltalake.write_deltalake(existing, data, mode="append", commit_properties=props)
    mode = "full" if plan.full else "incremental"
    return ExportResult(uri, snap.version, previous, mode, produced[0], deleted)


def _owner(target: Any) -> str | None:
    """The OmniTable table id a Delta table was exported from (None: not an export)."""
    meta = target.metadata()
    found = meta.configuration.get(TABLE_ID_KEY)
    if found is None and (meta.description or "").startswith(_DESCRIPTION):
        found = meta.description[len(_DESCRIPTION) :]
    return found


def _open(deltalake: Any, uri: str, storage_options: dict[str, str] | None) -> Any:
    if not deltalake.DeltaTable.is_deltatable(uri, storage_options):
        return None
    return deltalake.DeltaTable(uri, storage_options=storage_options)


def _old_snapshot(load: Callable[[int], Snapshot], version: int | None) -> Snapshot | None:
    """The snapshot the target holds (None: none, or no longer loadable — then the export
    rewrites the target)."""
    if version is None:
        return None
    try:
        return load(version)
    except OmniTableError:
        return None


def _delete(deltalake: Any, target: Any, ids: np.ndarray, meta: dict[str, str]) -> int:
    """Delete the rows with these ids (in chunks of ids per predicate); returns rows deleted."""
    deleted = 0
    ids = np.unique(ids)
    for start in range(0, len(ids), _DELETE_CHUNK):
        chunk = ids[start : start + _DELETE_CHUNK]
        predicate = f"{ROW_ID} IN ({', '.join(str(int(i)) for i in chunk)})"
        props = deltalake.CommitProperties(custom_metadata={**meta, "omnitable.step": "delete"})
        metrics = target.delete(predicate, commit_properties=props)
        deleted += int(metrics.get("num_deleted_rows", 0) or 0)
    return deleted
