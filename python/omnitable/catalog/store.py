"""The catalog database: connections, schema creation and version check, transactions.

:class:`CatalogStore` hides the two backends' differences: SQLite (WAL mode, ``BEGIN IMMEDIATE``
for writers) and PostgreSQL (row lock on the table for writers, repeatable-read snapshots for
readers). Driver errors are translated into :class:`~omnitable.exceptions.CatalogError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

from omnitable._failpoints import failpoint
from omnitable.catalog import namespaces
from omnitable.catalog.address import CatalogAddress
from omnitable.catalog.commit_sql import sql
from omnitable.exceptions import CatalogError, CatalogVersionError

SQLITE_BUSY_TIMEOUT_MS = 60_000


def schema_script() -> str:
    """The text of schema.sql, the single versioned schema file."""
    return resources.files("omnitable.catalog").joinpath("schema.sql").read_text("utf-8")


def schema_statements() -> list[str]:
    """schema.sql split into statements (separated by lines holding a single ';')."""
    parts = re.split(r"^;\s*$", schema_script(), flags=re.MULTILINE)
    out = []
    for part in parts:
        body = "\n".join(line for line in part.splitlines() if not line.strip().startswith("--"))
        if body.strip():
            out.append(body.strip())
    return out


def schema_version() -> int:
    """The schema version this software ships (from schema.sql's version line)."""
    m = re.search(r"omnitable-schema-version:\s*(\d+)", schema_script())
    if not m:  # pragma: no cover - guarded by tests on the shipped file
        raise CatalogError("schema.sql has no 'omnitable-schema-version' line")
    return int(m.group(1))


class CatalogStore:
    """Connections to one catalog database.

    Args:
        address: where the catalog lives.
    """

    def __init__(self, address: CatalogAddress) -> None:
        self.address = address
        self.engine = self._create_engine()

    @property
    def is_sqlite(self) -> bool:
        return self.address.is_sqlite

    def _create_engine(self) -> Engine:
        url = self.address.connect_url()
        if self.is_sqlite:
            assert self.address.sqlite_dir is not None
            self.address.sqlite_dir.mkdir(parents=True, exist_ok=True)
            engine = create_engine(
                url,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "isolation_level": None},
            )

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Connection) -> None:
                write = conn.get_execution_options().get("omnitable_write", False)
                conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

            return engine
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 15})

    def close(self) -> None:
        self.engine.dispose()

    # -- schema ---------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the schema if absent (idempotent) and check its version.

        Raises:
            CatalogVersionError: the database holds another schema version.
        """
        with self.write() as conn:
            exists = self._has_meta(conn)
            if exists:
                found = conn.execute(
                    text("SELECT value FROM omnitable_meta WHERE key = 'schema_version'")
                ).scalar()
                self._check_version(found)
                return
            for stmt in schema_statements():
                conn.execute(text(stmt))
            namespaces.ensure_default(conn)
            conn.execute(
                text("INSERT INTO omnitable_meta (key, value) VALUES ('schema_version', :v)"),
                {"v": str(schema_version())},
            )

    def _has_meta(self, conn: Connection) -> bool:
        if self.is_sqlite:
            q = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'omnitable_meta'"
        else:
            q = (
                "SELECT 1 FROM information_schema.tables WHERE table_name = 'omnitable_meta' "
                "AND table_schema = current_schema()"
            )
        return conn.execute(text(q)).first() is not None

    def _check_version(self, found: Any) -> None:
        expected = schema_version()
        if found is None or str(found) != str(expected):
            older = str(found).isdigit() and int(str(found)) < expected
            what = (
                "upgrade it in place with `omnitable -w ADDRESS upgrade-catalog` (or "
                "omnitable.upgrade_catalog(ADDRESS)); every client must then use this release"
                if older
                else "use the omnitable release that matches it"
            )
            raise CatalogVersionError(
                f"Cannot open catalog {self.address.redacted()}: it has schema version {found}, "
                f"this omnitable needs version {expected}; {what}"
            )

    def get_meta(self, key: str) -> str | None:
        with self.read() as conn:
            return conn.execute(
                text("SELECT value FROM omnitable_meta WHERE key = :k"), {"k": key}
            ).scalar()

    def set_meta_if_absent(self, key: str, value: str) -> str:
        """Store ``key`` unless present; returns the stored value."""
        with self.write() as conn:
            found = conn.execute(
                text("SELECT value FROM omnitable_meta WHERE key = :k"), {"k": key}
            ).scalar()
            if found is not None:
                return str(found)
            conn.execute(
                text("INSERT INTO omnitable_meta (key, value) VALUES (:k, :v)"),
                {"k": key, "v": value},
            )
            return value

    # -- transactions ----------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A consistent read-only snapshot of the catalog for the duration of the block."""
        with self._translate_errors("read"):
            if self.is_sqlite:
                with self.engine.connect() as conn, conn.begin():
                    yield conn
            else:
                with (
                    self.engine.connect().execution_options(
                        isolation_level="REPEATABLE READ"
                    ) as conn,
                    conn.begin(),
                ):
                    yield conn

    @contextmanager
    def write(self, failpoints: str | None = None) -> Iterator[Connection]:
        """A write transaction; commits when the block ends, rolls back on any exception.

        On SQLite the transaction holds the database write lock from its first statement.
        On PostgreSQL, callers serialize per table with :meth:`lock_table`. ``failpoints``
        names the ``<failpoints>.after_commit`` fault-injection point (tests only).
        """
        with (
            self._translate_errors("write"),
            self.engine.connect().execution_options(omnitable_write=True) as conn,
        ):
            with conn.begin():
                yield conn
            if failpoints is not None:
                failpoint(f"{failpoints}.after_commit")

    def lock_table(self, conn: Connection, table_id: str) -> None:
        """Serialize commits on one table (no-op on SQLite, whose writers are serialized)."""
        if not self.is_sqlite:
            conn.execute(text(sql("lock_table")), {"t": table_id})

    @contextmanager
    def _translate_errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except (OperationalError, DBAPIError) as exc:
            if exc.connection_invalidated or isinstance(exc, OperationalError):
                raise CatalogError(
                    f"Cannot {what} catalog {self.address.redacted()}: {_first_line(exc)}"
                ) from exc
            raise
        except SQLAlchemyError as exc:
            raise CatalogError(
                f"Cannot {what} catalog {self.address.redacted()}: {_first_line(exc)}"
            ) from exc


def _first_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    msg = str(orig if orig is not None else exc).strip().splitlines()
    return msg[0] if msg else type(exc).__name__
