"""Session settings held for the duration of a block, shared by overlapping blocks.

Some write settings reach a Spark write only through the session (Delta passes no Parquet write
option on to the files it writes), so a caller that needs them sets them for its write and gives
the session back as it was. Blocks may overlap on one session (two governance threads sharing
it): the first to enter records the session's values and sets the settings, later ones only
count themselves in, and the last to leave restores the recorded values. Every block must ask
for the same settings on a session (a second set of keys while one is held is refused).
Works with classic and Spark Connect sessions (``spark.conf`` only).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class _Held:
    settings: dict[str, str]
    before: dict[str, str | None]
    count: int


_HELD: dict[int, _Held] = {}  # by id() of the session object (alive while held)
_LOCK = threading.Lock()


@contextlib.contextmanager
def session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` set in ``spark`` while the block runs, then the session's own values back
    (unset where it had none) once no overlapping block holds them (module docstring).

    Raises:
        ValueError: another block holds other settings on this session.
    """
    key, wanted = id(spark), dict(settings)
    with _LOCK:
        held = _HELD.get(key)
        if held is None:
            before = {k: spark.conf.get(k, None) for k in wanted}
            try:
                for k, v in wanted.items():
                    spark.conf.set(k, v)
            except BaseException:
                _restore(spark, before)
                raise
            _HELD[key] = _Held(wanted, before, 1)
        elif held.settings != wanted:
            raise ValueError(f"session settings {held.settings} are held; cannot hold {wanted}")
        else:
            held.count += 1
    try:
        yield
    finally:
        with _LOCK:
            held = _HELD[key]
            held.count -= 1
            if held.count == 0:
                del _HELD[key]
                _restore(spark, held.before)


def _restore(spark: SparkSession, before: Mapping[str, str | None]) -> None:
    """Put every key of ``before`` back (unset where None), each attempted; the first failure
    is raised after the others."""
    failed: BaseException | None = None
    for k, old in before.items():
        try:
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)
        except Exception as exc:  # the others are still restored
            failed = failed or exc
    if failed is not None:
        raise failed


def _after_fork_in_child() -> None:
    """A forked child holds no block of its parent's: a fresh lock and nothing held."""
    global _LOCK
    _LOCK = threading.Lock()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
