"""The access log: which column sets reads touched together (docs/governance.md, "Access log").

Both readers (Python ``Table.scan``/``Table.read``, the JVM's scan planning) record one entry per
scan: one JSON line in a small file under ``<table location>/_access/``, named
``<epoch-ms>-<pid>-<random>.json`` (one file per scan from the JVM, per batch of scans from
Python: below), holding one JSON object per line::

    {"table_id": ..., "branch": "main", "version": 12, "columns": ["a", "b"],
     "column_ids": [3, 4], "reader": "python", "time": "2026-12-02T12:00:00.000Z", "count": 1}

``columns`` lists the columns the scan read (output and filter columns, system columns left
out) in ascending column id; a scan of every column is not recorded (it says nothing about
which columns belong together). ``count`` is how many scans the line stands for: the regroup job
compacts the log into one ``compacted-*.json`` file of distinct column sets with their counts
and drops entries older than its retention, so the log stays small.

Recording is best effort: any error is swallowed (logged at debug level) and never fails a read.
The files are never referenced by the catalog; the orphan-cleanup job leaves ``_access/`` alone.

The Python reader does not write on the read path: :func:`record_access` hands the entry to one
background thread per process, which collects entries for up to ``LINGER_S`` and then writes
those of each table in one file (creating a file cost 0.3-1.3 ms here, up to a fifth of a
selective read of a wide table, and a burst of scans then makes one file, not one per scan).
Whatever reads the log in this process (:func:`read_access`, the regroup job) first has the
entries handed over before it written (:func:`flush`), and those still waiting at exit are
written then; a process killed before that loses them (at most ``LINGER_S`` of scans).
"""

from __future__ import annotations

import atexit
import datetime as dt
import json
import logging
import multiprocessing.util
import os
import posixpath
import secrets
import threading
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
    """Record one entry for a scan of ``columns`` ((column id, name) pairs) of the table at
    ``location``: handed to the writer thread (module docstring), which writes it soon after;
    system columns are left out, and a scan of none is not recorded. Returns whether an entry
    was handed over (not when ``MAX_PENDING`` wait already); never raises."""
    try:
        cols = sorted(
            {(int(i), str(n)) for i, n in columns if not str(n).startswith(_SYSTEM_PREFIX)}
        )
        if not cols:
            return False
        now = dt.datetime.now(dt.timezone.utc)
        entry = AccessEntry(table_id, branch, version, tuple(n for _, n in cols),
                            tuple(i for i, _ in cols), reader, now)  # fmt: skip
        return _WRITER.submit(location, entry)
    except Exception as exc:
        log.debug("access log of %s not recorded: %s", location.uri, exc)
        return False


def flush(timeout: float | None = 30.0) -> bool:
    """Wait until every entry recorded so far in this process is written (or failed to be);
    whether it was within ``timeout`` seconds."""
    return _WRITER.flush(timeout)


MAX_PENDING = 10_000
"""Entries waiting to be written at most; more are dropped (the writer cannot keep up)."""

LINGER_S = 1.0
"""How long the writer collects entries after the first before it writes them (unless flushed):
a burst of scans makes one file per table, not one per scan."""


class _Writer:
    """The process's access-log writer: a queue and the daemon thread that drains it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: list[tuple[Location, AccessEntry]] = []
        self._busy = False
        self._flushing = 0  # callers waiting in flush(): write now, do not linger
        self._thread: threading.Thread | None = None

    def submit(self, location: Location, entry: AccessEntry) -> bool:
        with self._cond:
            if len(self._pending) >= MAX_PENDING:
                return False
            self._pending.append((location, entry))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="omnitable-access-log", daemon=True
                )
                self._thread.start()
                # a multiprocessing child (a DataLoader worker) ends by os._exit, not atexit;
                # registered here, once the child's start cleared the parent's finalizers
                multiprocessing.util.Finalize(None, flush, args=(10.0,), exitpriority=10)
            if len(self._pending) == 1:  # else the writer is awake already (lingering)
                self._cond.notify_all()
        return True

    def flush(self, timeout: float | None) -> bool:
        with self._cond:
            self._flushing += 1
            self._cond.notify_all()
            try:
                return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)
            finally:
                self._flushing -= 1

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._pending))
                self._cond.wait_for(lambda: self._flushing > 0, LINGER_S)
                taken, self._pending, self._busy = self._pending, [], True
            try:
                _write_entries(taken)
            except Exception as exc:  # never let the writer die: later entries would wait
                log.debug("access log entries not recorded: %s", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


_WRITER = _Writer()


def _after_fork_in_child() -> None:
    """A forked child (a DataLoader worker) gets its own writer: the parent's thread does not
    exist in it, and the parent's waiting entries are the parent's to write."""
    global _WRITER
    _WRITER = _Writer()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(lambda: flush(10.0))


def _write_entries(entries: list[tuple[Location, AccessEntry]]) -> None:
    """One file per table location holding its entries, one per line (errors logged)."""
    by_dir: dict[tuple[int, str], tuple[Location, list[str]]] = {}
    for location, entry in entries:
        key = (id(location.fs), location.child_path(ACCESS_DIR))
        by_dir.setdefault(key, (location, []))[1].append(entry.to_json() + "\n")
    for location, lines in by_dir.values():
        name = f"{int(time.time() * 1000):013d}-{os.getpid()}-{secrets.token_hex(4)}.json"
        try:
            _write(location, name, "".join(lines))
        except Exception as exc:
            log.debug("access log of %s not recorded: %s", location.uri, exc)


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
    """How many files the log has (the regroup job compacts it past a bound), this process's
    recorded entries written first."""
    flush()
    return len(_listing(location))


def read_access(
    location: Location, *, since: dt.datetime | None = None, branch: str | None = None
) -> list[AccessEntry]:
    """Every entry of the log at ``location`` recorded at or after ``since`` (None: all), of
    ``branch`` (None: every branch), this process's recorded entries written first.
    Unreadable files and lines are skipped."""
    flush()
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
    flush()
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
