"""Renaming, retiring and restoring columns: one commit of versioned column rows each.

A column's data never moves: files reference columns by id, so a rename or a retire changes one
catalog row (the column's next row under the same id; docs/catalog.md). A retired column is
hidden from reads, the schema, Spark and backfill planning, keeps its data and name, and comes
back with :func:`restore`. Time travel to a version before the change sees the column as it was.
Retiring a feature's output retires all of that feature's outputs (the feature is retired: it is
not planned or recomputed), and restoring one restores them all.
"""

from __future__ import annotations

from typing import Any

from omnitable._failpoints import failpoint
from omnitable.catalog.commit import ColumnChange, CommitRequest
from omnitable.catalog.records import ColumnRecord
from omnitable.context import TableContext
from omnitable.exceptions import AlreadyExistsError, NotFoundError, ValidationError
from omnitable.features.registry import current_features
from omnitable.vocabulary.keys import table_key
from omnitable.vocabulary.names import SYSTEM_COLUMNS, check_column_name


def rename_column(ctx: TableContext, old: str, new: str) -> int:
    """Rename raw column ``old`` to ``new``; returns the new version.

    Raises:
        NotFoundError: no active column ``old``.
        ValidationError: a system column, a feature's output or input, or an invalid name.
        AlreadyExistsError: a column (active or retired) is named ``new``.
    """
    version, columns = ctx.all_columns()
    col = _active(ctx, columns, old, "rename")
    new = check_column_name(new)
    if col.feature is not None:
        raise ValidationError(
            f"Cannot rename column '{old}' of table '{ctx.name}': it is an output of feature "
            f"'{col.feature}'; register a new version of the feature with the new output name"
        )
    _refuse_feature_inputs(ctx, {old}, None, "rename")
    if any(c.name == new for c in columns):
        raise AlreadyExistsError(
            f"Cannot rename column '{old}' to '{new}': table '{ctx.name}' already has a column "
            f"named '{new}' (active or retired); choose another name"
        )
    change = ColumnChange(col.column_id, col.added_version, new, "active")
    return _commit(ctx, "rename_column", version, [change], {"column": old, "to": new})


def retire(ctx: TableContext, column: str) -> int:
    """Retire ``column`` (with the other outputs of its feature); returns the new version.

    Raises:
        NotFoundError: no active column of that name (a retired one says so).
        ValidationError: a system column, or an input of a feature that is not retired.
    """
    version, columns = ctx.all_columns()
    col = _active(ctx, columns, column, "retire")
    group = [c for c in columns if c.state == "active" and c.feature == col.feature]
    group = group if col.feature is not None else [col]
    names = {c.name for c in group}
    _refuse_feature_inputs(ctx, names, col.feature, "retire")
    changes = [ColumnChange(c.column_id, c.added_version, c.name, "retired") for c in group]
    summary = {"columns": sorted(names), "feature": col.feature}
    return _commit(ctx, "retire", version, changes, summary)


def restore(ctx: TableContext, column: str) -> int:
    """Make retired ``column`` (with the other retired outputs of its feature) active again;
    returns the new version.

    Raises:
        NotFoundError: no retired column of that name.
        ValidationError: the column is active.
    """
    version, columns = ctx.all_columns()
    found = [c for c in columns if c.name == column]
    if not found or found[0].state == "active":
        state = "is not retired" if found else "does not exist"
        raise (ValidationError if found else NotFoundError)(
            f"Cannot restore column '{column}' of table '{ctx.name}': it {state}; retired "
            f"columns are: {', '.join(retired_names(columns)) or 'none'}"
        )
    col = found[0]
    group = [c for c in columns if c.state != "active" and c.feature == col.feature]
    group = group if col.feature is not None else [col]
    changes = [ColumnChange(c.column_id, c.added_version, c.name, "active") for c in group]
    summary = {"columns": sorted(c.name for c in group), "feature": col.feature}
    return _commit(ctx, "restore", version, changes, summary)


def retired_names(columns: list[ColumnRecord]) -> list[str]:
    """The names of the retired columns among ``columns``, in position order."""
    return [c.name for c in columns if c.state != "active"]


def _active(ctx: TableContext, columns: list[ColumnRecord], name: str, verb: str) -> ColumnRecord:
    if name in SYSTEM_COLUMNS:
        raise ValidationError(f"Cannot {verb} system column '{name}' of table '{ctx.name}'")
    if name in (table_key(ctx.record.properties) or []) and verb != "restore":
        raise ValidationError(
            f"Cannot {verb} column '{name}' of table '{ctx.name}': it is part of the table's "
            "key, which upserts and lookups find rows by"
        )
    for c in columns:
        if c.name == name:
            if c.state != "active":
                raise NotFoundError(
                    f"Cannot {verb} column '{name}' of table '{ctx.name}': it is retired; "
                    "restore it first (Table.restore)"
                )
            return c
    raise NotFoundError(
        f"Cannot {verb} column '{name}' of table '{ctx.name}': no such column; columns are: "
        + ", ".join(c.name for c in columns if c.state == "active" and c.name not in SYSTEM_COLUMNS)
    )


def _refuse_feature_inputs(
    ctx: TableContext, names: set[str], own_feature: str | None, verb: str
) -> None:
    """A column a (not retired) feature reads cannot be renamed or retired under it."""
    readers = sorted(
        f.name
        for f in current_features(ctx).values()
        if f.name != own_feature and names & set(f.inputs)
    )
    if readers:
        raise ValidationError(
            f"Cannot {verb} column(s) {', '.join(sorted(names))} of table '{ctx.name}': "
            f"feature(s) {', '.join(readers)} read it; retire those features first (retire one "
            "of their outputs)"
        )


def _commit(
    ctx: TableContext,
    op: str,
    version: int,
    changes: list[ColumnChange],
    summary: dict[str, Any],
) -> int:
    req = CommitRequest(op=op, base_version=version, summary=summary, column_changes=changes)
    failpoint("columns.before_commit")
    return ctx.commit(req)
