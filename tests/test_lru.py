"""The process caches' LRU map (vocabulary/lru.py): bounded, least recently used evicted first,
and usable in a forked child while another parent thread held its lock."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from omnitable.vocabulary.lru import Lru


def test_keeps_at_most_its_size_evicting_the_least_recently_used() -> None:
    cache: Lru[bool | None] = Lru(2)
    cache.put("a", None)  # None and False are values, told apart from a miss
    cache.put("b", False)
    assert cache.get("a") == (True, None)  # "a" is now the most recently used
    cache.put("c", True)
    assert cache.get("b") == (False, None)
    assert (cache.get("a"), cache.get("c"), len(cache)) == ((True, None), (True, True), 2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_gets_a_free_lock() -> None:
    cache: Lru[int] = Lru(4)
    cache.put("k", 1)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cache._lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: the parent thread's lock would block it (killed after 5 s)
        signal.alarm(5)
        os._exit(0 if cache.get("k") == (True, 1) else 1)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
