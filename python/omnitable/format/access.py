"""The access log: which column sets reads touched together (docs/governance.md, "Access log").

Both readers (Python ``Table.scan``/``Table.read``, the JVM's scan planning) record one entry per
scan: one small JSON file under ``<table location>/_access/``, named
``<epoch-ms>-<random>.json``, holding one JSON object per line::

    {"table_id": ..., "branch": "main", "version": 12, "columns": ["a", "b"],
     "column_ids": [3, 4], "reader": "python", "time": "2026-12-02T12:00:00.000Z", "count": 1}

``columns`` lists the columns the scan read (output and filter columns, system columns left
out) in ascending column id; a scan of every column is not recorded (it says nothing about
which columns belong together). ``count`` is how many scans the line stands for: the regroup job
compacts the log into one ``compacted-*.json`` file of distinct column sets with their counts
and drops entries older than its retention, so the log stays small.

Recording is best effort: any error is swallowed (logged at debug level) and never fails a read.
The files are never referenced by the catalog; the orphan-cleanup job leaves ``_access/`` alone.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import posixpath
import secrets
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

from omnitable._failpoints import failpoint
from omnitable.format.fs import Location

log = logging.getLogger(__name__)

ACCESS_DIR = "_access"
"""The access log's directory under the table location."""

_SYSTEM_PREFIX = "_ai_"


@dataclass(frozen=True)
class AccessEntry:
    """One line of the log: ``count`` scans of ``column_ids`` (names as recorded)."""

    table_id: str
    branch: str | None
    version: int | None
    columns: tuple[str, ...]
    column_ids: tuple[int, ...]
    reader: str
    time: dt.datetime
    count: int = 1

    def to_json(self) -> str:
        return json.dumps({
            "table_id": self.table_id, "branch": self.branch, "version": self.version,
            "columns": list(self.columns), "column_ids": list(self.column_ids),
            "reader": self.reader, "time": _iso(self.time), "count": self.count,
        }, separators=(",", ":"))  # fmt: skip

    @staticmethod
    def from_json(line: str) -> AccessEntry:
        d = json.loads(line)
        return AccessEntry(
            str(d["table_id"]), d.get("branch"), d.get("version"),
            tuple(str(c) for c in d["columns"]), tuple(int(i) for i in d["column_ids"]),
            str(d.get("reader", "unknown")), _parse(str(d["time"])), int(d.get("count", 1)),
        )  # fmt: skip


def _iso(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse(text: str) -> dt.datetime:
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.timezone.utc)


_made_dirs: set[str] = set()


def record_access(
    location: Location,
    *,
    table_id: str,
    branch: str | None,
    version: int | None,
    columns: Iterable[tuple[int, str]],
    reader: str = "python",
) -> bool:
    """Write one entry for a scan of ``columns`` ((column id, name) pairs) of the table at
    ``location``; system columns are left out, and a scan of none is not recorded. Returns
    whether an entry was written; never raises."""
    try:
        cols = sorted(
            {(int(i), str(n)) for i, n in columns if not str(n).startswith(_SYSTEM_PREFIX)}
        )
        if not cols:
            return False
        now = dt.datetime.now(dt.timezone.utc)
        entry = AccessEntry(table_id, branch, version, tuple(n for _, n in cols),
                            tuple(i for i, _ in cols), reader, now)  # fmt: skip
        name = f"{int(time.time() * 1000):013d}-{os.getpid()}-{secrets.token_hex(4)}.json"
        _write(location, name, entry.to_json() + "\n")
        return True
    except Exception as exc:
        log.debug("access log of %s not recorded: %s", location.uri, exc)
        return False


def _write(location: Location, name: str, text: str) -> None:
    directory = location.child_path(ACCESS_DIR)
    if directory not in _made_dirs:
        location.fs.create_dir(directory, recursive=True)
        _made_dirs.add(directory)
    with location.fs.open_output_stream(posixpath.join(directory, name)) as out:
        out.write(text.encode())


