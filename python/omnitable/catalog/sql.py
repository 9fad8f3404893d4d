"""Small SQL-building helpers shared by the catalog's statements (portable SQLite/PostgreSQL)."""

from __future__ import annotations

from typing import Any


def in_list(column: str, prefix: str, values: list[Any], params: dict[str, Any]) -> str:
    """``column IN (:p0, …)`` with its parameters added (FALSE for an empty list)."""
    if not values:
        return "1 = 0"
    names = [f"{prefix}{i}" for i in range(len(values))]
    params.update(zip(names, values, strict=True))
    return f"{column} IN ({', '.join(':' + n for n in names)})"
