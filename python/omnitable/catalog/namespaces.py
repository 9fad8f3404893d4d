"""Namespaces: one-level groups of tables (docs/tables.md, "Namespaces").

Every function runs inside the caller's catalog transaction. ``default`` always exists (it is
created with the catalog or by the upgrade to schema 6) and cannot be dropped. A table is
created in a namespace only while the namespace row exists: the creating transaction locks that
row (PostgreSQL; SQLite serializes writers), and a drop deletes it before counting the tables,
so a concurrent create and drop never leave a table in a dropped namespace.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import Connection, text

from omnitable.exceptions import AlreadyExistsError, NotFoundError, ValidationError
from omnitable.vocabulary.names import DEFAULT_NAMESPACE, check_namespace_name


def ensure_default(conn: Connection) -> None:
    """Insert the ``default`` namespace unless present."""
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if not exists(conn, DEFAULT_NAMESPACE):
        conn.execute(
            text("INSERT INTO namespaces (name, properties, created_at) VALUES (:n, '{}', :now)"),
            {"n": DEFAULT_NAMESPACE, "now": now},
        )


def exists(conn: Connection, name: str) -> bool:
    row = conn.execute(text("SELECT 1 FROM namespaces WHERE name = :n"), {"n": name}).first()
    return row is not None


def names(conn: Connection) -> list[str]:
    return [r[0] for r in conn.execute(text("SELECT name FROM namespaces ORDER BY name"))]


def create(conn: Connection, name: str, properties: dict[str, Any], now: str) -> None:
    """Insert namespace ``name``. Raises AlreadyExistsError, ValidationError."""
    check_namespace_name(name)
    _check_properties(name, properties)
    if exists(conn, name):
        raise AlreadyExistsError(f"Cannot create namespace '{name}': it already exists")
    conn.execute(
        text("INSERT INTO namespaces (name, properties, created_at) VALUES (:n, :p, :now)"),
        {"n": name, "p": json.dumps(properties, sort_keys=True), "now": now},
    )


def properties(conn: Connection, name: str) -> dict[str, Any]:
    """The properties of namespace ``name``. Raises NotFoundError."""
    row = conn.execute(
        text("SELECT properties FROM namespaces WHERE name = :n"), {"n": name}
    ).first()
    if row is None:
        raise missing(conn, name, "find")
    return dict(json.loads(row[0]))


def lock_for_create(conn: Connection, name: str, is_sqlite: bool, table: str) -> None:
    """Hold namespace ``name`` for the creation of ``table`` in it (until the transaction ends).

    Raises:
        NotFoundError: no such namespace.
    """
    lock = "" if is_sqlite else " FOR UPDATE"
    row = conn.execute(text(f"SELECT 1 FROM namespaces WHERE name = :n{lock}"), {"n": name})
    if row.first() is None:
        raise missing(conn, name, f"create table '{table}' in")


def delete(conn: Connection, name: str) -> list[tuple[str, str]]:
    """Delete namespace ``name``'s row; returns its tables as (table_id, name) for the caller
    to drop (a cascade) or to refuse (the caller's transaction is rolled back).

    Raises:
        NotFoundError: no such namespace. ValidationError: ``default``.
    """
    check_namespace_name(name)
    if name == DEFAULT_NAMESPACE:
        raise ValidationError(
            f"Cannot drop namespace '{DEFAULT_NAMESPACE}': it holds the tables named without a "
            "namespace and always exists"
        )
    gone = conn.execute(text("DELETE FROM namespaces WHERE name = :n"), {"n": name})
    if gone.rowcount == 0:
        raise missing(conn, name, "drop")
    rows = conn.execute(
        text("SELECT table_id, name FROM tables WHERE namespace = :n ORDER BY name"), {"n": name}
    )
    return [(r[0], r[1]) for r in rows]


def missing(conn: Connection, name: str, what: str) -> NotFoundError:
    listed = ", ".join(names(conn)) or "none"
    return NotFoundError(
        f"Cannot {what} namespace '{name}': no such namespace (existing: {listed}); create it "
        f"with Warehouse.create_namespace('{name}'), `omnitable namespace create {name}` or "
        f"CREATE NAMESPACE omnitable.{name}"
    )


def _check_properties(name: str, props: object) -> None:
    if not isinstance(props, dict) or not all(isinstance(k, str) for k in props):
        raise ValidationError(
            f"Cannot create namespace '{name}': properties must be a mapping of string keys"
        )
    try:
        json.dumps(props)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"Cannot create namespace '{name}': properties must be JSON values ({exc})"
        ) from None
