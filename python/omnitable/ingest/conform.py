"""Conforming incoming batches to a table's logical schema (names, canonical types, nullability)."""

from __future__ import annotations

import pyarrow as pa

from omnitable.catalog.records import ColumnRecord
from omnitable.exceptions import SchemaMismatchError, UnknownColumnError, ValidationError
from omnitable.vocabulary.names import APPEND_NAME, ROW_ID
from omnitable.vocabulary.types import ARROW_VALUE_ERRORS, canonical_arrow_type, to_ddl


class Conformer:
    """Checks and casts batches to the table's columns.

    Args:
        table_name: for messages.
        columns: the table's visible user columns (``_ai_unique_id_`` excluded).
        require_non_nullable: fail when a non-nullable column is missing (appends do).
    """

    def __init__(
        self, table_name: str, columns: list[ColumnRecord], require_non_nullable: bool = True
    ) -> None:
        self.table_name = table_name
        self.columns = {c.name: c for c in columns if c.name != ROW_ID}
        self.require_non_nullable = require_non_nullable

    def target_schema(self) -> pa.Schema:
        return pa.schema(
            [pa.field(ROW_ID, pa.int64())]
            + [pa.field(c.name, c.arrow_type) for c in self.columns.values()]
        )

    def conform(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """Table with ``_ai_unique_id_`` (if supplied) first, then the table's columns present
        in the input, in table order, with canonical types.

        Raises:
            UnknownColumnError, SchemaMismatchError, ValidationError.
        """
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        names = table.column_names
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise SchemaMismatchError(f"Cannot ingest: duplicate column name(s) {dupes}")
        if APPEND_NAME in names:
            raise ValidationError(
                f"Cannot ingest: column {APPEND_NAME} is set from the append_name argument; "
                "drop it from the data"
            )
        unknown = [n for n in names if n != ROW_ID and n not in self.columns]
        if unknown:
            raise UnknownColumnError(
                f"Cannot ingest into table '{self.table_name}': unknown column(s) "
                f"{', '.join(unknown)}; declare them in create_table() or attach them with "
                "add_columns()"
            )
        if self.require_non_nullable:
            missing = [
                c.name for c in self.columns.values() if not c.nullable and c.name not in names
            ]
            if missing:
                raise SchemaMismatchError(
                    f"Cannot ingest into table '{self.table_name}': non-nullable column(s) "
                    f"{', '.join(missing)} are missing from the data"
                )
        out_names, out_arrays = [], []
        if ROW_ID in names:
            out_names.append(ROW_ID)
            out_arrays.append(self._cast(table.column(ROW_ID), pa.int64(), ROW_ID))
        for name, col in self.columns.items():
            if name not in names:
                continue
            arr = self._cast(table.column(name), col.arrow_type, name)
            if not col.nullable and arr.null_count:
                raise SchemaMismatchError(
                    f"Cannot ingest into table '{self.table_name}': column '{name}' is not "
                    f"nullable but has {arr.null_count} null value(s)"
                )
            out_names.append(name)
            out_arrays.append(arr)
        return pa.Table.from_arrays(out_arrays, names=out_names)

    def _cast(self, arr: pa.ChunkedArray, target: pa.DataType, name: str) -> pa.ChunkedArray:
        if arr.type.equals(target):
            return arr
        if pa.types.is_null(arr.type):
            return pa.chunked_array([pa.nulls(len(arr), target)])
        try:
            canonical = canonical_arrow_type(arr.type, name)
        except ValidationError as exc:
            raise SchemaMismatchError(str(exc)) from exc
        if _is_textual(canonical) != _is_textual(target):
            raise SchemaMismatchError(
                f"Cannot ingest column '{name}' into table '{self.table_name}': it has type "
                f"{to_ddl(canonical)}, the table has {to_ddl(target)}"
            )
        try:
            return arr.cast(target, safe=True)
        except ARROW_VALUE_ERRORS as exc:
            raise SchemaMismatchError(
                f"Cannot ingest column '{name}' into table '{self.table_name}': cannot convert "
                f"{to_ddl(canonical)} to {to_ddl(target)} ({str(exc).splitlines()[0]})"
            ) from exc


def _is_textual(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_binary(t)
