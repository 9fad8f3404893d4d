"""Session settings held for the duration of a block, shared by overlapping blocks.

Some write settings reach a Spark write only through the session (Delta passes no Parquet write
option on to the files it writes), so a caller that needs them sets them for its write and gives
the session back as it was. Blocks may overlap on one session (two governance threads sharing
it): the first to enter records the session's values and sets the settings, later ones only
count themselves in, and the last to leave restores the recorded values. Every block must ask
for the same settings on a session (other settings while they are held are refused).

A session is known by its Spark Connect session id, else by its Python object: two Python
objects wrapping one classic JVM session, or several processes sharing one Connect session, are
not coordinated. Works with classic and Spark Connect sessions (``spark.conf`` only); the conf
calls of one session run under that session's lock only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


@dataclass
class _Session:
    """What blocks hold on one session: ``count`` blocks of ``settings``, ``before`` the
    session's own values to put back; ``unrestored`` those a failed restore could not (put
    back by the next one)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    count: int = 0
    settings: dict[str, str] = field(default_factory=dict)
    before: dict[str, str | None] = field(default_factory=dict)
    unrestored: dict[str, str | None] = field(default_factory=dict)


_SESSIONS: dict[Any, _Session] = {}
_LOCK = threading.Lock()  # guards _SESSIONS only


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` set in ``spark`` while the block runs, then the session's own values back
    (unset where it had none) once no overlapping block holds them (module docstring). A
    failure to restore is raised, or logged when the block itself raised.

    Raises:
        ValueError: another block holds other settings on this session.
    """
    held = _session(spark)
    _enter(spark, held, dict(settings))
    try:
        yield
    except BaseException:
        _leave(spark, held, quiet=True)
        raise
    _leave(spark, held, quiet=False)


def _session(spark: SparkSession) -> _Session:
    key = getattr(spark, "session_id", None) or ("object", id(spark))
    with _LOCK:
        return _SESSIONS.setdefault(key, _Session())


def _enter(spark: SparkSession, held: _Session, wanted: dict[str, str]) -> None:
    with held.lock:
        if held.count > 0:
            if held.settings != wanted:
                raise ValueError(f"session settings {held.settings} are held; cannot hold {wanted}")
            held.count += 1
            return
        before = {k: spark.conf.get(k, None) for k in wanted}
        before.update({k: v for k, v in held.unrestored.items() if k in wanted})
        try:
            for k, v in wanted.items():
                spark.conf.set(k, v)
        except BaseException:
            held.unrestored = _restore(spark, before)
            raise
        held.count, held.settings, held.before, held.unrestored = 1, wanted, before, {}


def _leave(spark: SparkSession, held: _Session, *, quiet: bool) -> None:
    with held.lock:
        held.count -= 1
        if held.count > 0:
            return
        held.unrestored = _restore(spark, held.before)
    if held.unrestored:
        message = f"could not restore session settings {sorted(held.unrestored)}"
        if quiet:
            log.warning("%s (the next block on this session tries again)", message)
        else:
            raise RuntimeError(message + "; the next block on this session tries again")


def _restore(spark: SparkSession, before: Mapping[str, str | None]) -> dict[str, str | None]:
    """Put every key of ``before`` back (unset where None), each attempted; those that failed."""
    failed: dict[str, str | None] = {}
    for k, old in before.items():
        try:
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)
        except Exception as exc:  # the others are still restored
            log.debug("session setting %s not restored: %s", k, exc)
            failed[k] = old
    return failed


def _after_fork_in_child() -> None:
    """Locks another parent thread held stay held in a forked child: new ones."""
    global _LOCK
    _LOCK = threading.Lock()
    for held in _SESSIONS.values():
        held.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
