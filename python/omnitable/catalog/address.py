"""Warehouse addresses: where the catalog database is and how to open it.

A warehouse string is a directory (SQLite ``catalog.db`` inside, data root = the directory), a
``sqlite:///…`` URL, or a ``postgresql://user:password@host:port/db`` URL whose password may be
``env:NAME`` (read from the environment when a connection opens, never stored or logged).
The JVM reader implements the same rules (docs/catalog.md, "Addressing a catalog").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from omnitable.exceptions import ValidationError

DEFAULT_WAREHOUSE = "omnitable-warehouse"
SQLITE_FILE = "catalog.db"
_SCHEMES = ("sqlite", "postgresql", "postgres")


@dataclass(frozen=True)
class CatalogAddress:
    """A parsed warehouse address.

    Attributes:
        url: SQLAlchemy URL with the password still unresolved (``env:NAME`` or literal).
        sqlite_dir: for SQLite catalogs, the directory holding the file (the default root).
    """

    url: URL
    sqlite_dir: Path | None

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_backend_name() == "sqlite"

    def connect_url(self) -> URL:
        """The URL to connect with: ``env:NAME`` passwords resolved now, psycopg driver chosen."""
        url = self.url
        if url.get_backend_name() == "postgresql":
            url = url.set(drivername="postgresql+psycopg")
            password = url.password
            if isinstance(password, str) and password.startswith("env:"):
                name = password[4:]
                value = os.environ.get(name)
                if value is None:
                    raise ValidationError(
                        f"Cannot open catalog {self.redacted()}: the password refers to environment "
                        f"variable {name}, which is not set"
                    )
                url = url.set(password=value)
        return url

    def redacted(self) -> str:
        """The address with any password hidden, safe for messages and logs."""
        return self.url.render_as_string(hide_password=True)

    def warehouse_string(self) -> str:
        """The address as a string other processes (Spark, the JVM, CLI) can be given.

        Literal passwords are kept (they are needed to connect); prefer ``env:NAME``.
        """
        if self.sqlite_dir is not None and self.url.database == str(self.sqlite_dir / SQLITE_FILE):
            return str(self.sqlite_dir)
        rendered = self.url.render_as_string(hide_password=False)
        password = self.url.password
        if isinstance(password, str) and password.startswith("env:"):
            rendered = rendered.replace("env%3A", "env:", 1)
        return rendered

    def __repr__(self) -> str:
        return f"CatalogAddress({self.redacted()})"


def parse_address(uri: str | os.PathLike[str] | None) -> CatalogAddress:
    """Parse a warehouse string (see module doc). ``None`` means ``./omnitable-warehouse``.

    Raises:
        ValidationError: for unknown schemes or malformed URLs.
    """
    if uri is None:
        uri = DEFAULT_WAREHOUSE
    text = os.fspath(uri)
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("Cannot open warehouse: the address is empty")
    if "://" not in text:
        directory = Path(text).expanduser().resolve()
        if directory.exists() and not directory.is_dir():
            raise ValidationError(
                f"Cannot open warehouse '{text}': it is a file, not a directory; pass the "
                "warehouse directory or a sqlite:/// URL"
            )
        return CatalogAddress(
            URL.create("sqlite", database=str(directory / SQLITE_FILE)), directory
        )
    scheme = text.split("://", 1)[0].split("+", 1)[0].lower()
    if scheme not in _SCHEMES:
        raise ValidationError(
            f"Cannot open warehouse '{text.split('://', 1)[0]}://…': unsupported scheme; use a "
            "directory, sqlite:///path.db or postgresql://user:env:PASSWORD_VAR@host/db"
        )
    try:
        url = make_url(text)
    except ArgumentError as exc:
        raise ValidationError(f"Cannot open warehouse: malformed URL ({exc})") from None
    if scheme == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValidationError(
                "Cannot open warehouse: an in-memory SQLite catalog cannot be shared with "
                "Spark or other processes; give a file path (sqlite:///path/catalog.db)"
            )
        path = Path(url.database).expanduser().resolve()
        return CatalogAddress(URL.create("sqlite", database=str(path)), path.parent)
    if scheme == "postgres":
        url = url.set(drivername="postgresql")
    url = url.set(drivername="postgresql")
    if not url.database:
        raise ValidationError(f"Cannot open warehouse {url.render_as_string()}: no database name")
    return CatalogAddress(url, None)
