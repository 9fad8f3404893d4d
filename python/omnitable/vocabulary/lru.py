"""A small thread-safe LRU map for the caches of one process (view records, freshness answers,
view datasets), safe across ``fork``: a lock another parent thread held stays held in a forked
child (a DataLoader worker), so every instance gets a new one there (the entries stay valid)."""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """At most ``size`` values by key, the least recently used evicted first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        _ALL.add(self)

    def get(self, key: Hashable) -> tuple[bool, V | None]:
        """``(True, value)`` when ``key`` is kept (now the most recently used), else
        ``(False, None)``."""
        with self._lock:
            if key not in self._items:
                return False, None
            self._items.move_to_end(key)
            return True, self._items[key]

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


_ALL: weakref.WeakSet[Lru] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for cache in list(_ALL):
        cache._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
