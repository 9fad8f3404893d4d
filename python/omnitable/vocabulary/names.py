"""System column names and the rules for user-chosen names (tables, columns, groups, batches)."""

from __future__ import annotations

import re

from omnitable.exceptions import ValidationError

ROW_ID = "_ai_unique_id_"
APPEND_NAME = "_ai_append_name_"
SYSTEM_COLUMNS = (ROW_ID, APPEND_NAME)
BASE_GROUP = "base"
MAIN = "main"
DEFAULT_NAMESPACE = "default"  # the namespace of a table named without one
MAX_ROW_ID = 2**63 - 1  # the largest _ai_unique_id_ (int64)

TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]{0,254}$")
GROUP_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_table_name(name: object) -> str:
    """Validate a table name: letters, digits and '_' (no path separators, no SQL syntax)."""
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
        raise ValidationError(
            f"Cannot use table name {name!r}: names are 1-128 characters of letters, digits and "
            "'_', starting with a letter or '_' (no path separators, dots, quotes or spaces)"
        )
    return name


def check_namespace_name(name: object) -> str:
    """Validate a namespace name: the rule of table names (one level, no dots)."""
    if not isinstance(name, str) or not TABLE_NAME.fullmatch(name):
        raise ValidationError(
            f"Cannot use namespace name {name!r}: names are 1-128 characters of letters, digits "
            "and '_', starting with a letter or '_' (one level: no dots, quotes or spaces)"
        )
    return name


def split_table_address(address: object) -> tuple[str, str]:
    """``"web"`` -> (``default``, ``web``); ``"ns.web"`` -> (``ns``, ``web``), both validated.

    Raises:
        ValidationError: not a string, more than one dot, or an invalid name.
    """
    if not isinstance(address, str):
        check_table_name(address)  # raises
        raise AssertionError  # pragma: no cover
    parts = address.split(".")
    if len(parts) == 1:
        return DEFAULT_NAMESPACE, check_table_name(address)
    if len(parts) != 2:
        raise ValidationError(
            f"Cannot use table name {address!r}: write 'table' (namespace "
            f"'{DEFAULT_NAMESPACE}') or 'namespace.table' (namespaces have one level) of letters, "
            "digits and '_'"
        )
    return check_namespace_name(parts[0]), check_table_name(parts[1])


def table_address(namespace: str, name: str) -> str:
    """The address of a table: its bare name in ``default``, ``namespace.name`` elsewhere."""
    return name if namespace == DEFAULT_NAMESPACE else f"{namespace}.{name}"


def check_column_name(name: object) -> str:
    """Validate a user column name (the ``_ai_`` prefix is reserved for system columns)."""
    if not isinstance(name, str) or not COLUMN_NAME.fullmatch(name) or name.startswith("_ai_"):
        raise ValidationError(
            f"Cannot use column name {name!r}: names are 1-255 characters of letters, digits, "
            "'_' and '-', start with a letter or '_', and the prefix '_ai_' is reserved"
        )
    return name


def check_group_name(group: object) -> str:
    """Validate a column group name."""
    if not isinstance(group, str) or not GROUP_NAME.fullmatch(group):
        raise ValidationError(
            f"Cannot use column group {group!r}: group names are 1-64 characters from "
            "[A-Za-z0-9_.-] and start with a letter, digit or '_'"
        )
    return group


def check_append_name(name: object) -> str:
    """Validate a batch (append) name: 1-256 printable characters."""
    if not isinstance(name, str) or not name.strip() or len(name) > 256 or _CONTROL.search(name):
        raise ValidationError(
            f"Cannot append: append_name must be a non-empty string of at most 256 printable "
            f"characters (e.g. 'cc/2026-10/v1'), got {name!r}"
        )
    return name
