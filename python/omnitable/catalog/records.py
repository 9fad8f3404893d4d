"""Plain records read from the catalog (one class per catalog table that code passes around)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from omnitable.catalog.sets import stats_entry
from omnitable.exceptions import ValidationError
from omnitable.vocabulary.deletions import decode_vector
from omnitable.vocabulary.names import DEFAULT_NAMESPACE, table_address
from omnitable.vocabulary.stats import ColumnStats
from omnitable.vocabulary.types import to_arrow


@dataclass(frozen=True)
class TableRecord:
    """A row of ``tables``. ``name`` is the table's address (``web`` in the default namespace,
    ``ns.web`` elsewhere: what ``Warehouse.table`` and Spark's ``table`` option accept), and
    ``namespace`` its namespace."""

    table_id: str
    name: str
    location: str
    next_row_id: int
    next_column_id: int
    properties: dict[str, Any]
    created_at: str
    namespace: str = DEFAULT_NAMESPACE

    @property
    def short_name(self) -> str:
        """The name within its namespace (``web`` for ``ns.web``)."""
        return self.name.rsplit(".", 1)[-1]

    @classmethod
    def from_row(cls, row: Any) -> TableRecord:
        return cls(
            row.table_id,
            table_address(row.namespace, row.name),
            row.location,
            int(row.next_row_id),
            int(row.next_column_id),
            json.loads(row.properties),
            row.created_at,
            row.namespace,
        )


@dataclass(frozen=True)
class ColumnRecord:
    column_id: int
    name: str
    physical_name: str
    data_type: str
    nullable: bool
    position: int
    state: str
    group_name: str
    feature: str | None
    added_version: int

    @property
    def arrow_type(self) -> pa.DataType:
        return to_arrow(self.data_type)


@dataclass(frozen=True, slots=True)
class BatchRecord:
    batch_id: str
    name: str
    added_version: int
    created_at: str
    position: int  # the read position (schema.sql, ``batches.position``)


class FragmentRecord(NamedTuple):
    """A visible fragment. A tuple: a full scan lists 300 K of them, and a frozen dataclass
    took twice as long to build (0.3-0.5 vs 0.12-0.19 s)."""

    fragment_id: str
    batch_id: str
    batch_name: str
    row_count: int
    path: str
    added_version: int
    seq: int = 0


@dataclass(slots=True)
class DeletionRecord:
    """The visible deletion vector of one fragment (docs/catalog.md, ``deletion_vectors``);
    ``mask`` decodes ``vector`` on first use (True: the row at that offset is deleted)."""

    vector_id: str
    fragment_id: str
    row_count: int
    deleted_count: int
    vector: str
    added_version: int
    _mask: np.ndarray | None = field(default=None, repr=False, compare=False)

    def mask(self) -> np.ndarray:
        """Boolean mask of the fragment's rows, True where deleted.

        Raises:
            CorruptInputError: the stored vector does not decode to the fragment's rows.
        """
        if self._mask is None:
            where = f"deletion vector {self.vector_id} of fragment {self.fragment_id}"
            self._mask = decode_vector(self.vector, self.row_count, where=where)
        return self._mask

    @property
    def all_deleted(self) -> bool:
        return self.deleted_count >= self.row_count


@dataclass(frozen=True)
class FileColumn:
    """A column carried by a file: its index in the file's column set (and statistics), and the
    feature version that produced it (None: a raw column). Shared by the files of one set."""

    column_id: int
    position: int
    feature_version: str | None = None


@dataclass(slots=True)
class FileRecord:
    """A visible file. ``columns`` is its column set's (shared, never mutated); ``stats_json`` its
    statistics as stored (``files.stats``), decoded on first use by :meth:`stats`."""

    file_id: str
    fragment_id: str
    group_name: str
    path: str
    row_count: int
    size_bytes: int
    added_version: int
    columns: Mapping[int, FileColumn] = field(default_factory=dict)
    stats_json: str | None = None
    stats_loaded: bool = True
    _entries: list[Any] | None = field(default=None, repr=False, compare=False)

    def stats(self, column_id: int) -> ColumnStats:
        """Statistics of a column the file carries (unknown: null count 0, no bounds).

        Raises:
            KeyError: the file does not carry ``column_id``.
            ValidationError: the snapshot was loaded without statistics.
        """
        position = self.columns[column_id].position
        if not self.stats_loaded:
            raise ValidationError(
                f"Cannot read the statistics of file {self.path}: its snapshot was loaded "
                "without them; load it with a scope that keeps statistics"
            )
        if self.stats_json is None:
            return ColumnStats(0)
        if self._entries is None:
            self._entries = json.loads(self.stats_json)
        return stats_entry(self._entries, position)


class CommitRecord(NamedTuple):
    """One commit (a named tuple: a history of 15,000 commits lists in milliseconds).
    ``summary`` decodes ``summary_json`` when asked (listing a history parses no summary).
    ``expired``: an ``expire`` commit gave this version up (catalog/horizon.py): it is still
    listed, but no longer readable."""

    version: int
    parent_version: int | None
    branch: str
    op: str
    run_id: str | None
    summary_json: str
    time: str
    expired: bool = False

    @property
    def summary(self) -> dict[str, Any]:
        """The commit's summary (rows, files, bytes, ...)."""
        value: dict[str, Any] = json.loads(self.summary_json)
        return value
