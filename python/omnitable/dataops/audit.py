"""The checks of write-audit-publish (``Table.publish``, docs/branches.md): callables given the
branch's table, or SQL assertions run on Spark over the branch's rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from omnitable.exceptions import AuditFailed, ValidationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class BranchTable(Protocol):
    """What a check sees of the branch (an ``omnitable.Table`` bound to it)."""

    @property
    def current_branch(self) -> str: ...

    def to_spark(self, spark: SparkSession | None = None) -> DataFrame: ...


def run_checks(
    table: BranchTable, checks: list[Callable[[Any], object] | str], spark: SparkSession | None
) -> None:
    """Run every check in order; the first that fails raises :class:`AuditFailed`.

    Raises:
        ValidationError: a check that is neither a callable nor a SQL string (checked before any
            runs), or SQL without ``{table}``.
    """
    for check in checks:
        if isinstance(check, str):
            if "{table}" not in check:
                raise ValidationError(
                    f"Cannot run SQL check {check!r}: it must read the branch as {{table}}"
                )
        elif not callable(check):
            raise ValidationError(
                f"Cannot run check {check!r}: give a callable or a SQL assertion string"
            )
    for check in checks:
        if isinstance(check, str):
            _sql_check(table, check, spark)
        else:
            _callable_check(table, check)


def _callable_check(table: BranchTable, check: Callable[[Any], object]) -> None:
    name = getattr(check, "__name__", repr(check))
    try:
        ok = check(table)
    except Exception as exc:  # a failing check is an audit result, not a crash
        raise _failed(table, name, f"{type(exc).__name__}: {exc}") from exc
    if ok is False:
        raise _failed(table, name, "returned False")


def _sql_check(table: BranchTable, sql: str, spark: SparkSession | None) -> None:
    view = f"omnitable_audit_{uuid.uuid4().hex[:12]}"
    df = table.to_spark(spark)
    df.createOrReplaceTempView(view)
    try:
        rows = df.sparkSession.sql(sql.replace("{table}", view)).collect()
    finally:
        df.sparkSession.catalog.dropTempView(view)
    bad = [r for r in rows if not r[0]]
    if not rows or bad:
        reason = "returned no row" if not rows else f"{len(bad)} row(s) not true, e.g. {bad[0]}"
        raise _failed(table, sql, reason)


def _failed(table: BranchTable, check: str, reason: str) -> AuditFailed:
    return AuditFailed(
        f"Audit of branch '{table.current_branch}' failed: check {check} {reason}; nothing was "
        "merged. Fix the branch and publish again.",
        check,
        reason,
    )
