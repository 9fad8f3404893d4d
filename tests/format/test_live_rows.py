"""The live rows of deletion vectors (``format/live_rows.py``): right for every vector, kept
for the next read of the same vector, within a bound."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forking import start_forked, wait_forked
from omnitable.catalog.records import DeletionRecord
from omnitable.format import live_rows as lr
from omnitable.vocabulary.deletions import encode_vector


def _vector(mask: np.ndarray, fragment: str = "f") -> DeletionRecord:
    return DeletionRecord("v", fragment, len(mask), int(mask.sum()), encode_vector(mask), 1)


@pytest.fixture(autouse=True)
def _empty() -> None:
    lr.forget()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300))
def test_live_rows_are_the_rows_not_deleted(deleted: list[bool]) -> None:
    mask = np.array(deleted)
    keep, offsets = lr.live_rows(_vector(mask))
    assert keep.to_pylist() == (~mask).tolist()
    assert offsets.type == pa.int32() and offsets.to_pylist() == np.flatnonzero(~mask).tolist()


def test_live_rows_are_kept_by_content_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    a, b = (rng.random(10_000) < 0.1 for _ in range(2))
    first = lr.live_rows(_vector(a))
    assert lr.live_rows(_vector(a))[1] is first[1]  # a new record of the same vector: kept
    assert lr.live_rows(_vector(b))[1] is not first[1]  # another vector
    assert lr.live_rows(_vector(a, fragment="g"))[1] is not first[1]  # another fragment
    size = first[0].nbytes + first[1].nbytes
    monkeypatch.setattr(lr, "MAX_BYTES", int(size * 1.5))  # room for one
    lr.forget()
    kept_a = lr.live_rows(_vector(a))
    assert lr.live_rows(_vector(a))[1] is kept_a[1]
    lr.live_rows(_vector(b))  # evicts a, the least recently used
    again = lr.live_rows(_vector(a))
    assert again[1] is not kept_a[1] and again[1].equals(kept_a[1])
    assert lr._kept_bytes <= lr.MAX_BYTES
    monkeypatch.setattr(lr, "MAX_BYTES", 10)  # larger than the bound: worked out, not kept
    lr.forget()
    assert lr.live_rows(_vector(a))[1] is not lr.live_rows(_vector(a))[1]
    assert lr._kept_bytes == 0


def test_threads_keep_the_byte_count_of_what_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers on several threads share the kept entries: the byte count stays the sum of the
    entries kept, within the bound, and every answer is right."""
    rng = np.random.default_rng(6)
    masks = [rng.random(5_000 + 100 * i) < 0.2 for i in range(8)]
    one = lr.live_rows(_vector(masks[0]))
    monkeypatch.setattr(lr, "MAX_BYTES", 3 * (one[0].nbytes + one[1].nbytes))
    lr.forget()

    def work(seed: int) -> bool:
        picks = np.random.default_rng(seed).integers(0, len(masks), 200)
        return all(
            lr.live_rows(_vector(masks[i]))[1].to_pylist() == np.flatnonzero(~masks[i]).tolist()
            for i in picks
        )

    with ThreadPoolExecutor(6) as pool:
        assert all(pool.map(work, range(12)))
    kept = sum(k[0].nbytes + k[1].nbytes for k in lr._KEPT.values())
    assert lr._kept_bytes == kept <= lr.MAX_BYTES and len(lr._KEPT) >= 2


def _in_child_while_the_parent_holds_the_lock(mask: np.ndarray) -> None:
    assert lr._kept_bytes == 0 and not lr._KEPT  # a forked child starts empty
    offsets = lr.live_rows(_vector(mask))[1]  # with a lock of its own
    assert offsets.to_pylist() == np.flatnonzero(~mask).tolist()
    assert lr.live_rows(_vector(mask))[1] is offsets


def test_a_forked_child_starts_empty_with_a_lock_of_its_own() -> None:
    """A DataLoader worker forked while another thread of the parent holds the cache's lock
    neither inherits the parent's entries nor waits on that lock."""
    mask = np.random.default_rng(8).random(1_000) < 0.3
    lr.live_rows(_vector(mask))
    assert lr._kept_bytes > 0
    with lr._LOCK:  # as a reader thread of the parent would be at the fork
        child = start_forked(_in_child_while_the_parent_holds_the_lock, mask)
        wait_forked(child, timeout_s=60)
    assert lr._kept_bytes > 0  # the parent's entries are untouched