def _listing(location: Location, *, entries_only: bool = True) -> list[pafs.FileInfo]:
    """The log's files; ``entries_only``: only ``*.json`` (not Hadoop's ``.*.crc`` sidecars)."""
    selector = pafs.FileSelector(location.child_path(ACCESS_DIR), allow_not_found=True)
    return [
        i for i in location.fs.get_file_info(selector)
        if i.type == pafs.FileType.File
        and (not entries_only or (i.base_name.endswith(".json") and not i.base_name.startswith(".")))
    ]  # fmt: skip


def count_access_files(location: Location) -> int:
    """How many files the log has (the regroup job compacts it past a bound)."""
    return len(_listing(location))


def read_access(
    location: Location, *, since: dt.datetime | None = None, branch: str | None = None
) -> list[AccessEntry]:
    """Every entry of the log at ``location`` recorded at or after ``since`` (None: all), of
    ``branch`` (None: every branch). Unreadable files and lines are skipped."""
    out: list[AccessEntry] = []
    for info in _listing(location):
        for entry in _entries(location, info.path):
            if since is not None and entry.time < since:
                continue
            if branch is not None and entry.branch != branch:
                continue
            out.append(entry)
    return out


def _entries(location: Location, path: str) -> list[AccessEntry]:
    try:
        with location.fs.open_input_stream(path) as handle:
            text = handle.read().decode()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(AccessEntry.from_json(line))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def co_read_sets(entries: Iterable[AccessEntry]) -> Counter[tuple[int, ...]]:
    """Scans per distinct set of column ids read together."""
    counts: Counter[tuple[int, ...]] = Counter()
    for e in entries:
        counts[e.column_ids] += e.count
    return counts


def compact_access_log(location: Location, *, keep_since: dt.datetime) -> dict[str, int]:
    """Replace the log's files by one ``compacted-*.json`` holding its entries at or after
    ``keep_since`` merged by (branch, column set, reader), each with its scan count and newest
    time; older entries are dropped. Files written meanwhile are kept. Returns
    ``{"files_before", "entries_kept", "entries_dropped"}``."""
    infos = _listing(location, entries_only=False)
    merged: dict[tuple[Any, ...], AccessEntry] = {}
    dropped = 0
    for info in infos:
        if not info.base_name.endswith(".json") or info.base_name.startswith("."):
            continue
        for e in _entries(location, info.path):
            if e.time < keep_since:
                dropped += e.count
                continue
            key = (e.table_id, e.branch, e.column_ids, e.reader)
            old = merged.get(key)
            if old is None:
                merged[key] = e
            else:
                merged[key] = AccessEntry(e.table_id, e.branch, max(old.version or 0, e.version or 0),
                                          e.columns if e.time >= old.time else old.columns,
                                          e.column_ids, e.reader, max(old.time, e.time),
                                          old.count + e.count)  # fmt: skip
    failpoint("access.compact.before_write")  # read, not yet replaced
    if merged:
        name = f"compacted-{int(time.time() * 1000):013d}-{secrets.token_hex(4)}.json"
        _write(location, name, "".join(e.to_json() + "\n" for e in merged.values()))
    for info in infos:
        try:
            location.fs.delete_file(info.path)
        except OSError:
            continue
    return {"files_before": len(infos), "entries_kept": len(merged), "entries_dropped": dropped}


def summarize(entries: Iterable[AccessEntry], names: Mapping[int, str]) -> list[dict[str, Any]]:
    """Co-read column sets, most scanned first: ``{"columns": [names], "count", "last"}``;
    column ids no longer in ``names`` (dropped columns) are left out."""
    counts: Counter[tuple[int, ...]] = Counter()
    last: dict[tuple[int, ...], dt.datetime] = {}
    for e in entries:
        ids = tuple(i for i in e.column_ids if i in names)
        if not ids:
            continue
        counts[ids] += e.count
        last[ids] = max(last.get(ids, e.time), e.time)
    return [
        {"columns": [names[i] for i in ids], "count": n, "last": last[ids]}
        for ids, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
