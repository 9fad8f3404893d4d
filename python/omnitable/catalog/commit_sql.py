"""The named statements of commit.sql: the SQL of an append's commit that the Python committer
and the JVM committer (jvm/.../catalog/CommitSql.scala) share (docs/catalog.md, "Commits and
concurrency", "Two implementations")."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$")


@cache
def statements() -> dict[str, str]:
    """Statement name -> SQL text (comments dropped, lines joined), parameters as ``:name``."""
    text = resources.files("omnitable.catalog").joinpath("commit.sql").read_text("utf-8")
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        m = _HEADER.match(stripped)
        if m:
            current = m.group(1)
            out[current] = []
        elif stripped and not stripped.startswith("--") and current is not None:
            out[current].append(stripped)
    return {name: " ".join(lines) for name, lines in out.items()}


def sql(name: str, **parts: str) -> str:
    """Statement ``name``, with its ``{placeholders}`` (a visibility clause, an IN list) filled."""
    text = statements()[name]
    return text.format(**parts) if parts else text
