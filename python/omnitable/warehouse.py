"""``connect()`` and ``Warehouse``: a data root plus a catalog database."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any, TypeAlias, Union

import pyarrow as pa

from omnitable._failpoints import failpoint
from omnitable.catalog.address import CatalogAddress, parse_address
from omnitable.catalog.catalog import Catalog
from omnitable.catalog.commit import NewColumn
from omnitable.catalog.upgrade import upgrade_catalog as _upgrade
from omnitable.exceptions import AlreadyExistsError, UnknownColumnError, ValidationError
from omnitable.format.fs import Location, resolve_location
from omnitable.format.writer import WriteOptions
from omnitable.models.store import ModelStore
from omnitable.settings import Sources, check_properties, check_session
from omnitable.table import Table
from omnitable.vocabulary.keys import KEY_PROPERTY, check_key
from omnitable.vocabulary.names import (
    APPEND_NAME,
    BASE_GROUP,
    ROW_ID,
    check_column_name,
    check_group_name,
    check_namespace_name,
    split_table_address,
)
from omnitable.vocabulary.types import parse_type_spec, to_ddl

SchemaSpec: TypeAlias = Union[pa.Schema, Mapping[str, Any]]  # noqa: UP007


def connect(
    uri: str | os.PathLike[str] | None = None,
    root: str | None = None,
    write_options: WriteOptions | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Warehouse:
    """Open (creating if needed) a warehouse.

    Args:
        uri: a directory (default ``./omnitable-warehouse``, SQLite ``catalog.db`` inside), a
            ``sqlite:///…`` URL, or ``postgresql://user:env:PASSWORD_VAR@host/db``.
        root: data root (local path or URI such as ``s3://bucket/wh``); required the first time
            a PostgreSQL catalog is used, defaults to the directory for SQLite.
        write_options: file layout tuning (row-group size, fragment size, compression); the
            fields that differ from the defaults are warehouse settings.
        settings: warehouse settings ``{key: value}`` (docs/settings.md); they win over table
            properties, explicit arguments win over them.

    Raises:
        ValidationError: malformed address or root, an unknown or invalid setting.
        CatalogError: the database is unreachable.
        CatalogVersionError: the catalog has another schema version.
    """
    return Warehouse(parse_address(uri), root, write_options, settings)


def upgrade_catalog(uri: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Upgrade the catalog at ``uri`` (as for :func:`connect`) in place to this release's schema,
    in one transaction; returns (old version, new version). Clients of the older release then
    refuse the catalog: upgrade them together (docs/catalog.md, "Upgrading a catalog").

    Raises:
        CatalogVersionError: a version this release cannot upgrade.
    """
    return _upgrade(parse_address(uri))


class Warehouse:
    """A catalog plus a data root. Use :func:`connect` to get one."""

    def __init__(
        self,
        address: CatalogAddress,
        root: str | None = None,
        write_options: WriteOptions | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.settings = _session_settings(write_options, settings)
        # the write options of this warehouse's settings and the defaults (no table property)
        self.write_options = WriteOptions.resolve(Sources(self.settings))
        self.address = address
        self.catalog = Catalog(address, root)
        self.root: Location = resolve_location(self.catalog.root)

    @property
    def uri(self) -> str:
        """The warehouse string other processes (Spark, CLI) can open it with.

        A literal password is kept (Spark refuses such an address; prefer ``env:NAME``); use
        ``address.display()`` for output.
        """
        return self.address.warehouse_string()

    def create_table(
        self,
        name: str,
        schema: SchemaSpec,
        groups: Mapping[str, list[str]] | None = None,
        properties: Mapping[str, Any] | None = None,
        key: str | list[str] | None = None,
    ) -> Table:
        """Create a logical table.

        Args:
            name: letters, digits and '_' (the table is in namespace ``default``), or
                ``namespace.name`` for a table of an existing namespace (see
                :meth:`create_namespace`).
            schema: a pyarrow Schema or a mapping ``{column: type}`` where a type is a pyarrow
                DataType or a Spark DDL string (``"string"``, ``"array<float>"``). System
                columns are added automatically.
            groups: optional ``{group: [columns]}``; columns stored together in one file per
                fragment. Unlisted columns go to the ``base`` group.
            properties: table properties: settings of this table (``{"write.row_group_size":
                10000}``, docs/settings.md) and free metadata under other keys.
            key: a user key (a column name or a list): the table is keyed, its rows are added
                by ``Table.upsert`` (not ``append``), keys are unique among live rows and
                ``Table.lookup`` finds rows by key through the global index (docs/dataops.md).
                Key columns are strings, integers or dates, and are never updated or retired.

        Raises:
            AlreadyExistsError, ValidationError (also an unknown setting or an invalid value
            in ``properties``), UnknownColumnError, NotFoundError (no such namespace: nothing
            is created).
        """
        split_table_address(name)
        check_properties(properties or {})
        fields = _schema_fields(schema)
        group_of = _group_map(groups, [f[0] for f in fields])
        columns = [
            NewColumn(n, to_ddl(t), nullable, group_of.get(n, BASE_GROUP))
            for n, t, nullable in fields
        ]
        props = dict(properties or {})
        if key is not None:
            types = {n: t for n, t, _ in fields}
            props[KEY_PROPERTY] = check_key(key, types, f"create table '{name}'")
        record = self.catalog.create_table(name, columns, props)
        return Table(self, record)

    def table(self, name: str) -> Table:
        """An existing table: ``web`` (namespace ``default``, also ``default.web``) or
        ``ns.web``. Raises NotFoundError."""
        return Table(self, self.catalog.get_table(name))

    def tables(self, namespace: str | None = None) -> list[str]:
        """The tables of ``namespace`` (of every namespace when None), sorted, each as
        :meth:`table` accepts it: a table of ``default`` by its name, any other as
        ``namespace.name``. Raises NotFoundError (no such namespace)."""
        if namespace is not None:
            check_namespace_name(namespace)
        return self.catalog.list_tables(namespace)

    def runs(self, limit: int | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """The runs of every table, newest first, each with its ``table`` address (None for a
        dropped table); fields and filters as :meth:`Table.runs` (docs/observability.md).

        Raises:
            ValidationError: ``limit`` is not a positive integer, ``status`` not a run status.
        """
        return self.catalog.list_runs(None, limit=limit, status=status)

    def run(self, run_id: str) -> dict[str, Any]:
        """One run of any table, as :meth:`runs` lists it. Raises NotFoundError."""
        return self.catalog.get_run(run_id)

    def create_namespace(
        self, name: str, properties: Mapping[str, Any] | None = None, if_not_exists: bool = False
    ) -> None:
        """Create namespace ``name`` (letters, digits and '_'; one level) for tables named
        ``name.table``; ``properties`` is free JSON metadata (Spark shows it in DESCRIBE
        NAMESPACE). Raises AlreadyExistsError (unless ``if_not_exists``), ValidationError."""
        check_namespace_name(name)
        if if_not_exists and name in self.namespaces():
            return
        try:
            self.catalog.create_namespace(name, dict(properties or {}))
        except AlreadyExistsError:
            if not if_not_exists:
                raise

    def namespaces(self) -> list[str]:
        """Every namespace, sorted (``default`` included)."""
        return self.catalog.list_namespaces()

    def drop_namespace(self, name: str, cascade: bool = False, purge: bool = True) -> list[str]:
        """Drop namespace ``name``; returns the tables dropped with it.

        Spark's rule: a namespace holding tables is refused unless ``cascade``, which drops
        them too (one catalog transaction, then their directories unless ``purge=False``).
        ``default`` is never dropped.

        Raises:
            NotFoundError; ValidationError (``default``, or tables and no ``cascade``).
        """
        records = self.catalog.drop_namespace(check_namespace_name(name), cascade)
        if purge:
            for record in records:
                loc = self.root.join(record.location)
                with contextlib.suppress(OSError):
                    loc.fs.delete_dir(loc.path)
        return [r.name for r in records]

    def drop_table(self, name: str, purge: bool = True) -> None:
        """Remove a table from the catalog (one transaction), then delete its directory.

        The directory is unique to the dropped table's id, so a table re-created under the same
        name (even concurrently) keeps its files. Readers holding a snapshot of the dropped table
        fail once its files are gone. With ``purge=False`` the files stay on storage,
        unreferenced (and such readers keep working). Raises NotFoundError.
        """
        record = self.catalog.drop_table(name)
        failpoint("warehouse.before_purge")
        if purge:
            loc = self.root.join(record.location)
            with contextlib.suppress(OSError):
                loc.fs.delete_dir(loc.path)

    @property
    def models(self) -> ModelStore:
        """The model store of this warehouse (docs/models.md), artifacts under ``<root>/_models``."""
        return ModelStore(self.catalog, self.root)

    def close(self) -> None:
        self.catalog.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Warehouse({self.address.redacted()}, root={self.root.uri!r})"


def _session_settings(
    write_options: WriteOptions | None, settings: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The warehouse settings: ``settings`` plus the non-default fields of ``write_options``."""
    given = check_session(settings or {})
    from_options = (write_options or WriteOptions()).validated().as_settings()
    for key, value in from_options.items():
        if key in given and given[key] != value:
            raise ValidationError(
                f"Cannot connect: {key} is {given[key]!r} in settings and {value!r} in "
                "write_options; give it once"
            )
    return {**from_options, **given}


def _schema_fields(schema: SchemaSpec) -> list[tuple[str, pa.DataType, bool]]:
    if isinstance(schema, pa.Schema):
        items = [(f.name, f.type, f.nullable) for f in schema]
    elif isinstance(schema, Mapping):
        items = [(k, v, True) for k, v in schema.items()]
    else:
        raise ValidationError(
            "Cannot create table: schema must be a pyarrow Schema or a mapping {column: type}, "
            f"got {type(schema).__name__}"
        )
    out = []
    seen = set()
    for name, spec, nullable in items:
        if name == ROW_ID:
            if parse_type_spec(spec, name) != pa.int64():
                raise ValidationError(f"Cannot create table: {ROW_ID} is always bigint")
            continue
        if name == APPEND_NAME:
            continue
        check_column_name(name)
        if name in seen:
            raise ValidationError(f"Cannot create table: column '{name}' is listed twice")
        seen.add(name)
        out.append((name, parse_type_spec(spec, name), bool(nullable)))
    return out


def _group_map(groups: Mapping[str, list[str]] | None, names: list[str]) -> dict[str, str]:
    if groups is None:
        return {}
    if not isinstance(groups, Mapping):
        raise ValidationError("Cannot create table: groups must be a mapping {group: [columns]}")
    known = set(names)
    out: dict[str, str] = {}
    for group, cols in groups.items():
        check_group_name(group)
        if isinstance(cols, str):
            raise ValidationError(
                f"Cannot create table: group '{group}' must list columns, got the string {cols!r}"
            )
        for c in cols:
            if c not in known:
                raise UnknownColumnError(
                    f"Cannot put column '{c}' in group '{group}': no such column in the schema"
                )
            if c in out:
                raise ValidationError(
                    f"Cannot create table: column '{c}' is in groups '{out[c]}' and '{group}'"
                )
            out[c] = group
    return out
