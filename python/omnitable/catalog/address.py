"""Warehouse addresses: where the catalog database is and how to open it.

A warehouse string is a directory (SQLite ``catalog.db`` inside, data root = the directory), a
``sqlite:///…`` URL, or a ``postgresql://user:password@host:port/db`` URL whose password may be
``env:NAME`` (read from the environment when a connection opens, never stored or logged). Only
variables whose name starts with an allowed prefix are read (``OMNITABLE_ENV_PREFIXES``, a comma
list, default ``OMNITABLE_,PG``), so an address cannot send any other secret of this process to
the server it names. The JVM reader implements the same rules (docs/catalog.md, "Addressing a
catalog").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from omnitable.exceptions import ValidationError

DEFAULT_WAREHOUSE = "omnitable-warehouse"
SQLITE_FILE = "catalog.db"
_SCHEMES = ("sqlite", "postgresql", "postgres")
ENV_PREFIXES_VAR = "OMNITABLE_ENV_PREFIXES"
DEFAULT_ENV_PREFIXES = ("OMNITABLE_", "PG")
ENV_REFERENCE = "env:"
# Query parameters of a PostgreSQL URL that carry a secret (libpq and pgjdbc names).
SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})


def allowed_env_prefixes() -> tuple[str, ...]:
    """Prefixes an ``env:NAME`` password's variable must start with (``OMNITABLE_ENV_PREFIXES``)."""
    raw = os.environ.get(ENV_PREFIXES_VAR)
    if raw is None:
        return DEFAULT_ENV_PREFIXES
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def read_env_password(name: str, where: str) -> str:
    """The value of the allowed environment variable ``name`` (an ``env:NAME`` password).

    Raises:
        ValidationError: ``name`` is outside the allowed prefixes, or the variable is not set.
    """
    prefixes = allowed_env_prefixes()
    if not any(name.startswith(p) for p in prefixes):
        allowed = ", ".join(prefixes) or "none"
        raise ValidationError(
            f"Cannot open catalog {where}: the password refers to environment variable {name}, "
            f"which is outside the allowed prefixes ({allowed}); store the password in a variable "
            f"such as OMNITABLE_PG_PASSWORD, or add its prefix to {ENV_PREFIXES_VAR}"
        )
    value = os.environ.get(name)
    if value is None:
        raise ValidationError(
            f"Cannot open catalog {where}: the password refers to environment variable {name}, "
            "which is not set"
        )
    return value


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
            if isinstance(password, str) and password.startswith(ENV_REFERENCE):
                value = read_env_password(password[len(ENV_REFERENCE) :], self.redacted())
                url = url.set(password=value)
        return url

    def connect_params(self) -> dict[str, Any]:
        """A PostgreSQL address as DB-API keyword arguments (``psycopg.connect(**params)``):
        host, port, user, password (``env:NAME`` resolved now) and dbname."""
        url = self.connect_url()
        return {"host": url.host, "port": url.port or 5432, "user": url.username,
                "password": url.password, "dbname": url.database}  # fmt: skip

    @property
    def has_env_password(self) -> bool:
        """Whether the password is an ``env:NAME`` reference."""
        password = self.url.password
        return isinstance(password, str) and password.startswith(ENV_REFERENCE)

    @property
    def has_literal_password(self) -> bool:
        """Whether the address holds a password itself (not an ``env:NAME`` reference)."""
        literal = isinstance(self.url.password, str) and not self.has_env_password
        return literal or any(k.lower() in SECRET_QUERY_KEYS for k in self.url.query)

    def redacted(self) -> str:
        """The address with any password (user info or query parameter) hidden, safe to log."""
        url = self.url
        secret = {k: "***" for k in url.query if k.lower() in SECRET_QUERY_KEYS}
        if secret:
            url = url.update_query_dict(secret)
        shown = url.render_as_string(hide_password=True)
        for key in secret:  # shown as key=*** (like user:***@), not URL-encoded
            shown = shown.replace(f"{key}=%2A%2A%2A", f"{key}=***")
        return shown

    def display(self) -> str:
        """:meth:`warehouse_string` with any literal password hidden, for messages and output."""
        return self.redacted() if self.has_literal_password else self.warehouse_string()

    def spark_warehouse_string(self) -> str:
        """:meth:`warehouse_string` for Spark settings and read options, which must hold no secret.

        Raises:
            ValidationError: the address holds a literal password (Spark would show it in its UI,
                event logs, ``SET`` output and the configuration shipped to executors).
        """
        if self.has_literal_password:
            raise ValidationError(
                f"Cannot give warehouse {self.redacted()} to Spark: it holds a literal password, "
                "which Spark would show in its UI, event logs and SET output and copy to "
                "executors; put the password in an environment variable and write it as "
                "env:NAME, e.g. postgresql://user:env:OMNITABLE_PG_PASSWORD@host/db"
            )
        return self.warehouse_string()

    def warehouse_string(self) -> str:
        """The address as a string other processes (Spark, the JVM, CLI) can be given.

        Literal passwords are kept (they are needed to connect); prefer ``env:NAME``. Spark is
        never given one: see :meth:`spark_warehouse_string`.
        """
        if self.sqlite_dir is not None and self.url.database == str(self.sqlite_dir / SQLITE_FILE):
            return str(self.sqlite_dir)
        rendered = self.url.render_as_string(hide_password=False)
        password = self.url.password
        if isinstance(password, str) and password.startswith(ENV_REFERENCE):
            rendered = rendered.replace("env%3A", ENV_REFERENCE, 1)
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
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is not a number
        # the cause is in the message; the chain is cut so no layer below can show the URL
        raise ValidationError(
            f"Cannot open warehouse: malformed URL ({exc}); write it as "
            "postgresql://user:env:PASSWORD_VAR@host:port/db or sqlite:///path.db"
        ) from None
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
