"""Branches and tags: the ``refs`` rows (docs/branches.md).

Creating a branch or a tag writes one ``refs`` row and no data: a branch forked at version ``v``
sees what its parent saw at ``v`` plus its own commits (docs/catalog.md, "Resolving a
snapshot"). Every statement runs under the table's lock, so a ref never names a version that a
concurrent commit is still writing, and a deleted branch cannot take a commit after its
deletion.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from omnitable.catalog.records import TableRecord
from omnitable.catalog.snapshot import segments_for
from omnitable.exceptions import AlreadyExistsError, NotFoundError, ValidationError
from omnitable.vocabulary.names import MAIN

# used with fullmatch: "^...$" with match() lets a trailing newline through
REF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
# Tables whose rows carry the branch they were written on; a deleted branch's rows move aside.
BRANCH_TABLES = (
    "commits", "columns", "batches", "fragments", "files", "deletion_vectors", "removals",
    "features",
)  # fmt: skip
DELETED_PREFIX = "~deleted~"


@dataclass(frozen=True)
class Ref:
    """A branch or a tag. ``version``: a branch's head, the version a tag pins. ``parent``: the
    branch a branch forked from (None for main) or a tag's branch; ``fork_version``: the version
    a branch forked at (None for main and tags). ``max_age_s``: a tag's retention (None:
    kept until deleted)."""

    name: str
    kind: str
    version: int
    parent: str | None
    fork_version: int | None
    created_at: str
    max_age_s: int | None

    @property
    def expires_at(self) -> str | None:
        """When a tag with a retention stops protecting its version (ISO-8601 UTC)."""
        if self.max_age_s is None:
            return None
        created = dt.datetime.fromisoformat(self.created_at.replace("Z", "+00:00"))
        return (created + dt.timedelta(seconds=self.max_age_s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_ref_name(name: object, what: str) -> str:
    """A branch or tag name: letters, digits, ``_`` and ``-``, not only digits (a version
    number), at most 100 characters: no path separators, dots, spaces or SQL syntax."""
    if not isinstance(name, str) or not REF_NAME.fullmatch(name) or name.isdigit():
        raise ValidationError(
            f"Invalid {what} name {name!r}: use 1-100 letters, digits, '_' and '-', starting with "
            "a letter or digit and not only digits (no '/', '.', spaces or quotes)"
        )
    return name


def list_refs(conn: Connection, table: TableRecord, kind: str) -> list[Ref]:
    rows = conn.execute(
        text(
            "SELECT name, kind, version, parent_branch, fork_version, created_at, max_age_s "
            "FROM refs WHERE table_id = :t AND kind = :k ORDER BY name"
        ),
        {"t": table.table_id, "k": kind},
    )
    return [_ref(r) for r in rows]


def _ref(r: Any) -> Ref:
    fork = None if r.fork_version is None else int(r.fork_version)
    age = None if r.max_age_s is None else int(r.max_age_s)
    return Ref(r.name, r.kind, int(r.version), r.parent_branch, fork, r.created_at, age)


def source_version(
    conn: Connection, table: TableRecord, branch: str, version: int | None
) -> tuple[str, int]:
    """``(the branch that committed it, version)`` for ``version`` of ``branch``'s history
    (None: its head); the pair a new ref forks from or pins.

    Raises:
        NotFoundError: unknown branch, or a version outside its history.
    """
    _, resolved, _ = segments_for(conn, table, branch=branch, version=version)
    owner = conn.execute(
        text("SELECT branch FROM commits WHERE table_id = :t AND version = :v"),
        {"t": table.table_id, "v": resolved},
    ).scalar_one()
    return str(owner), int(resolved)


def insert_ref(
    conn: Connection,
    table: TableRecord,
    ref: Ref,
) -> None:
    """Add ``ref``; its name must be free among the table's branches and tags."""
    taken = conn.execute(
        text("SELECT kind FROM refs WHERE table_id = :t AND name = :n"),
        {"t": table.table_id, "n": ref.name},
    ).scalar()
    if taken is not None:
        raise AlreadyExistsError(
            f"Cannot create {ref.kind} '{ref.name}' of table '{table.name}': a {taken} of that "
            "name exists (branches and tags share names); choose another name or delete it"
        )
    conn.execute(
        text(
            "INSERT INTO refs (table_id, name, kind, version, parent_branch, fork_version, "
            "created_at, max_age_s) VALUES (:t, :n, :k, :v, :p, :f, :c, :a)"
        ),
        {"t": table.table_id, "n": ref.name, "k": ref.kind, "v": ref.version, "p": ref.parent,
         "f": ref.fork_version, "c": ref.created_at, "a": ref.max_age_s},
    )  # fmt: skip


def get_ref(conn: Connection, table: TableRecord, name: str, kind: str) -> Ref:
    row = conn.execute(
        text(
            "SELECT name, kind, version, parent_branch, fork_version, created_at, max_age_s "
            "FROM refs WHERE table_id = :t AND name = :n"
        ),
        {"t": table.table_id, "n": name},
    ).first()
    if row is None or row.kind != kind:
        names = ", ".join(r.name for r in list_refs(conn, table, kind)) or "none"
        raise NotFoundError(
            f"Cannot find {kind} '{name}' of table '{table.name}'; its {kind}es: {names}"
            if kind == "branch"
            else f"Cannot find tag '{name}' of table '{table.name}'; its tags: {names}"
        )
    return _ref(row)


def delete_branch(conn: Connection, table: TableRecord, name: str) -> Ref:
    """Delete branch ``name``: its ref goes, its rows move to a name no ref holds (files stay
    for cleanup); returns the deleted ref.

    Raises:
        ValidationError: ``main``, or a branch other branches or tags are based on.
        NotFoundError: no such branch.
    """
    if name == MAIN:
        raise ValidationError(
            f"Cannot delete branch '{MAIN}' of table '{table.name}': every table has it; drop "
            "the table to delete everything"
        )
    ref = get_ref(conn, table, name, "branch")
    based = conn.execute(
        text(
            "SELECT kind, name FROM refs WHERE table_id = :t AND parent_branch = :n ORDER BY name"
        ),
        {"t": table.table_id, "n": name},
    ).all()
    if based:
        listed = ", ".join(f"{r.kind} '{r.name}'" for r in based)
        raise ValidationError(
            f"Cannot delete branch '{name}' of table '{table.name}': {listed} are based on it; "
            "delete them (or merge them) first"
        )
    moved = f"{DELETED_PREFIX}{name}~{uuid.uuid4().hex[:12]}"
    for t in BRANCH_TABLES:
        conn.execute(
            text(f"UPDATE {t} SET branch = :m WHERE table_id = :t AND branch = :n"),
            {"m": moved, "t": table.table_id, "n": name},
        )
    conn.execute(
        text("DELETE FROM refs WHERE table_id = :t AND name = :n"),
        {"t": table.table_id, "n": name},
    )
    return ref


def delete_tag(conn: Connection, table: TableRecord, name: str) -> Ref:
    ref = get_ref(conn, table, name, "tag")
    conn.execute(
        text("DELETE FROM refs WHERE table_id = :t AND name = :n"),
        {"t": table.table_id, "n": name},
    )
    return ref
