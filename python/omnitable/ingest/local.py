"""In-process ingest: stream batches, cut them into fragments, write column files.

Used for pandas, Arrow and file inputs (:class:`LocalWriter`); Spark DataFrames go through
:mod:`omnitable.ingest.spark` (the same fragment writing, in Spark tasks). Both are writers of
:func:`omnitable.ingest.append.append`, the one append path.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from omnitable.catalog.commit import CommitRequest
from omnitable.catalog.snapshot import Snapshot
from omnitable.context import TableContext
from omnitable.exceptions import ValidationError
from omnitable.format.writer import WriteOptions, write_fragment
from omnitable.ingest.conform import Conformer
from omnitable.ingest.ids import IdClaim
from omnitable.ingest.sources import record_batches
from omnitable.vocabulary.descriptors import FragmentDescriptor
from omnitable.vocabulary.names import MAX_ROW_ID, ROW_ID


@dataclass
class IngestResult:
    """Fragments written by one ingest, and what the committer must know about their ids."""

    fragments: list[FragmentDescriptor] = field(default_factory=list)
    rows: int = 0
    supplied_ids: np.ndarray | None = None

    @property
    def id_range(self) -> tuple[int, int] | None:
        if self.supplied_ids is None or len(self.supplied_ids) == 0:
            return None
        return int(self.supplied_ids.min()), int(self.supplied_ids.max())


class FragmentCutter:
    """Buffers conformed tables and hands out fragment-sized tables (rows or bytes target)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self._parts: list[pa.Table] = []
        self._rows = 0
        self._bytes = 0

    def add(self, table: pa.Table) -> list[pa.Table]:
        self._parts.append(table)
        self._rows += table.num_rows
        self._bytes += table.nbytes
        out = []
        while self._rows >= self.options.target_fragment_rows or (
            self._bytes >= self.options.target_fragment_bytes and self._rows > 0
        ):
            whole = pa.concat_tables(self._parts)
            n = self.options.target_fragment_rows
            if self._bytes >= self.options.target_fragment_bytes:
                per_row = max(1, self._bytes // max(1, self._rows))
                n = min(n, max(1, self.options.target_fragment_bytes // per_row))
            out.append(whole.slice(0, n))
            rest = whole.slice(n)
            self._parts = [rest] if rest.num_rows else []
            self._rows = rest.num_rows
            self._bytes = rest.nbytes if rest.num_rows else 0
        return out

    def finish(self) -> pa.Table | None:
        if not self._parts:
            return None
        whole = pa.concat_tables(self._parts)
        self._parts, self._rows, self._bytes = [], 0, 0
        return whole


MAX_FRAGMENT_WRITERS = 4  # fragments written at once (fewer on fewer cores): bounds memory


class FragmentPipeline:
    """Writes fragments on up to ``workers`` threads while the caller cuts the next ones
    (pyarrow writes without the GIL); at most ``workers`` fragments are in flight (default: one
    per core, at most ``MAX_FRAGMENT_WRITERS``). ``finish``
    returns the descriptors in submission order; ``close`` waits for every started write (so
    whoever cleans up after a failure sees all files) and cancels the rest."""

    def __init__(
        self, write: Callable[[pa.Table, int], FragmentDescriptor], workers: int | None = None
    ) -> None:
        self._write = write
        self._workers = workers or min(MAX_FRAGMENT_WRITERS, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="omnitable-ingest")
        self._pending: deque[Future[FragmentDescriptor]] = deque()
        self._done: list[FragmentDescriptor] = []
        self.submitted = 0

    def submit(self, table: pa.Table) -> None:
        self._pending.append(self._pool.submit(self._write, table, self.submitted))
        self.submitted += 1
        while len(self._pending) > self._workers:
            self._done.append(self._pending.popleft().result())

    def finish(self) -> list[FragmentDescriptor]:
        while self._pending:
            self._done.append(self._pending.popleft().result())
        return self._done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def ingest_batches(
    batches: Iterable[pa.RecordBatch],
    conformer: Conformer,
    options: WriteOptions,
    write_fragment: Callable[[pa.Table, int], FragmentDescriptor],
    reserve_ids: Callable[[int], int],
) -> IngestResult:
    """Conform, cut and write ``batches``; assigns ``_ai_unique_id_`` unless supplied.

    Fragments are written by a :class:`FragmentPipeline` (in parallel with cutting the next);
    ids are reserved and fragments numbered in input order, so the result does not depend on
    which write ends first. Always writes at least one fragment (an empty input makes one empty
    fragment, so the batch exists with its schema).

    Raises:
        ValidationError: null ids, or ids supplied in some batches but not others.
    """
    pipeline = FragmentPipeline(write_fragment)
    try:
        result = _ingest(batches, conformer, options, pipeline, reserve_ids)
        result.fragments = pipeline.finish()
        return result
    finally:
        pipeline.close()


def _ingest(
    batches: Iterable[pa.RecordBatch],
    conformer: Conformer,
    options: WriteOptions,
    pipeline: FragmentPipeline,
    reserve_ids: Callable[[int], int],
) -> IngestResult:
    """The body of :func:`ingest_batches`: submits every fragment to ``pipeline``."""
    result = IngestResult()
    cutter = FragmentCutter(options)
    supplied: bool | None = None
    id_parts: list[np.ndarray] = []

    def emit(table: pa.Table) -> None:
        if supplied:
            table = table.select([ROW_ID] + [c for c in table.column_names if c != ROW_ID])
        else:
            start = reserve_ids(table.num_rows)
            ids = pa.array(np.arange(start, start + table.num_rows, dtype=np.int64))
            table = table.add_column(0, ROW_ID, ids)
        pipeline.submit(table)
        result.rows += table.num_rows

    for batch in batches:
        table = conformer.conform(batch)
        has_ids = ROW_ID in table.column_names
        if supplied is None:
            supplied = has_ids
        elif supplied != has_ids:
            raise ValidationError(
                f"Cannot ingest: {ROW_ID} is present in some input batches and missing in "
                "others; supply it for every row or for none"
            )
        if has_ids:
            ids_col = table.column(ROW_ID)
            if ids_col.null_count:
                raise ValidationError(
                    f"Cannot ingest: {ids_col.null_count} row(s) have a null {ROW_ID}; every "
                    "supplied id must be a non-null int64"
                )
            id_parts.append(ids_col.to_numpy())
        if table.num_rows == 0:
            continue
        for piece in cutter.add(table):
            emit(piece)
    rest = cutter.finish()
    if rest is not None and rest.num_rows:
        emit(rest)
    if not pipeline.submitted:
        empty = conformer.target_schema().empty_table()
        if not supplied:
            empty = empty.drop_columns([ROW_ID])
        emit(empty)
    if supplied:
        result.supplied_ids = np.concatenate(id_parts) if id_parts else np.array([], np.int64)
    return result


def append_request(
    snap: Snapshot,
    batch_id: str,
    append_name: str,
    replaced: set[str],
    fragments: list[FragmentDescriptor],
    id_range: tuple[int, int] | None,
    run_id: str,
    engine: str,
) -> CommitRequest:
    """The commit of one append: the new batch and its fragments, replacing ``replaced``
    batches (mode="replace"), moving ``next_row_id`` past supplied ids (``id_range``). The
    caller sets its row-id claim (see :func:`omnitable.ingest.ids.commit_append`)."""
    return CommitRequest(
        op="append",
        base_version=snap.version,
        run_id=run_id,
        summary={
            "batch": append_name,
            "rows": sum(f.row_count for f in fragments),
            "fragments": len(fragments),
            "replaced": bool(replaced),
            "engine": engine,
        },
        new_batches=[(batch_id, append_name)],
        removed_batches=sorted(replaced),
        new_fragments=fragments,
        removed_fragments=[f.fragment_id for f in snap.fragments if f.batch_id in replaced],
        next_row_id_at_least=None if id_range is None else min(id_range[1] + 1, MAX_ROW_ID),
    )


def duplicate_ids(ids: np.ndarray, limit: int = 5) -> list[int]:
    """Up to ``limit`` values occurring more than once in ``ids``."""
    if len(ids) < 2:
        return []
    s = np.sort(ids)
    dup = np.unique(s[1:][s[1:] == s[:-1]])
    return [int(x) for x in dup[:limit]]


@dataclass(frozen=True)
class BatchTarget:
    """Where a writer puts one new batch."""

    ctx: TableContext
    snap: Snapshot
    append_name: str
    batch_id: str
    options: WriteOptions


@dataclass
class Written:
    """What a writer put on storage for one batch: its fragments and the ids they claim
    (supplied ids already checked for nulls and duplicates within the input)."""

    fragments: list[FragmentDescriptor]
    rows: int
    claim: IdClaim
    supplied: bool
    id_range: tuple[int, int] | None = None


class BatchWriter(Protocol):
    """Writes one batch's fragments; records every file it writes in ``files`` as it goes."""

    engine: str

    def describe(self) -> dict[str, Any]:
        """What the run records about this writer (besides the batch name)."""
        ...

    def write(self, target: BatchTarget, files: list[str]) -> Written: ...


class LocalWriter:
    """Writes a pandas / Arrow / file input in this process (:mod:`omnitable.ingest.local`)."""

    engine = "local"

    def __init__(self, data: Any) -> None:
        self._data = data

    def describe(self) -> dict[str, Any]:
        return {}

    def write(self, target: BatchTarget, files: list[str]) -> Written:
        ctx, snap = target.ctx, target.snap
        conformer = Conformer(ctx.name, snap.user_columns)
        group_of = {c.name: c.group_name for c in snap.columns}
        physical = {c.name: c.physical_name for c in snap.columns}
        location = ctx.location

        def write(table: pa.Table, seq: int) -> FragmentDescriptor:
            desc = write_fragment(location, target.append_name, target.batch_id, table, group_of,
                                  physical, target.options, seq)  # fmt: skip
            files.extend(location.child_path(f.path) for f in desc.files)
            return desc

        result = ingest_batches(
            record_batches(self._data, conformer.target_schema()),
            conformer,
            target.options,
            write,
            lambda n: ctx.catalog.reserve_row_ids(ctx.record, n),
        )
        if result.supplied_ids is None:
            claim = IdClaim.generated(result.fragments, snap.version)
            return Written(result.fragments, result.rows, claim, supplied=False)
        dupes = duplicate_ids(result.supplied_ids)
        if dupes:
            raise ValidationError(
                f"Cannot append to table '{ctx.name}': duplicate {ROW_ID} values in the input, "
                f"e.g. {dupes}"
            )
        claim = IdClaim(snap.version, supplied=np.unique(result.supplied_ids))
        return Written(result.fragments, result.rows, claim, True, result.id_range)
