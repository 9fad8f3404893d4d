"""Fragments of one append are written in parallel, but the result is the input's order
(ingest/local.py, FragmentPipeline); a failed write leaves no write running behind it."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from omnitable.ingest.local import FragmentPipeline
from omnitable.vocabulary.descriptors import FragmentDescriptor


def _desc(table: pa.Table, seq: int) -> FragmentDescriptor:
    return FragmentDescriptor(f"f{seq}", "b", table.num_rows, f"p{seq}", [], seq)


def test_descriptors_come_back_in_submission_order_whatever_ends_first() -> None:
    def write(table: pa.Table, seq: int) -> FragmentDescriptor:
        time.sleep(0.02 if seq % 2 == 0 else 0)  # even fragments end after the next one
        return _desc(table, seq)

    pipeline = FragmentPipeline(write, workers=2)
    try:
        for rows in range(1, 8):
            pipeline.submit(pa.table({"x": list(range(rows))}))
        out = pipeline.finish()
    finally:
        pipeline.close()
    assert [(d.seq, d.row_count) for d in out] == [(i, i + 1) for i in range(7)]


def test_a_failed_write_raises_after_every_started_write_ended() -> None:
    running: set[int] = set()
    lock = threading.Lock()

    def write(table: pa.Table, seq: int) -> FragmentDescriptor:
        with lock:
            running.add(seq)
        time.sleep(0.01)
        with lock:
            running.discard(seq)
        if seq == 2:
            raise OSError("disk full")
        return _desc(table, seq)

    pipeline = FragmentPipeline(write, workers=2)
    with pytest.raises(OSError, match="disk full"):
        try:
            for _ in range(6):
                pipeline.submit(pa.table({"x": [1]}))
            pipeline.finish()
        finally:
            pipeline.close()
    assert not running  # nothing still writing once the error is seen
