"""Small SQL-building helpers shared by the catalog's statements (portable SQLite/PostgreSQL)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def in_list(column: str, prefix: str, values: list[Any], params: dict[str, Any]) -> str:
    """``column IN (:p0, …)`` with its parameters added (FALSE for an empty list)."""
    if not values:
        return "1 = 0"
    names = [f"{prefix}{i}" for i in range(len(values))]
    params.update(zip(names, values, strict=True))
    return f"{column} IN ({', '.join(':' + n for n in names)})"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one fetch is turned into records.

    A snapshot of 300 K fragments, or a history of 15 K commits, allocates hundreds of
    thousands of tuples and records at once; each allocation burst triggers full collections
    that walk every live object of the process (tens of milliseconds each) and find nothing,
    since these records hold only strings and numbers and form no cycles. Collection resumes
    on exit, unless the caller had disabled it (nested and concurrent uses only defer it).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
