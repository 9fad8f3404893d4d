""":class:`TableContext`: what the services (ingest, features, exec) get of a table.

The facade (:class:`omnitable.table.Table`) builds one per table; services never see a ``Table``
or a ``Warehouse`` (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from omnitable.catalog.address import CatalogAddress
from omnitable.catalog.catalog import Catalog
from omnitable.catalog.commit import CommitRequest
from omnitable.catalog.records import ColumnRecord, TableRecord
from omnitable.catalog.snapshot import FULL_SCOPE, Snapshot, SnapshotScope
from omnitable.format.fs import Location
from omnitable.format.writer import WriteOptions
from omnitable.settings import KEYED_PAGE_ROWS, Sources
from omnitable.vocabulary.keys import table_key
from omnitable.vocabulary.names import MAIN


class WarehouseHandle(Protocol):
    """What a table needs of its warehouse (satisfied by :class:`omnitable.Warehouse`)."""

    @property
    def address(self) -> CatalogAddress: ...

    @property
    def catalog(self) -> Catalog: ...

    @property
    def root(self) -> Location: ...

    @property
    def settings(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class TableContext:
    """One table as the services see it: its catalog, record, data root, the sources of its
    settings below an explicit argument (warehouse settings, then table properties;
    docs/settings.md) and the address of its warehouse (for Spark jobs, which open the catalog
    themselves)."""

    catalog: Catalog
    record: TableRecord
    root: Location
    settings: Sources
    address: CatalogAddress
    branch: str = MAIN  # the branch reads default to and every commit goes to

    @classmethod
    def of(
        cls, warehouse: WarehouseHandle, record: TableRecord, branch: str = MAIN
    ) -> TableContext:
        sources = Sources(warehouse.settings, record.properties)
        return cls(warehouse.catalog, record, warehouse.root, sources, warehouse.address, branch)

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def location(self) -> Location:
        """The table's own directory (unique per table id)."""
        return self.root.join(self.record.location)

    def snapshot(
        self,
        *,
        version: int | None = None,
        branch: str | None = None,
        tag: str | None = None,
        with_files: bool = True,
        scope: SnapshotScope = FULL_SCOPE,
        reuse: bool = False,
    ) -> Snapshot:
        """The catalog state of one version (default: head of this context's branch; a version
        of a branch other than main must be in its history), only ``scope`` loaded; ``reuse``:
        for a read, possibly one loaded before for the same resolved version (Catalog.snapshot)."""
        if branch is None and tag is None and (version is None or self.branch != MAIN):
            branch = self.branch
        return self.catalog.snapshot(self.record, branch=branch, tag=tag, version=version,
                                     with_files=with_files, scope=scope, reuse=reuse)  # fmt: skip

    def commit(self, request: CommitRequest) -> int:
        """Commit ``request`` to this context's branch; returns the new version (see
        Catalog.commit)."""
        request.branch = self.branch
        return int(self.catalog.commit(self.record, request))

    def head_version(self) -> int:
        """The head of this context's branch."""
        return int(self.catalog.head_version(self.record, self.branch))

    def feature_rows(self, name: str | None = None) -> list[dict[str, Any]]:
        """Feature registrations visible at the head of this context's branch, oldest first."""
        return self.catalog.feature_rows(self.record, name, self.branch)

    def all_columns(self) -> tuple[int, list[ColumnRecord]]:
        """The head of this context's branch and its visible columns, retired ones included."""
        return self.catalog.all_columns(self.record, self.branch)

    def options(
        self, row_group_size: int | None = None, target_fragment_rows: int | None = None
    ) -> WriteOptions:
        """Write options through the settings chain: an argument (None: not given), then the
        warehouse setting, the table property, the default; validated. A keyed table's
        ``page_rows`` left unset is ``KEYED_PAGE_ROWS`` (small pages for point lookups)."""
        options = WriteOptions.resolve(
            self.settings, row_group_size=row_group_size, target_fragment_rows=target_fragment_rows
        )
        if options.page_rows is None and table_key(self.record.properties) is not None:
            options = dataclasses.replace(options, page_rows=KEYED_PAGE_ROWS)
        return options
