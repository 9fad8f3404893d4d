"""Fitted preprocessing, the public entry points (docs/training.md "Fitted preprocessing").

``fit`` computes the parameters of a spec on one snapshot of a table and stores them in the
catalog under a name; ``load`` gets them back (checking the table's schema has not changed);
the returned :class:`FittedPreprocessor` transforms batches with ``apply`` (or by calling it,
e.g. as a loader's ``transform=``)::

    fitted = omnitable.preprocess.fit(table, {"age": "standardize",
                                              "city": {"op": "vocabulary", "top_k": 1000}})
    batch = fitted.apply(record_batch)
"""

from __future__ import annotations

from typing import Any

from omnitable.catalog.snapshot import SnapshotScope
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.training import preprocess as _service
from omnitable.training.preprocess import OPS, FittedColumn, FittedPreprocessor

__all__ = ["OPS", "FittedColumn", "FittedPreprocessor", "delete", "fit", "list_fitted", "load"]

DEFAULT_NAME = "default"


def fit(
    table: Any,
    spec: dict[str, Any],
    version: int | None = None,
    name: str | None = None,
    *,
    tag: str | None = None,
    branch: str | None = None,
) -> FittedPreprocessor:
    """Fit ``spec`` (column -> op, see :mod:`omnitable.training.preprocess`) on the table at
    ``version`` / ``tag`` / ``branch`` (default: its head) and store it as ``name`` (default
    ``"default"``; an existing one of that name is replaced).

    Raises:
        ValidationError, UnknownColumnError: a bad spec, column, name or version.
        NotFoundError: no such version, tag or branch.
    """
    ctx = _ctx(table, "fit preprocessing")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
        raise ValidationError(f"Cannot fit preprocessing: a version is an int, got {version!r}")
    names = list(spec) if isinstance(spec, dict) else None
    scope = SnapshotScope(columns=None if names is None else frozenset(names), stats=True)
    snap = table.snapshot(version=version, tag=tag, branch=branch, scope=scope)
    return _service.fit(ctx, snap, spec, DEFAULT_NAME if name is None else name)


def load(table: Any, name: str = DEFAULT_NAME) -> FittedPreprocessor:
    """The stored preprocessor ``name`` of the table.

    Raises:
        NotFoundError: none of that name.
        SchemaMismatchError: a fitted column was retired, renamed or changed type since.
    """
    return _service.load(_ctx(table, "load preprocessing"), name)


def list_fitted(table: Any) -> list[str]:
    """Names of the table's stored preprocessors, sorted."""
    return _service.list_names(_ctx(table, "list preprocessing"))


def delete(table: Any, name: str) -> None:
    """Remove the stored preprocessor ``name``.

    Raises:
        NotFoundError: none of that name.
    """
    _service.delete(_ctx(table, "delete preprocessing"), name)


def _ctx(table: Any, action: str) -> TableContext:
    """The table's context (``omnitable.table`` is above this module: no import of it)."""
    ctx = getattr(table, "_ctx", None)
    if not isinstance(ctx, TableContext):
        raise ValidationError(
            f"Cannot {action}: give an omnitable Table (Warehouse.table(name)), got "
            f"{type(table).__name__}"
        )
    return ctx
