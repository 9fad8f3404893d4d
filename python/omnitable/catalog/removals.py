"""Ending versioned rows on a branch (docs/catalog.md, "Resolving a snapshot").

A commit on branch ``b`` ends the rows it removes in one of two ways: a row of ``b`` itself gets
its ``removed_version``; a row ``b`` inherits from an ancestor (visible through its fork) gets a
``removals`` row instead, so the ancestor, and every other branch, still sees it. Every removal
of a commit, a rollback or a revert goes through :func:`end_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.commit_sql import sql
from omnitable.catalog.snapshot import REMOVABLE_ID, Segment, visible_clause

_CHUNK = 500  # ids bound per statement (SQLite's default limit is 32,766 parameters)


def end_rows(
    conn: Connection,
    t: str,
    kind: str,
    by: str,
    values: Sequence[str | int],
    branch: str,
    version: int,
    segments: list[Segment],
) -> None:
    """End, as of ``version`` on ``branch``, the rows of table ``kind`` visible in ``segments``
    (the branch head's) whose column ``by`` holds one of ``values``. Idempotent within a commit:
    a row this commit already ended (by another column, e.g. a file by its fragment and then by
    its id) is left as it is; the head's segments cannot show this commit's own removals, so
    the inherited rows are checked against every removal by ``branch``."""
    if not values:
        return
    conn.execute(
        text(sql("end_rows", kind=kind, by=by)),
        [{"v": version, "t": t, "val": val, "b": branch} for val in values],
    )
    if len(segments) == 1:  # a main-line commit sees only its branch's own rows
        return
    for i in range(0, len(values), _CHUNK):
        chunk = list(values[i : i + _CHUNK])
        params: dict[str, Any] = {"t": t, "b": branch, "v": version, "k": kind}
        vis = visible_clause("x", kind, segments, params)
        row_id = REMOVABLE_ID[kind].format(a="x")
        marks = ", ".join(f":val{j}" for j in range(len(chunk)))
        params.update({f"val{j}": val for j, val in enumerate(chunk)})
        statement = sql(
            "insert_removals", kind=kind, row_id=row_id, vis=vis, **{"in": f"x.{by} IN ({marks})"}
        )
        conn.execute(text(statement), params)


def removed_since(
    conn: Connection, t: str, kind: str, branch: str, since: int, ids: Sequence[str]
) -> set[str]:
    """The ``ids`` (row ids of table ``kind``) of inherited rows that commits on ``branch``
    after version ``since`` removed."""
    found: set[str] = set()
    for i in range(0, len(ids), _CHUNK):
        chunk = list(ids[i : i + _CHUNK])
        params: dict[str, Any] = {"t": t, "k": kind, "b": branch, "s": since}
        params.update({f"id{j}": v for j, v in enumerate(chunk)})
        marks = ", ".join(f":id{j}" for j in range(len(chunk)))
        rows = conn.execute(
            text(
                "SELECT row_id FROM removals WHERE table_id = :t AND kind = :k AND branch = :b "
                f"AND version > :s AND row_id IN ({marks})"
            ),
            params,
        )
        found.update(r[0] for r in rows)
    return found
