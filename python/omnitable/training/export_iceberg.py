"""``Table.export_iceberg``: the incremental, exactly-once export to an Iceberg table in a
pyiceberg SQL catalog (SQLite, or the warehouse's own PostgreSQL database).

Each export is one Iceberg transaction (the delete of affected rows and the append of new ones
commit together, or not at all); its snapshots carry the summary property
``omnitable.version``, which a re-run reads to do nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omnitable.catalog.snapshot import Snapshot
from omnitable.exceptions import ValidationError
from omnitable.format.fs import Location
from omnitable.training.export import (
    BRANCH_KEY,
    TABLE_ID_KEY,
    TABLE_NAME_KEY,
    VERSION_KEY,
    ExportResult,
    check_owner,
    check_version,
    export_schema,
    plan_changes,
    require,
    stream,
)
from omnitable.training.export_delta import _old_snapshot
from omnitable.vocabulary.names import ROW_ID, check_table_name


def export_iceberg(
    location: Location,
    snap: Snapshot,
    load_snapshot: Callable[[int], Snapshot],
    catalog_uri: str,
    name: str,
    warehouse: str,
) -> ExportResult:
    """Bring the Iceberg table ``name`` to ``snap`` (create it, or apply the changes since the
    version it holds) in one transaction.

    Raises:
        ValidationError: bad name or URI; the target holds another table or a newer version.
        ImportError: pyiceberg is not installed.
    """
    table = snap.table.name
    ident = _identifier(name, table)
    catalog = _catalog(catalog_uri, warehouse, table)
    try:
        return _export(catalog, location, snap, load_snapshot, ident)
    finally:
        catalog.engine.dispose()  # no pooled connection outlives the export


def _export(
    catalog: Any,
    location: Location,
    snap: Snapshot,
    load_snapshot: Callable[[int], Snapshot],
    ident: tuple[str, str],
) -> ExportResult:
    table, table_id = snap.table.name, snap.table.table_id
    exceptions = require("pyiceberg.exceptions")
    target = f"Iceberg table {'.'.join(ident)}"
    try:
        existing = catalog.load_table(ident)
    except exceptions.NoSuchTableError:
        existing = None
    previous: int | None = None
    if existing is not None:
        check_owner(existing.properties.get(TABLE_ID_KEY), table_id, target, table)
        previous = _exported_version(existing)
    check_version(previous, snap.version, target, table)
    if previous == snap.version:
        return ExportResult(target, snap.version, previous, "unchanged", 0, 0)
    plan = plan_changes(location, _old_snapshot(load_snapshot, previous), snap)
    props = {VERSION_KEY: str(snap.version), TABLE_ID_KEY: table_id, BRANCH_KEY: snap.branch or ""}
    data, produced = stream(location, snap, plan.write)
    deleted = 0
    if existing is None:
        catalog.create_namespace_if_not_exists(ident[0])
        properties = {TABLE_ID_KEY: table_id, TABLE_NAME_KEY: table}
        schema = export_schema(snap)
        with catalog.create_table_transaction(ident, schema, properties=properties) as tx:
            tx.append(data, snapshot_properties=props)
    else:
        with existing.transaction() as tx:
            if plan.full:
                with tx.update_schema() as update:
                    update.union_by_name(export_schema(snap))
                tx.overwrite(data, snapshot_properties=props)
            else:
                if len(plan.delete_ids):
                    expressions = require("pyiceberg.expressions")
                    ids = [int(i) for i in plan.delete_ids]
                    tx.delete(expressions.In(ROW_ID, ids), snapshot_properties=props)
                    deleted = len(ids)
                tx.append(data, snapshot_properties=props)
    mode = "full" if plan.full else "incremental"
    return ExportResult(target, snap.version, previous, mode, produced[0], deleted)


def _identifier(name: object, table: str) -> tuple[str, str]:
    parts = name.split(".") if isinstance(name, str) else []
    if len(parts) != 2:
        raise ValidationError(
            f"Cannot export table '{table}' to Iceberg: name must be 'namespace.table', "
            f"got {name!r}"
        )
    return check_table_name(parts[0]), check_table_name(parts[1])


def _catalog(uri: object, warehouse: str, table: str) -> Any:
    if not isinstance(uri, str) or "://" not in uri:
        raise ValidationError(
            f"Cannot export table '{table}' to Iceberg: catalog_uri must be a SQLAlchemy URL "
            f"(sqlite:////path/catalog.db, postgresql+psycopg://...), got {uri!r}"
        )
    sql = require("pyiceberg.catalog.sql")
    return sql.SqlCatalog("omnitable", uri=uri, warehouse=warehouse)


def _exported_version(tbl: Any) -> int | None:
    """The newest ``omnitable.version`` among the table's snapshots (None: none)."""
    for snapshot in sorted(tbl.snapshots(), key=lambda s: s.sequence_number, reverse=True):
        summary = snapshot.summary
        value = None if summary is None else summary.additional_properties.get(VERSION_KEY)
        if value is not None:
            return int(value)
    return None
